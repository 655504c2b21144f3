// LossScaler: dynamic loss scaling for fp16 training. The loss is multiplied by scale() before
// backward; once per optimizer step -- after all micro-batches of the effective batch, never per
// micro-batch -- the trainer reports whether any gradient was non-finite, and update() says
// whether to skip the step and adjusts the scale:
//   overflow:  the step is skipped (always, and logged). If `hysteresis_left` > 1 it is decremented
//              and the scale kept; else the scale backs off (* backoff_factor, not below
//              min_scale). The run of good steps restarts.
//   no overflow: good_steps += 1; after `growth_interval` consecutive good steps the scale grows
//              (* growth_factor, not above max_scale), good_steps restarts and hysteresis_left is
//              refilled (with consecutive_hysteresis, it is refilled after every good step).
// DeepSpeed's fp16 config maps on as: initial_scale_power p -> initial_scale = 2^p;
// loss_scale_window -> growth_interval; hysteresis -> hysteresis; consecutive_hysteresis ->
// consecutive_hysteresis; min_loss_scale -> min_scale; loss_scale > 0 (static) -> dynamic = false,
// initial_scale = loss_scale; DeepSpeed's factors are fixed at 2 / 0.5. One difference: after an
// overflow DeepSpeed grows after window-1 good steps (it counts from the overflow's iteration),
// this class after growth_interval good steps, as PyTorch's GradScaler does.
// Not a gradient checker (the trainer finds non-finite values); not thread-safe (one trainer).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace strata::model {

struct LossScalerOptions {
  bool dynamic = true;              // false: a fixed scale; overflowing steps are still skipped
  double initial_scale = 65536.0;   // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  uint64_t growth_interval = 2000;  // consecutive good steps before growing
  uint32_t hysteresis = 1;          // overflows absorbed before backing off (1: back off at once)
  bool consecutive_hysteresis = false;
  double min_scale = 1.0;
  double max_scale = 16777216.0;    // 2^24
};

// Everything that changes: what a checkpoint saves.
struct LossScalerState {
  double scale = 0.0;
  uint64_t good_steps = 0;      // consecutive good steps since the last overflow or growth
  uint32_t hysteresis_left = 1;
  uint64_t steps = 0;           // optimizer steps seen
  uint64_t skipped_steps = 0;
  bool operator==(const LossScalerState&) const = default;
};

// What update() did.
struct LossScaleUpdate {
  bool skip_step = false;
  bool backed_off = false;
  bool grew = false;
  bool at_minimum = false;  // overflowed while already at min_scale: training may be diverging
  double scale = 0.0;       // the scale for the next step
};

class LossScaler {
 public:
  // invalid_argument: scales not finite and > 0, min_scale > initial_scale > max_scale,
  // growth_factor <= 1, backoff_factor outside (0, 1), growth_interval or hysteresis of 0.
  static StatusOr<LossScaler> create(const LossScalerOptions& options);

  double scale() const { return state_.scale; }
  // Call once per optimizer step with whether any gradient of the step was inf or NaN.
  LossScaleUpdate update(bool found_nonfinite);

  const LossScalerState& state() const { return state_; }
  // invalid_argument when the state cannot come from these options (scale outside
  // [min_scale, max_scale], hysteresis_left outside [1, hysteresis], good_steps >= interval).
  Status restore(const LossScalerState& state);

  // The state as a JSON object, exact (doubles round-trip), for checkpoint metadata.
  std::string serialize() const;
  // corruption when `json` is not such an object; then restore()'s checks.
  Status deserialize(std::string_view json);

  const LossScalerOptions& options() const { return options_; }

 private:
  explicit LossScaler(const LossScalerOptions& options);
  LossScalerOptions options_;
  LossScalerState state_;
};

}  // namespace strata::model
