// OptimizerState: the fp32 master weights and Adam moments of every chunk, as the trainer keeps
// them on the host -- cut into pieces (model/plan/placement.h's StatePiece, options.sub_group_size),
// one image per piece in an OptimizerPipeline homed in pinned memory or on NVMe, and each tensor's
// share of each piece (where its master and moments sit in the piece's image and its gradient in
// the chunk's working layout). For the CPU optimizer this is the state; for the device optimizer
// it is the host mirror that checkpoints read and write. Not an optimizer (offload/optimizer.h) and
// not a checkpoint's names (model/ckpt/optimizer_buffers.h).
// Thread-safety: one driving thread (as OptimizerPipeline). Lifetime: the pinned pool, store and
// trace recorder outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/adam.h"
#include "model/net/param_layout.h"
#include "model/plan/placement.h"
#include "model/train/train_options.h"
#include "offload/chunk_shard.h"
#include "offload/nvme_store.h"
#include "offload/optimizer_pipeline.h"
#include "offload/trace.h"
#include "runtime/pinned_pool.h"

namespace strata::model {

// One tensor's share of one piece.
struct PieceTensor {
  uint64_t master_element = 0;  // first fp32 element in the piece (master, fp32 moments, 8-bit codes)
  uint64_t scale_at = 0;     // 8-bit: first block scale in the piece's scales
  uint64_t work_at = 0;      // first element in the chunk's working layout (copy-out)
  uint64_t grad_at = 0;      // first element in the chunk's gradient sum: work_at less the shard's begin
  uint64_t n = 0;
  bool decay = false;
};

// The copy-out format of an Adam pass for working precision `dt`: the rounded 16-bit weights it
// writes beside the fp32 masters (none for fp32, whose masters are the weights).
inline kernels::CopyOut adam_copy_out(DType dt) {
  return dt == DType::bf16 ? kernels::CopyOut::bf16 : dt == DType::f16 ? kernels::CopyOut::f16 : kernels::CopyOut::none;
}

class OptimizerState {
 public:
  // `layout`: the model's working layout; `masters`: the same parameters at fp32 (the master
  // layout). The images start zeroed. Errors: invalid_argument for an nvme home (options.
  // optimizer_home) without a store; OptimizerPipeline::create's.
  // Across ranks (`ranks` > 1, the CPU optimizer of a partitioned run) the state holds only rank
  // `rank`'s pieces (rank_state_pieces, model/plan/placement.h): 1/N of every chunk; a chunk whose
  // shard is empty has no piece; 8-bit moments' block scales are cut with their blocks.
  // failed_precondition when the rank homes nothing at all (more ranks than the model's chunks have
  // blocks) or for 8-bit moments whose blocks a shard would cut (q8_block_split).
  static StatusOr<std::unique_ptr<OptimizerState>> create(const ParamLayout& layout, const ParamLayout& masters,
                                                          const TrainOptions& options, PinnedPool& pinned,
                                                          NvmeStore* store, TraceRecorder* trace, int ranks = 1,
                                                          int rank = 0);
  OptimizerState(const OptimizerState&) = delete;
  OptimizerState& operator=(const OptimizerState&) = delete;

  OptimizerPipeline& pipeline() { return *pipeline_; }
  const OptimizerPipeline& pipeline() const { return *pipeline_; }
  // The pieces, chunk after chunk; order(): 0 .. pieces().size() - 1, every walk's order.
  const std::vector<StatePiece>& pieces() const { return pieces_; }
  std::span<const size_t> order() const { return order_; }
  // Indices into pieces() of chunk c's pieces (a run of order()).
  std::span<const size_t> pieces_of(size_t chunk) const;
  // Piece p is its chunk's last.
  bool last_of_chunk(size_t p) const { return p + 1 == first_piece_[pieces_[p].chunk + 1]; }
  size_t chunk_count() const { return chunk_layouts_.size(); }
  // Chunk c's state as if it were one image (the sizes of its checkpoint buffers).
  const OptimizerStateLayout& chunk_layout(size_t c) const { return chunk_layouts_[c]; }
  // Piece p's tensors, layout order.
  const std::vector<PieceTensor>& tensors(size_t p) const { return tensors_[p]; }
  // Across ranks: this rank's share of every chunk (one rank: the whole chunks).
  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  bool partitioned() const { return ranks_ > 1; }
  // Chunk c's working-layout shard this rank homes (the gradient's, offload/chunk_shard.h) and its
  // fp32 master elements (master_shard); the whole chunk at one rank.
  const ChunkShard& shard(size_t c) const { return shards_[c]; }
  const ElementRange& master_range(size_t c) const { return master_ranges_[c]; }

  // One walk over every piece that sets its masters to its chunk's fp32 values (master layout,
  // the chunk's padded elements, padding zero) from `produce`, called once per chunk: into the
  // piece's image when the chunk is one piece, else into one buffer of the chunk. Partitioned: every
  // chunk's produce is called, in chunk order, on every rank (a producer may be a collective), and
  // only this rank's pieces kept.
  // `pieces` (null: every piece): only these pieces (indices into pieces(), in order(), whole
  // chunks) are filled, the others keep their masters -- a split update's device part; one rank.
  using ChunkValues = std::function<Status(size_t chunk, float* values)>;
  Status fill_masters(const ChunkValues& produce, bool write_back, const std::vector<size_t>* pieces = nullptr);
  // The indices of the pieces of the chunks `chunks` marks (per chunk), in order().
  std::vector<size_t> pieces_where(const std::vector<bool>& chunks) const;
  // A copy of the fp32 master of tensor `spec` of the master layout (spec.elements values); one
  // walk over its chunk's pieces.
  StatusOr<std::vector<float>> master(const ParamSpec& spec);

 private:
  OptimizerState() = default;
  void build_tensors(const ParamLayout& layout, const ParamLayout& masters);

  std::unique_ptr<OptimizerPipeline> pipeline_;      // one image per piece
  std::vector<StatePiece> pieces_;                   // chunk by chunk
  std::vector<size_t> first_piece_;                  // per chunk (and one past the last): its first piece
  std::vector<size_t> order_;                        // 0 .. pieces_.size() - 1
  std::vector<OptimizerStateLayout> chunk_layouts_;  // per chunk, as one image
  std::vector<std::vector<PieceTensor>> tensors_;    // per piece (built once)
  int ranks_ = 1, rank_ = 0;
  std::vector<ChunkShard> shards_;                   // per chunk
  std::vector<ElementRange> master_ranges_;          // per chunk
};

}  // namespace strata::model
