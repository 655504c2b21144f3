// LrSchedule: the learning rate as a pure function of the optimizer step -- linear or log warmup,
// then cosine or linear decay to a final fraction of the peak, or constant. Deterministic (no
// state), so a resumed run gets the same rates. Not an optimizer and not a scheduler object with
// state.
//
// Steps count from 0. With W warmup steps, peak P, warmup start fraction s, final fraction f and
// total steps N:
//   step < W:        P * (s + (1 - s) * r), the ramp r in (0, 1]:
//                    linear: r = (step + 1) / W            (as llm.c: step W-1 runs at the peak,
//                                                          step 0 is not wasted at lr 0)
//                    log:    r = ln(step + 2) / ln(W + 1)  (DeepSpeed's "log" warmup_type, whose
//                                                          ln(t + 1) / ln(W) is shifted one step the
//                                                          same way: fast at first, then flattening)
//   W <= step < N:   p = (step - W) / (N - W) in [0, 1)
//                    cosine: f*P + (P - f*P) * (1 + cos(pi * p)) / 2
//                    linear: P - (P - f*P) * p
//                    constant: P
//   step >= N:       f*P (cosine, linear); P (constant)
// Thread-safety: immutable; lr() may be called from any thread.
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/status.h"

namespace strata::model {

enum class LrDecay : uint8_t { constant, cosine, linear };
enum class LrWarmup : uint8_t { linear, log };

// "constant", "cosine", "linear"; anything else is invalid_argument listing them.
StatusOr<LrDecay> parse_lr_decay(std::string_view name);
std::string_view lr_decay_name(LrDecay decay);
// "linear", "log"; anything else is invalid_argument listing them.
StatusOr<LrWarmup> parse_lr_warmup(std::string_view name);
std::string_view lr_warmup_name(LrWarmup warmup);

struct LrScheduleOptions {
  double peak_lr = 3e-4;
  uint64_t warmup_steps = 0;
  double warmup_start_fraction = 0.0;  // s: warmup starts from s * peak (0: from 0)
  LrWarmup warmup = LrWarmup::linear;  // the shape of the ramp r
  LrDecay decay = LrDecay::cosine;
  uint64_t total_steps = 0;            // N: end of the decay (unused by constant)
  double final_fraction = 0.0;         // f: the decay ends at f * peak
};

class LrSchedule {
 public:
  // invalid_argument: peak not finite and > 0; fractions outside [0, 1]; for cosine/linear,
  // total_steps <= warmup_steps (nothing left to decay over).
  static StatusOr<LrSchedule> create(const LrScheduleOptions& options);

  double lr(uint64_t step) const;
  const LrScheduleOptions& options() const { return options_; }

 private:
  explicit LrSchedule(const LrScheduleOptions& options) : options_(options) {}
  LrScheduleOptions options_;
};

}  // namespace strata::model
