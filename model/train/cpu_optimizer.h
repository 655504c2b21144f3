// CpuOptimizer: the Optimizer (offload/optimizer.h) that runs AdamW on the CPU. Each chunk's
// gradient is the fp32 sum a GradientOffloader accumulated in host memory; its masters and moments
// are an OptimizerState's pieces (pinned, or on NVMe through the pipeline's staging ring); the update
// is one walk through them, read(c + 1) | AdamW(c) | write(c - 1), and each chunk's new working
// weights (rounded to bf16/fp16 by the same pass for 16-bit training) go home through the
// WeightSource's update_buffer / commit_update (resident: uploaded; pinned CPU: in place; NVMe:
// written behind). The walk runs as far as prepare(c) asks, so the update of chunk c runs just
// before the next forward acquires c, overlapping the compute of the chunks before it. Not the
// Adam arithmetic (offload/cpu_adam.h) and not the walk's I/O (offload/optimizer_pipeline.h).
// Across ranks (a partitioned state, OptimizerState::partitioned, with `gather`): each rank updates
// its shard of every chunk (its gradient sum from a GradientExchange's inner offloader), and the
// chunk's update buffer, this rank's shard filled in, is all-gathered before the commit, so every
// rank's weight source gets the whole chunk. The chunks land in order on every rank (a chunk this
// rank homes nothing of still takes part in its gather): the gathers are collectives.
// A split update's CPU part (`updates`, one rank): it updates only the chunks `updates` marks (a
// partly resident run's paged chunks, whose gradient sums `grads` holds as its chunk 0, 1, ... in
// the model's order, offload/chunk_route.h) and walks only their pieces of the state; a
// DeviceOptimizer updates the others.
// Thread-safety and ordering: Optimizer's. Lifetime: the state, gradients, weights, pool, gather
// and trace recorder outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "model/train/optimizer_state.h"
#include "model/train/train_options.h"
#include "offload/chunk_route.h"
#include "offload/chunk_source.h"
#include "offload/gradient_offloader.h"
#include "offload/optimizer.h"
#include "offload/shard_gather.h"
#include "offload/trace.h"
#include "runtime/thread_pool.h"

namespace strata::model {

class CpuOptimizer final : public Optimizer {
 public:
  // `element_bytes`: the working precision's width (the gradient and weights layout). `pool` may
  // be null: Adam then runs on the calling thread. `trace` may be null.
  // `gather`: across ranks, the all-gather of the updated weights (null at one rank). `updates`
  // (empty: every chunk): the chunks it updates, per chunk of the state (see the top).
  CpuOptimizer(OptimizerState& state, GradientOffloader& grads, WeightSource& weights, ThreadPool* pool,
               const TrainOptions& options, uint64_t element_bytes, TraceRecorder* trace,
               ShardGather* gather = nullptr, const std::vector<bool>& updates = {});
  ~CpuOptimizer() override = default;

  std::string_view where() const override { return "cpu"; }
  // Begins the walk (NVMe-homed state read ahead from here on, written behind) and the read of
  // chunk 0's gradient; applies nothing yet.
  Status begin_update(const UpdateStep& update) override;
  // Applies the update of every chunk <= c + 1 not yet updated: a paging weight source may fetch
  // c + 1 ahead while c computes, so c + 1 lands first too.
  Status prepare(size_t c) override { return apply(c + 1); }
  Status finish_update() override { return apply(SIZE_MAX); }
  bool pending() const override { return pending_.has_value(); }
  Status state_to_host() override { return Status::ok(); }  // the host images are the state
  Status state_from_host() override { return Status::ok(); }

 private:
  Status apply(size_t through);  // updates every chunk <= through not yet updated
  Status update_piece(size_t p, ChunkState& state);
  // Chunk c's update buffer is filled (this rank's shard of it, across ranks): gathers it across
  // ranks and commits it.
  Status land(size_t c, std::byte* out);
  void abandon();  // an update that failed: no more commits
  // Chunk c is updated here; its index in grads_.
  bool mine(size_t c) const { return route_.marked(c); }
  size_t local(size_t c) const { return route_.index(c); }
  // The first chunk after c updated here, or chunk_count().
  size_t next_mine(size_t c) const;
  // AdamW over the tensors of piece `p` on the CPU (thread pool), its state in `state`; `grads`
  // and `copy_out` are its chunk's (working layout).
  Status adam(size_t p, const ChunkState& state, const float* grads, std::byte* copy_out);

  // Constant after construction.
  OptimizerState& state_;
  GradientOffloader& grads_;
  WeightSource& weights_;
  ThreadPool* const pool_;
  const TrainOptions options_;
  const uint64_t element_bytes_;
  TraceRecorder* const trace_;
  ShardGather* const gather_;
  const ChunkRoute route_;          // marked: the chunks updated here (all of them but in a split)
  const std::vector<size_t> walk_;  // the pieces of those chunks: every update's walk
  // The update in progress (begin_update .. the walk's end) and the next chunk to land.
  std::optional<UpdateStep> pending_;
  size_t next_chunk_ = 0;
  // The chunk whose gradient is read and whose update buffer is filled.
  struct ChunkUpdate {
    size_t chunk = SIZE_MAX;  // SIZE_MAX: none
    const float* grads = nullptr;
    std::byte* out = nullptr;
  } updating_;
};

}  // namespace strata::model
