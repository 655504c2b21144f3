// DeviceOptimizer: the Optimizer (offload/optimizer.h) that runs AdamW on the device, beside
// resident weights: the backend's adam_update op over fp32 masters (16-bit training; fp32 updates
// the weights in place) and fp32 moments in device memory (or adam8bit_update over 8-bit moments:
// codes and block scales, the CPU's bits), the gradient the model's DeviceGrads
// accumulated; for 16-bit training the rounded weights are written into the resident chunks by
// the same pass. Nothing crosses PCIe in a step. begin_update queues the whole update on the
// compute stream (the next forward's compute follows it in stream order), so prepare has nothing
// left to do and an update is never pending on the host. An OptimizerState holds the host mirrors
// of the state for checkpoints (state_to_host / state_from_host). Not a paging optimizer: the
// weights must be resident (ResidentWeights).
// Thread-safety and ordering: Optimizer's. Lifetime: the backend, weights, gradients and state
// outlive it; the destructor waits for the backend's streams and returns its device blocks.
// A split update (`updates`, one rank): it updates only the chunks `updates` marks -- the resident
// layers of a partly resident run -- whose weights and gradients `weights` and `grads` hold as their
// chunk 0, 1, ... in the model's order (offload/chunk_route.h); its device state and its share of
// the host mirrors are those chunks'; a CpuOptimizer updates the rest (optimizer_factory.h).
// Across ranks (DeviceGrads::partitioned, ZeRO): this rank's masters and moments are those of its
// shard of each chunk (offload/chunk_shard.h), 1/N of the model's; it updates its shard from its
// shard of the gradient sum, then the ranks all-gather the chunk's new working weights, so every
// rank holds the whole updated chunk (AdamW is elementwise: the same bits as one rank's update).
// 8-bit moments too: a shard's cut is a whole number of 256-element blocks into the tensor it cuts
// (q8_block_split names a layout where it is not; OptimizerState::create refuses it), so a rank's
// blocks and their scales are one rank's.
// The host mirrors (`state`) are partitioned alike (OptimizerState over the same ranks: each rank
// mirrors its own shard, 1/N of the model's), so state_to_host and state_from_host copy this rank's
// shard between its device and its host and nothing crosses between ranks; a checkpoint is written
// from the ranks' shards together (model/ckpt/checkpoint.h), the same files whatever the world
// size, and resumes at any other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/cpu/adam8bit.h"
#include "model/net/param_layout.h"
#include "model/train/optimizer_state.h"
#include "model/train/train_options.h"
#include "offload/chunk_route.h"
#include "offload/device_grads.h"
#include "offload/optimizer.h"
#include "offload/resident_weights.h"
#include "runtime/backend.h"

namespace strata::model {

class DeviceOptimizer final : public Optimizer {
 public:
  // `layout`: the weights' (working precision) layout; `masters`: the master layout. Allocates
  // the masters (16-bit only) and moments from the backend's arena, zeroed: its out_of_memory
  // naming them when over budget. `updates` (empty: every chunk): the chunks it updates, per chunk
  // of `layout` (see the top); invalid_argument when `weights` or `grads` do not hold exactly those
  // chunks, or with partitioned gradients.
  static StatusOr<std::unique_ptr<DeviceOptimizer>> create(Backend& backend, ResidentWeights& weights,
                                                           DeviceGrads& grads, OptimizerState& state,
                                                           const ParamLayout& layout, const ParamLayout& masters,
                                                           const TrainOptions& options,
                                                           const std::vector<bool>& updates = {});
  ~DeviceOptimizer() override;
  // The device bytes create allocates for a model of `layout` trained in `dtype` over `ranks` ranks
  // (the largest rank's), each block aligned to `align` (the arena's), updating the chunks
  // `updates` marks (empty: all): the planner's figure. The updated weights' gather buffer when
  // ranks > 1 or `spread` (gradients spread over a communicator of one).
  static uint64_t device_bytes(const ParamLayout& layout, DType dtype, int ranks, uint64_t align,
                               const std::vector<bool>& updates = {}, AdamStates states = AdamStates::f32,
                               bool spread = false);
  DeviceOptimizer(const DeviceOptimizer&) = delete;
  DeviceOptimizer& operator=(const DeviceOptimizer&) = delete;

