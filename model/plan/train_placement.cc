// `strata train`'s placement (--offload auto) and the end-of-run prediction (train_placement.h).
#include "model/plan/train_placement.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "model/plan/placement.h"
#include "model/plan/tiling.h"
#include "model/train/trainer.h"
#include "runtime/units.h"
#include "model/plan/plan_report.h"

namespace strata::model {
namespace {


bool given(const Config& config, std::string_view key) { return config.source(key) != ConfigSource::default_value; }

constexpr std::string_view kPlacementKeys[] = {"offload_param", "offload_optimizer", "optimizer_device", "offload_grad"};

// "gpu 80.2 MiB of 24.0 MiB (--gpu-mem), cpu ...": each tier's bytes against its budget.
std::string against_budgets(const model::PlanCandidate& c, const Machine& m, bool only_short) {
  const uint64_t budgets[kTiers] = {m.hardware.gpu_bytes, m.hardware.cpu_bytes, m.hardware.nvme_bytes};
  const std::string* from[kTiers] = {&m.gpu_from, &m.cpu_from, &m.nvme_from};
  std::vector<std::string> parts;
  for (size_t t = 0; t < kTiers; ++t) {
    const uint64_t need = c.bytes.tier(Tier(t));
    if ((only_short && c.missing[t] == 0) || (!only_short && need == 0 && t == size_t(Tier::nvme))) continue;
    parts.push_back(fmt::format("{} {} of {} ({})", model::plan_tier_name(Tier(t)), format_size(need),
                                budgets[t] ? format_size(budgets[t]) : "none", *from[t]));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// "rates assumed default: rate_flops, ...", "measured rates from FILE", or both.
std::string rates_note(const Machine& m) {
  const std::vector<std::string> assumed = assumed_rates(m);
  std::vector<std::string> parts;
  if (!m.calibration.empty()) parts.push_back("measured rates from " + m.calibration);
  if (!assumed.empty()) parts.push_back(fmt::format("rates assumed default: {}", fmt::join(assumed, ", ")));
  return fmt::format("{}", fmt::join(parts, "; "));
}

double ratio(double measured, double predicted) { return predicted > 0 ? measured / predicted : 0.0; }

std::string measured_steps(const RunMeasured& r) {
  if (r.steps <= 1) return fmt::format("step {}, the warm-up", r.first_step);
  return fmt::format("mean of steps {}-{}", r.first_step + 1, r.first_step + r.steps - 1);
}

// Why --vocab-tile / --mlp-tiles auto tiled the run: its untiled working set against the budget.
void log_auto_tiling(const model::ModelConfig& untiled, const TrainPlacement& p) {
  const model::ModelConfig& tiled = p.predicted.model;
  const std::string flags = model::tiling_flags(tiled, p.options);
  if (flags.empty()) return;  // untiled, or tiled as given
  model::ModelConfig whole = untiled;
  whole.vocab_tile = std::max<int64_t>(p.options.vocab_tile, 0);
  whole.mlp_tiles = std::max<int64_t>(p.options.mlp_tiles, 0);
  spdlog::info("tiling auto: {} (= {}): untiled the run needs {} of device memory, over the {} budget ({}); tiled "
               "{}, the fewest tiles that fit",
               model::tiling_summary(tiled), flags, format_size(model::estimate_device_bytes(whole, p.options).total()),
               format_size(p.machine.hardware.gpu_bytes), p.machine.gpu_from,
               format_size(p.predicted.bytes.tier(Tier::device)));
}

}  // namespace

model::PlanFixed plan_fixed_choices(const Config& config) {
  if (config.get_text("offload") == "off") return {true, true, true, true};
  return {.weights = given(config, "offload_param"),
          .optimizer = given(config, "optimizer_device") || given(config, "offload_optimizer"),
          .gradients = given(config, "offload_grad"),
          .checkpointing = given(config, "activation_checkpointing")};
}

StatusOr<TrainPlacement> choose_train_placement(const Config& config, const model::TrainOptions& o,
                                                const model::ModelConfig& mc) {
  TrainPlacement out;
  STRATA_ASSIGN_OR_RETURN(out.machine, describe_machine(config, o, MachineFor::train));
  out.options = o;
  STRATA_RETURN_IF_ERROR(model::check_tiling(mc, o));
  out.predicted = model::evaluate_placement(mc, o, out.machine.hardware);
  out.options.resident_layers = out.predicted.options.resident_layers;  // auto, resolved on the budget
  out.options.param_cache = out.predicted.options.param_cache;          // auto, resolved on --cpu-mem
  if (o.resident_layers > mc.n_layer && o.paged_weights())
    return error(Code::invalid_argument, "resident_layers {} ({}): {} has {} layers; pass --resident-layers {} or "
                 "fewer (or auto)",
                 o.resident_layers, config.describe_source("resident_layers"), mc.name, mc.n_layer, mc.n_layer);
  if (o.resident_layers > 0 && o.paged_weights() && out.predicted.model.mlp_tiles > 1)
    return error(Code::invalid_argument, "resident_layers {} ({}) keeps whole layers on the device, but the run tiles "
                 "every layer's MLP ({}); pass --resident-layers 0 (or auto), or --mlp-tiles 0",
                 o.resident_layers, config.describe_source("resident_layers"),
                 model::tiling_summary(out.predicted.model));
  const std::string& mode = config.get_text("offload");
  const bool explicit_auto = mode == "auto" && given(config, "offload");
  bool placement_given = false;
  for (std::string_view key : kPlacementKeys) placement_given |= given(config, key);
  if (mode == "off" || (!explicit_auto && (placement_given || out.predicted.fits()))) {
    log_auto_tiling(mc, out);
    return out;
  }

  STRATA_ASSIGN_OR_RETURN(model::Plan plan,
                          model::make_plan(mc, o, out.machine.hardware, plan_fixed_choices(config)));
  if (!plan.fits)
    return error(Code::out_of_memory,
                 "{} fits no placement on this machine ({}): the planner's report, as `strata plan` with these "
                 "flags prints it:\n{}",
                 mc.name, explicit_auto ? "--offload auto" : "the flags' placement does not fit and no placement was given",
                 plan_text(plan, out.machine));
  const model::PlanCandidate& c = plan.chosen;
  const std::string why = explicit_auto
                              ? "--offload auto: the fastest placement that fits"
                              : fmt::format("the flags' placement ({}) does not fit: it needs {}",
                                            model::placement_summary(o), against_budgets(out.predicted, out.machine, true));
  spdlog::info("offload auto: {} (= {}); {}; planned {}; predicted step {:.3g} s, bottleneck {} ({})",
               model::placement_summary(c.options), model::placement_flags(c.options), why,
               against_budgets(c, out.machine, false), c.time.step_s, c.time.bottleneck, rates_note(out.machine));
  out.options = c.options;
  out.options.step_schedule = o.step_schedule;  // the run chooses it again (auto: the same), saying why
  out.predicted = c;
  out.planned = true;
  STRATA_RETURN_IF_ERROR(model::check_trainer_options(out.options));
  log_auto_tiling(mc, out);
  return out;
}

std::vector<std::string> prediction_lines(const TrainPlacement& p, const RunMeasured& r) {
  const model::PlanCandidate& c = p.predicted;
  const uint64_t gpu = c.bytes.tier(Tier::device), cpu = c.bytes.tier(Tier::cpu);
  return {
      fmt::format("predicted vs measured ({}{}):", model::placement_summary(c.options),
                  p.planned ? ", chosen by --offload auto" : ""),
      fmt::format("  step time   {:>10.4g} s  {:>10.4g} s  x{:.2f}  ({}; predicted bottleneck {})", c.time.step_s,
                  r.mean_step_s, ratio(r.mean_step_s, c.time.step_s), measured_steps(r), c.time.bottleneck),
      fmt::format("  gpu peak    {:>12}  {:>12}  x{:.2f}  (the device arena)", format_size(gpu), format_size(r.gpu_peak),
                  ratio(double(r.gpu_peak), double(gpu))),
      fmt::format("  pinned peak {:>12}  {:>12}  x{:.2f}  (the pinned pool)", format_size(cpu), format_size(r.cpu_peak),
                  ratio(double(r.cpu_peak), double(cpu))),
      fmt::format("  rates: compute {}, pcie {}, nvme read {}, write {}, cpu adam {}", p.machine.rate_source[0],
                  p.machine.rate_source[1], p.machine.rate_source[2], p.machine.rate_source[3],
                  p.machine.rate_source[4]),
  };
}

std::string prediction_json_line(const TrainPlacement& p, const RunMeasured& r) {
  const model::PlanCandidate& c = p.predicted;
  const uint64_t gpu = c.bytes.tier(Tier::device), cpu = c.bytes.tier(Tier::cpu);
  nlohmann::ordered_json j = {{"prediction", true},
                              {"placement", model::placement_summary(c.options)},
                              {"planned", p.planned},
                              {"predicted_step_s", c.time.step_s},
                              {"measured_step_s", r.mean_step_s},
                              {"step_ratio", ratio(r.mean_step_s, c.time.step_s)},
                              {"measured_steps", r.steps > 1 ? r.steps - 1 : r.steps},
                              {"bottleneck", c.time.bottleneck},
                              {"predicted_gpu_bytes", gpu},
                              {"measured_gpu_peak_bytes", r.gpu_peak},
                              {"gpu_ratio", ratio(double(r.gpu_peak), double(gpu))},
                              {"predicted_cpu_bytes", cpu},
                              {"measured_cpu_peak_bytes", r.cpu_peak},
                              {"cpu_ratio", ratio(double(r.cpu_peak), double(cpu))}};
  for (size_t k = 0; k < model::kPlanRateKinds; ++k)
    j["rate_sources"][std::string(model::plan_rate_key(model::PlanRateKind(k)).substr(5))] = p.machine.rate_source[k];
  return j.dump();
}

}  // namespace strata::model
