// DeviceOptimizer: the Optimizer (offload/optimizer.h) that runs AdamW on the device, beside
// resident weights: the backend's adam_update op over fp32 masters (16-bit training; fp32 updates
// the weights in place) and fp32 moments in device memory, the gradient the model's DeviceGrads
// accumulated; for 16-bit training the rounded weights are written into the resident chunks by
// the same pass. Nothing crosses PCIe in a step. begin_update queues the whole update on the
// compute stream (the next forward's compute follows it in stream order), so prepare has nothing
// left to do and an update is never pending on the host. An OptimizerState holds the host mirrors
// of the state for checkpoints (state_to_host / state_from_host). Not a paging optimizer: the
// weights must be resident (ResidentWeights).
// Thread-safety and ordering: Optimizer's. Lifetime: the backend, weights, gradients and state
// outlive it; the destructor waits for the backend's streams and returns its device blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "model/net/param_layout.h"
#include "model/train/optimizer_state.h"
#include "model/train/train_options.h"
#include "offload/device_grads.h"
#include "offload/optimizer.h"
#include "offload/resident_weights.h"
#include "runtime/backend.h"

namespace strata::model {

class DeviceOptimizer final : public Optimizer {
 public:
  // `layout`: the weights' (working precision) layout; `masters`: the master layout. Allocates
  // the masters (16-bit only) and moments from the backend's arena, zeroed: its out_of_memory
  // naming them when over budget.
  static StatusOr<std::unique_ptr<DeviceOptimizer>> create(Backend& backend, ResidentWeights& weights,
                                                           DeviceGrads& grads, OptimizerState& state,
                                                           const ParamLayout& layout, const ParamLayout& masters,
                                                           const TrainOptions& options);
  ~DeviceOptimizer() override;
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
  Status state_to_host() override { return copy_state(/*to_device=*/false); }
  Status state_from_host() override { return copy_state(/*to_device=*/true); }

 private:
  DeviceOptimizer(Backend& backend, ResidentWeights& weights, DeviceGrads& grads, OptimizerState& state,
                  const ParamLayout& layout, const ParamLayout& masters, const TrainOptions& options);
  Status copy_state(bool to_device);

  // Constant after construction.
  Backend& backend_;
  ResidentWeights& weights_;
  DeviceGrads& grads_;
  OptimizerState& state_;
  const ParamLayout& layout_;
  const ParamLayout& masters_;
  const TrainOptions options_;
  std::vector<uint64_t> master_offsets_;  // device byte offset of each chunk's fp32 state; the total last
  std::byte* device_masters_ = nullptr;   // (sum of master chunk bytes) 16-bit training only
  std::byte* device_m_ = nullptr;         // same size
  std::byte* device_v_ = nullptr;         // same size
  std::unique_ptr<Event> computed_, copied_;
};

}  // namespace strata::model
