// Closed-form size bounds of a training run, from the model's dimensions alone: the parameter
// count and lower bounds of the bytes any placement of the run needs -- every state together over
// all tiers, and the device's least working set. No layout is built and nothing is allocated, so
// an absurd size is refused in microseconds, with its numbers, before the planner (planner.h,
// which sizes each placement exactly from the layout and can take seconds on a huge model) or
// anything else runs. Each bound is at most what the planner computes for every placement and
// tiling (tests/model/net/size_bounds_test.cc checks it), so nothing that fits is refused here.
// The dimension limits themselves are model_config.h's (kDimensionLimits). Pure arithmetic.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "model/net/model_config.h"
#include "model/plan/planner.h"
#include "model/train/train_options.h"
#include "runtime/status.h"

namespace strata::model {

struct SizeFloor {
  uint64_t params = 0;  // parameter_count
  // Every parameter's working weight, fp32 gradient sum, fp32 master weight and Adam moments (m
  // and v: 8 bytes fp32, 2 bytes as 8-bit codes): whatever the placement, each lives on some tier.
  uint64_t state_bytes = 0;
  uint64_t state_bytes_per_param = 0;
  // The device, whatever the placement and tiling: one micro-batch's activations with activation
  // checkpointing (the residual stream of the L + 1 layer boundaries and the logits, B x T rows
  // each) and one layer's attention weights (q/k/v and the output projection, which no tiling
  // cuts) with a gradient slot of the same size.
  uint64_t activation_bytes = 0;
  uint64_t layer_bytes = 0;  // one layer's attention weights at the working precision
  uint64_t device_bytes = 0;  // activation_bytes + 2 * layer_bytes
};
// Saturates at UINT64_MAX (unreachable within the dimension limits).
SizeFloor size_floor(const ModelConfig& config, const TrainOptions& options);

// The planner sizes the optimizer state of every candidate placement piece by piece (one piece
// per options.sub_group_size parameters, placement.h): up to this many pieces that takes
// milliseconds, far beyond it seconds and gigabytes. A model too large for a machine is refused
// with size_floor's numbers when it has more; with fewer the planner answers as fast, with its
// fuller report of what would fit.
inline constexpr uint64_t kMaxPlannedPieces = uint64_t(1) << 16;
bool cheap_to_plan(const SizeFloor& floor, const TrainOptions& options);

// Where each budget of a machine came from ("--gpu-mem", "MemAvailable", ...), gpu, cpu, nvme.
using BudgetSources = std::array<std::string, kTiers>;

// ok when size_floor fits `hardware`: the state bytes within the three tiers together and the
// device bytes within the GPU. Otherwise out_of_memory, "<model> fits no placement on <machine>"
// ("this machine", "the machine described") with the numbers (parameters, bytes per parameter,
// each tier's budget and where it came from) and what would help: 8-bit moments when they would
// fit, smaller dimensions, a smaller micro-batch or sequence, more NVMe space.
Status check_size_floor(const ModelConfig& config, const TrainOptions& options, const Hardware& hardware,
                        const BudgetSources& from, std::string_view machine);

}  // namespace strata::model
