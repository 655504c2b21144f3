// SplitOptimizer: the Optimizer (offload/optimizer.h) of a split update -- ZeRO-Offload++'s GPU/CPU
// split, sized by the device budget instead of a ratio: the chunks that stay resident on the
// device (--resident-layers) are updated there by a DeviceOptimizer beside their weights, their
// fp32 masters, moments and gradient sums in device memory (nothing crosses PCIe for them); the
// paged chunks by a CpuOptimizer, their state pinned or on NVMe (--offload-optimizer), under the
// next forward as without the split. The CPU's share of the update shrinks by the resident
// layers' parameters. AdamW is elementwise and both sides compute it with the same operations
// (the transparency tests say where the backends agree bit for bit), so the split changes no bit.
// begin_update queues the device part on the compute stream (ordered before the next forward's
// compute), then begins the CPU part's walk; prepare, finish_update and pending are the CPU
// part's; the state's host images (one OptimizerState, every chunk) are the CPU part's state and
// the device part's mirrors.
// Thread-safety and ordering: Optimizer's. Lifetime: owns both parts; what they borrow outlives it.
#pragma once

#include <memory>
#include <string_view>

#include "model/train/cpu_optimizer.h"
#include "model/train/device_optimizer.h"
#include "offload/optimizer.h"

namespace strata::model {

class SplitOptimizer final : public Optimizer {
 public:
  SplitOptimizer(std::unique_ptr<DeviceOptimizer> device, std::unique_ptr<CpuOptimizer> cpu)
      : device_(std::move(device)), cpu_(std::move(cpu)) {}

  std::string_view where() const override { return "split"; }
  Status begin_update(const UpdateStep& update) override {
    if (cpu_->pending())
      return error(Code::failed_precondition, "an optimizer update begun while the last one is pending");
    STRATA_RETURN_IF_ERROR(device_->begin_update(update));
    return cpu_->begin_update(update);
  }
  Status prepare(size_t c) override { return cpu_->prepare(c); }
  Status finish_update() override { return cpu_->finish_update(); }
  bool pending() const override { return cpu_->pending(); }
  Status state_to_host() override { return device_->state_to_host(); }  // the CPU part's images are its state
  Status state_from_host() override { return device_->state_from_host(); }

 private:
  std::unique_ptr<DeviceOptimizer> device_;
  std::unique_ptr<CpuOptimizer> cpu_;
};

}  // namespace strata::model