  std::string_view where() const override { return "device"; }
  Status begin_update(const UpdateStep& update) override;  // queued on Stream::compute
  Status prepare(size_t) override { return Status::ok(); }
  Status finish_update() override { return Status::ok(); }
  bool pending() const override { return false; }
  // Masters (16-bit; fp32's are the resident weights) and moments, chunk by chunk between the
  // state's pinned images and the device arrays. to_host waits for the copies; from_host orders
  // the next compute after them.
  // to_host is a no-op while the images already hold the state (no update since the last copy
  // either way), so a caller may sync before another one does.
  Status state_to_host() override { return host_current_ ? Status::ok() : copy_state(/*to_device=*/false); }
  Status state_from_host() override { return copy_state(/*to_device=*/true); }

 private:
  DeviceOptimizer(Backend& backend, ResidentWeights& weights, DeviceGrads& grads, OptimizerState& state,
                  const ParamLayout& layout, const ParamLayout& masters, const TrainOptions& options,
                  ChunkRoute route);
  // A tensor's part in a rank's shard of its chunk: elements [first, first + n) of layout param
  // `param`, its fp32 state at float `at` of the rank's state of the chunk.
  struct Segment {
    size_t param;
    uint64_t first, n, at;
    uint64_t scale = 0;  // 8-bit moments: its first block scale in the rank's of the chunk
  };
  // Rank `rank` of `ranks`'s segments of chunk c of `layout` (`length`: its state's floats, each
  // segment 64-aligned).
  static std::vector<Segment> segments(const ParamLayout& layout, size_t c, int ranks, int rank, uint64_t* length);
  // Chunk c's index in weights_ and grads_ (route_ marks the chunks updated here).
  size_t local(size_t c) const { return route_.index(c); }
  int ranks() const;
  int rank() const;
  Status gather_weights(size_t c);
  Status copy_state(bool to_device);
  Status copy_codes(size_t piece, ChunkState& host, bool to_device, Stream stream);

  // Constant after construction.
  Backend& backend_;
  ResidentWeights& weights_;
  DeviceGrads& grads_;
  OptimizerState& state_;
  const ParamLayout& layout_;
  const ParamLayout& masters_;
  const TrainOptions options_;
  Communicator* const comm_;             // the gradients' (across ranks), else null
  const ChunkRoute route_;                // marked: the chunks updated here (all of them but in a split)
  std::vector<size_t> pieces_;            // the state's pieces of the chunks updated here: the mirrors' walks
  std::vector<std::vector<Segment>> segments_;  // per chunk: this rank's
  std::vector<uint64_t> state_at_;        // per chunk: float offset of its state; the total last
  float* device_masters_ = nullptr;       // (state_at_.back() floats) 16-bit training only
  float* device_m_ = nullptr;             // same size (fp32 moments)
  float* device_v_ = nullptr;             // same size (fp32 moments)
  // 8-bit moments: a code per state element, a scale per 256-element block of a segment (a tensor's).
  int8_t* device_m_code_ = nullptr;       // state_at_.back() bytes
  uint8_t* device_v_code_ = nullptr;      // same size
  float* device_m_scale_ = nullptr;       // scale_at_.back() floats
  float* device_v_scale_ = nullptr;       // same size
  std::vector<uint64_t> scale_at_;        // 8-bit: per chunk, its first block scale; the total last
  std::byte* gathered_weights_ = nullptr; // across ranks: ranks x the largest stride of working weights
  bool host_current_ = false;             // the host images hold the state
  std::unique_ptr<Event> computed_, copied_;
};

}  // namespace strata::model
