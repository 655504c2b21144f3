// LrSchedule: validation of the schedule's options and the closed-form lr(step) (formulas in
// lr_schedule.h). No state.
#include "model/train/lr_schedule.h"

#include <cmath>
#include <numbers>

namespace strata::model {

StatusOr<LrDecay> parse_lr_decay(std::string_view name) {
  if (name == "constant") return LrDecay::constant;
  if (name == "cosine") return LrDecay::cosine;
  if (name == "linear") return LrDecay::linear;
  return error(Code::invalid_argument, "unknown learning-rate decay '{}'; use constant, cosine or linear", name);
}

std::string_view lr_decay_name(LrDecay decay) {
  switch (decay) {
    case LrDecay::constant: return "constant";
    case LrDecay::cosine: return "cosine";
    case LrDecay::linear: return "linear";
  }
  return "?";
}

StatusOr<LrWarmup> parse_lr_warmup(std::string_view name) {
  if (name == "linear") return LrWarmup::linear;
  if (name == "log") return LrWarmup::log;
  return error(Code::invalid_argument, "unknown learning-rate warmup '{}'; use linear or log", name);
}

std::string_view lr_warmup_name(LrWarmup warmup) { return warmup == LrWarmup::log ? "log" : "linear"; }

StatusOr<LrSchedule> LrSchedule::create(const LrScheduleOptions& o) {
  if (!std::isfinite(o.peak_lr) || o.peak_lr <= 0.0) {
    return error(Code::invalid_argument, "peak learning rate {} must be a finite number above 0", o.peak_lr);
  }
  if (!(o.warmup_start_fraction >= 0.0 && o.warmup_start_fraction <= 1.0)) {
    return error(Code::invalid_argument, "warmup start fraction {} must be within [0, 1]", o.warmup_start_fraction);
  }
  if (!(o.final_fraction >= 0.0 && o.final_fraction <= 1.0)) {
    return error(Code::invalid_argument, "final learning-rate fraction {} must be within [0, 1]", o.final_fraction);
  }
  if (o.decay != LrDecay::constant && o.total_steps <= o.warmup_steps) {
    return error(Code::invalid_argument,
                 "{} decay needs more total steps ({}) than warmup steps ({}); raise the step count or shorten "
                 "the warmup",
                 lr_decay_name(o.decay), o.total_steps, o.warmup_steps);
  }
  return LrSchedule(o);
}

double LrSchedule::lr(uint64_t step) const {
  const LrScheduleOptions& o = options_;
  if (step < o.warmup_steps) {
    const double k = static_cast<double>(step + 1), w = static_cast<double>(o.warmup_steps);
    const double ramp = o.warmup == LrWarmup::log ? std::log(k + 1.0) / std::log(w + 1.0) : k / w;
    return o.peak_lr * (o.warmup_start_fraction + (1.0 - o.warmup_start_fraction) * ramp);
  }
  if (o.decay == LrDecay::constant) return o.peak_lr;
  const double final_lr = o.final_fraction * o.peak_lr;
  if (step >= o.total_steps) return final_lr;
  const double progress =
      static_cast<double>(step - o.warmup_steps) / static_cast<double>(o.total_steps - o.warmup_steps);
  if (o.decay == LrDecay::cosine) {
    return final_lr + (o.peak_lr - final_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }
  return o.peak_lr - (o.peak_lr - final_lr) * progress;
}

}  // namespace strata::model
