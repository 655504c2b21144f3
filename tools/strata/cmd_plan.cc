// `strata plan [train flags] [--json] [--calibrate]`: whether a training run fits a machine before
// anything is allocated (model/plan/planner.h): the bytes of every state on every tier, the placement
// chosen (the fastest that fits the GPU, pinned CPU and NVMe budgets), a step-time estimate with its
// bottleneck, and, when nothing fits, what would, with numbers. The machine is this one or one
// described by --gpu-mem, --cpu-mem and --nvme-mem (plan_machine.h); the rates are --rate-*, this
// machine's measured ones (the calibration cache; --calibrate measures them first) or assumed
// defaults. It takes `strata train`'s flags (one schema, one TrainOptions) and never opens data or
// allocates device memory; it writes only the calibration cache, with --calibrate. --ranks N
// [--nodes M] plans one rank of a ZeRO-3 run across N GPUs on M nodes (model/plan/world.h): its
// shards, its bytes per step on PCIe, the node's links (--rate-intra-node, --rate-inter-node) and
// NVMe, the link that limits the step, and what `strata train` runs across ranks today.
// Exit 0: it fits; 1: it does not; 2: bad flags, model or budgets.
#include <memory>
#include <string>

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "model/net/model_config.h"
#include "model/plan/planner.h"
#include "model/train/train_options.h"
#include "model/train/trainer.h"
#include "runtime/units.h"
#include "tools/strata/calibration_record.h"
#include "tools/strata/command.h"
#include "tools/strata/config_flags.h"
#include "model/plan/plan_machine.h"
#include "model/plan/plan_report.h"
#include "tools/strata/schema.h"
#include "model/plan/train_placement.h"
#include "model/plan/train_preflight.h"

namespace strata::cli {
namespace {

struct PlanFlags {
  bool json = false;
  bool calibrate = false;
};

// --calibrate measures this machine: not with a described one, nor without a cache to record in.
Status calibrate_first(const Config& config, const model::TrainOptions& o) {
  StatusOr<model::Machine> machine = model::describe_machine(config, o, model::MachineFor::plan);
  if (!machine.is_ok()) return machine.status();
  if (machine->described)
    return error(Code::invalid_argument,
                 "--calibrate measures this machine, but --gpu-mem, --cpu-mem and --nvme-mem describe another; drop "
                 "one of them or --calibrate");
  const std::string path = model::calibration_path(config);
  if (path.empty())
    return error(Code::invalid_argument,
                 "--calibrate records into the calibration cache, but there is none (--calibration none, or neither "
                 "$XDG_CACHE_HOME nor $HOME is set); pass --calibration FILE");
  return calibrate(config, o, path);
}

int plan(const Config& config, const PlanFlags& flags) {
  StatusOr<model::TrainOptions> parsed = model::train_options_from_config(config);
  if (!parsed.is_ok()) return report_error(parsed.status().message(), kExitUsage);
  for (const std::string& w : parsed->warnings) spdlog::warn("{}", w);
  if (Status s = model::check_trainer_options(*parsed); !s.is_ok()) return report_error(s.message(), kExitUsage);
  if (!parsed->init_from.empty() || !parsed->resume_path.empty())
    return report_error("strata plan takes the model from --preset and explicit dimensions (--n-layer, --dim, ...); "
                        "--init-from and --resume are not read: pass the preset or dimensions instead",
                        kExitUsage);
  StatusOr<model::ModelConfig> mc = model::model_config_with(parsed->preset, parsed->model);
  if (!mc.is_ok()) return report_error(mc.status().message(), kExitUsage);
  // A model no placement could hold is answered in closed form, before the planner builds layouts.
  if (Status s = model::check_size_fits_machine(config, *parsed, *mc, model::MachineFor::plan); !s.is_ok()) {
    if (s.code() != Code::out_of_memory) return report_error(s.message(), kExitUsage);
    if (flags.json)
      fmt::print("{}\n", nlohmann::json{{"fits", false},
                                        {"model", mc->name},
                                        {"params", model::parameter_count(*mc)},
                                        {"refused", s.message()}}
                             .dump(2));
    else
      fmt::print("model: {} ({} parameters)\n\ndoes not fit: {}\n", mc->name,
                 format_count(double(model::parameter_count(*mc))), s.message());
    return kExitFailure;
  }
  if (flags.calibrate)
    if (Status s = calibrate_first(config, *parsed); !s.is_ok())
      return report_error(s.message(), s.code() == Code::invalid_argument ? kExitUsage : kExitFailure);
  StatusOr<model::Machine> machine = model::describe_machine(config, *parsed, model::MachineFor::plan);
  if (!machine.is_ok()) return report_error(machine.status().message(), kExitUsage);
  StatusOr<model::Plan> p = model::make_plan(*mc, *parsed, machine->hardware, model::plan_fixed_choices(config));
  if (!p.is_ok()) return report_error(p.status().message(), kExitUsage);
  if (flags.json)
    fmt::print("{}\n", model::plan_json(*p, *machine).dump(2));
  else
    fmt::print("{}", model::plan_text(*p, *machine));
  return p->fits ? kExitOk : kExitFailure;
}

}  // namespace

void add_plan_command(CLI::App& root, CommandRegistry& registry) {
  CLI::App* app = root.add_subcommand(
      "plan",
      "Plan a training run before allocating anything: the bytes of every state on the GPU, in pinned CPU memory\n"
      "and on NVMe, the placement that fits, a step-time estimate and, when nothing fits, what would.\n"
      "Takes `strata train`'s flags; describe another machine with --gpu-mem, --cpu-mem, --nvme-mem.\n"
      "--ranks N [--nodes M]: one rank of a ZeRO-3 run over N GPUs on M nodes (--cpu-mem and --nvme-mem a node's).\n"
      "Exit 0: it fits; 1: it does not; 2: bad flags.");
  auto flags = std::make_shared<PlanFlags>();
  app->add_flag("--json", flags->json, "Print one JSON document (fits, params, gpu_bytes, cpu_bytes, nvme_bytes, step_s, ...)");
  app->add_flag("--calibrate", flags->calibrate,
                "Measure this machine's rates first (a few seconds: NVMe on each --nvme-path, CPU Adam, and PCIe and "
                "GEMMs when a GPU is present) and record them in the calibration cache");
  auto config_flags = std::make_shared<ConfigFlags>(*app, strata_plan_config_schema());
  registry.add(app, [config_flags, flags]() {
    StatusOr<Config> config = config_flags->resolve(environ);
    if (!config.is_ok()) return report_error(config.status().message(), kExitUsage);
    for (const std::string& w : config->ignored_file_warnings()) spdlog::warn("{}", w);
    for (const std::string& w : config->unknown_env_warnings()) spdlog::warn("{}", w);
    return plan(*config, *flags);
  });
}

}  // namespace strata::cli
