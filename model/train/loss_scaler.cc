// LossScaler: the per-optimizer-step scale update (rules in loss_scaler.h), its validation and
// its JSON state. Not a gradient checker.
#include "model/train/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace strata::model {

StatusOr<LossScaler> LossScaler::create(const LossScalerOptions& o) {
  for (double v : {o.initial_scale, o.min_scale, o.max_scale}) {
    if (!std::isfinite(v) || v <= 0.0) {
      return error(Code::invalid_argument, "loss scales must be finite and above 0 (got initial {}, min {}, max {})",
                   o.initial_scale, o.min_scale, o.max_scale);
    }
  }
  if (!(o.min_scale <= o.initial_scale && o.initial_scale <= o.max_scale)) {
    return error(Code::invalid_argument, "initial loss scale {} must lie within [min {}, max {}]", o.initial_scale,
                 o.min_scale, o.max_scale);
  }
  if (!(o.growth_factor > 1.0) || !std::isfinite(o.growth_factor)) {
    return error(Code::invalid_argument, "loss-scale growth factor {} must be above 1", o.growth_factor);
  }
  if (!(o.backoff_factor > 0.0 && o.backoff_factor < 1.0)) {
    return error(Code::invalid_argument, "loss-scale backoff factor {} must be within (0, 1)", o.backoff_factor);
  }
  if (o.growth_interval == 0 || o.hysteresis == 0) {
    return error(Code::invalid_argument, "loss-scale growth interval ({}) and hysteresis ({}) must be at least 1",
                 o.growth_interval, o.hysteresis);
  }
  return LossScaler(o);
}

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options) {
  state_.scale = options.initial_scale;
  state_.hysteresis_left = options.hysteresis;
}

LossScaleUpdate LossScaler::update(bool found_nonfinite) {
  LossScaleUpdate out;
  ++state_.steps;
  if (found_nonfinite) {
    out.skip_step = true;
    ++state_.skipped_steps;
    state_.good_steps = 0;
    const double before = state_.scale;
    if (options_.dynamic) {
      if (state_.hysteresis_left > 1) {
        --state_.hysteresis_left;
      } else {
        out.at_minimum = before <= options_.min_scale;
        state_.scale = std::max(before * options_.backoff_factor, options_.min_scale);
        out.backed_off = state_.scale < before;
      }
    }
    spdlog::info("fp16 step {} skipped: non-finite gradients; loss scale {} -> {}{}", state_.steps, before,
                 state_.scale, !options_.dynamic ? " (static)" : out.at_minimum ? " (at its minimum)" : "");
  } else if (options_.dynamic) {
    if (options_.consecutive_hysteresis) state_.hysteresis_left = options_.hysteresis;
    if (++state_.good_steps >= options_.growth_interval) {
      const double before = state_.scale;
      state_.scale = std::min(before * options_.growth_factor, options_.max_scale);
      out.grew = state_.scale > before;
      state_.good_steps = 0;
      state_.hysteresis_left = options_.hysteresis;
    }
  }
  out.scale = state_.scale;
  return out;
}

Status LossScaler::restore(const LossScalerState& s) {
  const bool scale_ok = options_.dynamic ? (s.scale >= options_.min_scale && s.scale <= options_.max_scale)
                                         : s.scale == options_.initial_scale;
  if (!scale_ok || s.hysteresis_left < 1 || s.hysteresis_left > options_.hysteresis ||
      s.good_steps >= options_.growth_interval || s.skipped_steps > s.steps) {
    return error(Code::invalid_argument,
                 "saved loss-scaler state (scale {}, good steps {}, hysteresis left {}, {} of {} steps skipped) does "
                 "not fit the fp16 options (scale [{}, {}], growth interval {}, hysteresis {}); resume with the "
                 "options the checkpoint was made with",
                 s.scale, s.good_steps, s.hysteresis_left, s.skipped_steps, s.steps, options_.min_scale,
                 options_.max_scale, options_.growth_interval, options_.hysteresis);
  }
  state_ = s;
  return Status::ok();
}

std::string LossScaler::serialize() const {
  const nlohmann::json j = {{"scale", state_.scale},
                            {"good_steps", state_.good_steps},
                            {"hysteresis_left", state_.hysteresis_left},
                            {"steps", state_.steps},
                            {"skipped_steps", state_.skipped_steps}};
  return j.dump();
}

Status LossScaler::deserialize(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](std::string_view why) {
    return error(Code::corruption, "loss-scaler state '{}' {}; the checkpoint's trainer state is damaged", json, why);
  };
  if (!j.is_object()) return bad("is not a JSON object");
  LossScalerState s;
  if (!j.contains("scale") || !j["scale"].is_number()) return bad("has no numeric \"scale\"");
  s.scale = j["scale"].get<double>();
  for (const char* key : {"good_steps", "hysteresis_left", "steps", "skipped_steps"}) {
    if (!j.contains(key) || !j[key].is_number_unsigned()) return bad(fmt::format("has no unsigned \"{}\"", key));
  }
  s.good_steps = j["good_steps"].get<uint64_t>();
  const uint64_t hysteresis_left = j["hysteresis_left"].get<uint64_t>();
  if (hysteresis_left > UINT32_MAX) return bad("has a hysteresis_left out of range");
  s.hysteresis_left = static_cast<uint32_t>(hysteresis_left);
  s.steps = j["steps"].get<uint64_t>();
  s.skipped_steps = j["skipped_steps"].get<uint64_t>();
  return restore(s);
}

}  // namespace strata::model
