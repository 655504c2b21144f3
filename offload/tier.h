// Tier: where a state lives. The one vocabulary of the offload stack and the planner: working
// weights, gradient sums and optimizer state each have a home tier (model/train/train_options.h),
// the planner counts bytes per tier (model/plan/planner.h), and the offload layers page between
// them (TierManager, GradientOffloader, OptimizerPipeline).
//   device: the backend's memory (the GPU, or the CPU backend's arena)
//   cpu:    pinned host memory (runtime/pinned_pool.h)
//   nvme:   extents of the NVMe store's swap files (offload/nvme_store.h)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace strata {

enum class Tier : uint8_t { device, cpu, nvme };
inline constexpr size_t kTiers = 3;  // Tier values, in order: an index for per-tier arrays

// "device", "cpu", "nvme": the words the config keys, the flags and the logs use.
constexpr std::string_view tier_name(Tier tier) {
  switch (tier) {
    case Tier::device: return "device";
    case Tier::cpu: return "cpu";
    case Tier::nvme: return "nvme";
  }
  return "?";
}

}  // namespace strata
