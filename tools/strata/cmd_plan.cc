// `strata plan [train flags] [--json]`: whether a training run fits a machine before anything is
// allocated (model/planner.h): the bytes of every state on every tier, the placement chosen (the
// fastest that fits the GPU, pinned CPU and NVMe budgets), a step-time estimate with its
// bottleneck, and, when nothing fits, what would, with numbers. The machine is this one (the GPU's
// memory, MemAvailable, the free space of --nvme-path) or one described by --gpu-mem, --cpu-mem
// and --nvme-mem; the rates are --rate-* or assumed defaults. It takes `strata train`'s flags (one
// schema, one TrainOptions) and never opens data, allocates device memory or writes a file.
// Exit 0: it fits; 1: it does not; 2: bad flags, model or budgets.
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "model/model_config.h"
#include "model/planner.h"
#include "model/train_options.h"
#include "model/trainer.h"
#include "runtime/backend.h"
#include "runtime/fs_probe.h"
#include "runtime/units.h"
#include "tools/strata/command.h"
#include "tools/strata/config_flags.h"
#include "tools/strata/schema.h"
#include "tools/strata/train_preflight.h"

namespace strata::cli {
namespace {

using model::PlanState;
using model::PlanTier;

// The machine planned for, and where each figure came from (for the report).
struct Machine {
  model::Hardware hardware;
  std::string gpu_from, cpu_from, nvme_from;
  bool described = true;                   // every budget given by a flag, none detected
  std::vector<std::string> assumed_rates;  // the rate keys left at their defaults
  std::optional<uint64_t> memlock;         // RLIMIT_MEMLOCK when cpu memory is detected and it is finite
};

bool given(const Config& config, std::string_view key) { return config.source(key) != ConfigSource::default_value; }

Status detect_gpu(const Config& config, Machine& m) {
  if (std::optional<uint64_t> bytes = config.get_size_or_auto("gpu_mem")) {
    m.hardware.gpu_bytes = *bytes;
    m.gpu_from = "--gpu-mem";
    return Status::ok();
  }
  std::string why;
  const std::vector<DeviceDescription> gpus = list_cuda_devices(&why);
  const int64_t index = config.get_int("gpu_index");
  if (index >= int64_t(gpus.size()))
    return error(Code::invalid_argument, "no GPU {} to plan for ({}); pass --gpu-mem SIZE for the machine you plan for",
                 index, gpus.empty() ? (why.empty() ? "none visible" : why) : fmt::format("{} visible", gpus.size()));
  // The CUDA backend's --gpu-mem auto takes 9/10 of the free memory; the total stands in for it.
  m.hardware.gpu_bytes = gpus[size_t(index)].total_memory / 10 * 9;
  m.gpu_from = fmt::format("9/10 of {}'s {}", gpus[size_t(index)].name, format_size(gpus[size_t(index)].total_memory));
  m.described = false;
  return Status::ok();
}

Status detect_cpu(const Config& config, Machine& m) {
  if (std::optional<uint64_t> bytes = config.get_size_or_auto("cpu_mem")) {
    m.hardware.cpu_bytes = *bytes;
    m.cpu_from = "--cpu-mem";
    return Status::ok();
  }
  const std::optional<uint64_t> available = mem_available();
  if (!available)
    return error(Code::invalid_argument, "cannot read MemAvailable from /proc/meminfo; pass --cpu-mem SIZE");
  m.hardware.cpu_bytes = *available;
  m.cpu_from = "MemAvailable";
  m.described = false;
  rlimit memlock{};
  if (::getrlimit(RLIMIT_MEMLOCK, &memlock) == 0 && memlock.rlim_cur != RLIM_INFINITY) m.memlock = memlock.rlim_cur;
  return Status::ok();
}

Status detect_nvme(const Config& config, Machine& m) {
  if (std::optional<uint64_t> bytes = config.get_size_or_auto("nvme_mem")) {
    m.hardware.nvme_bytes = *bytes;
    m.nvme_from = "--nvme-mem";
    return Status::ok();
  }
  const std::vector<std::string>& paths = config.get_list("nvme_path");
  if (paths.empty()) {
    m.nvme_from = "no --nvme-path or --nvme-mem";
    return Status::ok();
  }
  for (const std::string& p : paths) {
    StatusOr<PathInfo> info = probe_path(p);
    if (!info.is_ok())
      return Status(info.status().code(), fmt::format("--nvme-path {}: {}", p, info.status().message()));
    m.hardware.nvme_bytes += info->free_bytes;
  }
  m.nvme_from = fmt::format("free space of {}", fmt::join(paths, ", "));
  m.described = false;
  return Status::ok();
}

void read_rates(const Config& config, Machine& m) {
  model::PlanRates& r = m.hardware.rates;
  r.flops = config.text("rate_flops") == "auto" ? 0.0 : config.get_real("rate_flops") * 1e12;
  r.pcie = config.get_real("rate_pcie") * 1e9;
  r.nvme_read = config.get_real("rate_nvme_read") * 1e9;
  r.nvme_write = config.get_real("rate_nvme_write") * 1e9;
  r.adam = config.get_real("rate_adam") * 1e9;
  for (const char* key : {"rate_flops", "rate_pcie", "rate_nvme_read", "rate_nvme_write", "rate_adam"})
    if (!given(config, key)) m.assumed_rates.emplace_back(key);
}

StatusOr<Machine> describe_machine(const Config& config) {
  Machine m;
  STRATA_RETURN_IF_ERROR(detect_gpu(config, m));
  STRATA_RETURN_IF_ERROR(detect_cpu(config, m));
  STRATA_RETURN_IF_ERROR(detect_nvme(config, m));
  read_rates(config, m);
  STRATA_RETURN_IF_ERROR(model::check_hardware(m.hardware));
  return m;
}

model::PlanFixed fixed_choices(const Config& config) {
  return {.weights = given(config, "offload_param"),
          .optimizer = given(config, "optimizer_device") || given(config, "offload_optimizer"),
          .gradients = given(config, "offload_grad"),
          .checkpointing = given(config, "activation_checkpointing")};
}

std::string gb(uint64_t bytes) { return fmt::format("{:.1f} GB", double(bytes) / 1e9); }
std::string cell(uint64_t bytes) { return bytes == 0 ? "-" : format_size(bytes); }

std::string assumed(const Machine& m, std::string_view key) {
  for (const std::string& k : m.assumed_rates)
    if (k == key) return "assumed default";
  return "given";
}

void print_bytes(const model::Plan& p) {
  const model::PlanBytes& b = p.chosen.bytes;
  fmt::print("\n{:<13}{:>14}{:>14}{:>14}\n", "bytes", "gpu", "cpu (pinned)", "nvme");
  for (size_t s = 0; s < model::kPlanStates; ++s)
    fmt::print("{:<13}{:>14}{:>14}{:>14}\n", model::plan_state_name(PlanState(s)), cell(b.at(PlanTier::gpu, PlanState(s))),
               cell(b.at(PlanTier::cpu, PlanState(s))), cell(b.at(PlanTier::nvme, PlanState(s))));
  fmt::print("{:<13}{:>14}{:>14}{:>14}\n", "total", format_size(b.tier(PlanTier::gpu)),
             format_size(b.tier(PlanTier::cpu)), cell(b.tier(PlanTier::nvme)));
  const model::Hardware& h = p.hardware;
  fmt::print("{:<13}{:>14}{:>14}{:>14}\n", "budget", format_size(h.gpu_bytes), format_size(h.cpu_bytes),
             h.nvme_bytes ? format_size(h.nvme_bytes) : "none");
}

void print_time(const model::Plan& p, const Machine& m) {
  const model::StepTime& t = p.chosen.time;
  const model::StepTraffic& x = p.chosen.traffic;
  const model::PlanRates& r = p.hardware.rates;
  const double flops = r.flops > 0 ? r.flops : model::default_flops(p.chosen.options.dtype);
  fmt::print("\nstep time (the parts overlap: the step is the largest{}):\n",
             p.chosen.options.optimizer_device == model::TrainOptions::OptimizerDevice::cpu &&
                     !p.chosen.options.overlap_optimizer
                 ? ", plus cpu adam, which runs after them without --overlap-optimizer"
                 : "");
  fmt::print("  compute   {:>9.3g} s  model FLOPs{} at {:g} TFLOP/s ({})\n", t.compute_s,
             p.chosen.options.activation_checkpointing ? " x 4/3 (checkpointing recomputes the forward)" : "",
             flops / 1e12, assumed(m, "rate_flops"));
  fmt::print("  pcie      {:>9.3g} s  h2d {}, d2h {} at {:g} GB/s each way ({})\n", t.pcie_s, gb(x.h2d), gb(x.d2h),
             r.pcie / 1e9, assumed(m, "rate_pcie"));
  fmt::print("  nvme      {:>9.3g} s  read {} at {:g} GB/s ({}), write {} at {:g} GB/s ({})\n", t.nvme_s, gb(x.nvme_read),
             r.nvme_read / 1e9, assumed(m, "rate_nvme_read"), gb(x.nvme_write), r.nvme_write / 1e9,
             assumed(m, "rate_nvme_write"));
  fmt::print("  cpu adam  {:>9.3g} s  {} parameters at {:g} G/s ({})\n", t.adam_s, format_count(double(p.params)),
             r.adam / 1e9, assumed(m, "rate_adam"));
  fmt::print("  step      {:>9.3g} s  bottleneck: {}; {} tokens/s\n", t.step_s, t.bottleneck,
             format_count(double(p.chosen.options.tokens_per_step()) / t.step_s));
  if (!m.assumed_rates.empty())
    fmt::print("rates marked \"assumed default\" describe a typical workstation, not this machine: nothing was "
               "measured; pass --rate-* for yours\n");
}

void print_text(const model::Plan& p, const Machine& m) {
  const model::TrainOptions& o = p.chosen.options;
  fmt::print("model: {} ({} parameters), {}, micro-batch {} x seq {} x grad-accum {} = {} tokens per step, {}\n",
             p.config.name, format_count(double(p.params)), dtype_name(o.dtype), o.micro_batch, o.seq, o.grad_accum,
             o.tokens_per_step(), o.adam_states == AdamStates::q8 ? "AdamW with 8-bit moments" : "AdamW with fp32 moments");
  const model::Hardware& h = p.hardware;
  fmt::print("machine{}: gpu {} ({}), cpu {} pinned ({}), nvme {} ({})\n", m.described ? " (described)" : "",
             format_size(h.gpu_bytes), m.gpu_from, format_size(h.cpu_bytes), m.cpu_from,
             h.nvme_bytes ? gb(h.nvme_bytes) : "none", m.nvme_from);
  if (p.fits) {
    fmt::print("\nfits: {}\n  strata train {}\n", model::placement_summary(o), model::placement_flags(o));
  } else {
    fmt::print("\ndoes not fit: the closest placement ({}) needs", model::placement_summary(o));
    for (size_t t = 0; t < model::kPlanTiers; ++t)
      if (p.chosen.missing[t] > 0)
        fmt::print(" {} more {}", gb(p.chosen.missing[t]), model::plan_tier_name(PlanTier(t)));
    fmt::print("\n");
  }
  print_bytes(p);
  print_time(p, m);
  if (m.memlock && p.chosen.bytes.tier(PlanTier::cpu) > *m.memlock)
    fmt::print("\nwarning: the plan pins {} but the locked-memory limit is {} (ulimit -l): memory past it is "
               "pageable, so copies run slower; raise `ulimit -l`\n",
               format_size(p.chosen.bytes.tier(PlanTier::cpu)), format_size(*m.memlock));
  if (p.fits) return;
  fmt::print("\nwhat would make it fit:\n");
  for (const model::PlanSuggestion& s : p.suggestions) fmt::print("  {}: {}\n", s.change, s.effect);
}

nlohmann::json to_json(const model::Plan& p, const Machine& m) {
  const model::PlanCandidate& c = p.chosen;
  nlohmann::json j;
  j["fits"] = p.fits;
  j["model"] = p.config.name;
  j["params"] = p.params;
  j["gpu_bytes"] = c.bytes.tier(PlanTier::gpu);
  j["cpu_bytes"] = c.bytes.tier(PlanTier::cpu);
  j["nvme_bytes"] = c.bytes.tier(PlanTier::nvme);
  j["step_s"] = c.time.step_s;
  j["bottleneck"] = c.time.bottleneck;
  j["budgets"] = {{"gpu", p.hardware.gpu_bytes}, {"cpu", p.hardware.cpu_bytes}, {"nvme", p.hardware.nvme_bytes}};
  j["missing"] = {{"gpu", c.missing[0]}, {"cpu", c.missing[1]}, {"nvme", c.missing[2]}};
  j["described"] = m.described;
  j["placement"] = {{"summary", model::placement_summary(c.options)},
                    {"flags", model::placement_flags(c.options)},
                    {"offload_param", model::param_home_name(c.options.offload_param)},
                    {"offload_optimizer", model::optimizer_home_name(c.options)},
                    {"offload_grad", c.options.offload_grad == model::TrainOptions::GradHome::nvme ? "nvme" : "cpu"},
                    {"activation_checkpointing", c.options.activation_checkpointing}};
  for (size_t t = 0; t < model::kPlanTiers; ++t)
    for (size_t s = 0; s < model::kPlanStates; ++s)
      j["bytes"][model::plan_tier_name(PlanTier(t))][model::plan_state_name(PlanState(s))] =
          c.bytes.at(PlanTier(t), PlanState(s));
  j["time"] = {{"compute_s", c.time.compute_s}, {"pcie_s", c.time.pcie_s}, {"nvme_s", c.time.nvme_s},
               {"cpu_adam_s", c.time.adam_s}};
  j["traffic"] = {{"h2d", c.traffic.h2d}, {"d2h", c.traffic.d2h}, {"nvme_read", c.traffic.nvme_read},
                  {"nvme_write", c.traffic.nvme_write}};
  const model::PlanRates& r = p.hardware.rates;
  j["rates"] = {{"flops", r.flops > 0 ? r.flops : model::default_flops(c.options.dtype)}, {"pcie", r.pcie},
                {"nvme_read", r.nvme_read}, {"nvme_write", r.nvme_write}, {"adam", r.adam}};
  j["assumed_rates"] = m.assumed_rates;
  j["suggestions"] = nlohmann::json::array();
  for (const model::PlanSuggestion& s : p.suggestions)
    j["suggestions"].push_back({{"change", s.change}, {"effect", s.effect}, {"fits", s.fits}});
  return j;
}

int plan(const Config& config, bool json) {
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
  StatusOr<Machine> machine = describe_machine(config);
  if (!machine.is_ok()) return report_error(machine.status().message(), kExitUsage);
  StatusOr<model::Plan> p = model::make_plan(*mc, *parsed, machine->hardware, fixed_choices(config));
  if (!p.is_ok()) return report_error(p.status().message(), kExitUsage);
  if (json)
    fmt::print("{}\n", to_json(*p, *machine).dump(2));
  else
    print_text(*p, *machine);
  return p->fits ? kExitOk : kExitFailure;
}

}  // namespace

void add_plan_command(CLI::App& root, CommandRegistry& registry) {
  CLI::App* app = root.add_subcommand(
      "plan",
      "Plan a training run before allocating anything: the bytes of every state on the GPU, in pinned CPU memory\n"
      "and on NVMe, the placement that fits, a step-time estimate and, when nothing fits, what would.\n"
      "Takes `strata train`'s flags; describe another machine with --gpu-mem, --cpu-mem, --nvme-mem.\n"
      "Exit 0: it fits; 1: it does not; 2: bad flags.");
  auto json = std::make_shared<bool>(false);
  app->add_flag("--json", *json, "Print one JSON document (fits, params, gpu_bytes, cpu_bytes, nvme_bytes, step_s, ...)");
  auto flags = std::make_shared<ConfigFlags>(*app, strata_plan_config_schema());
  registry.add(app, [flags, json]() {
    StatusOr<Config> config = flags->resolve(environ);
    if (!config.is_ok()) return report_error(config.status().message(), kExitUsage);
    for (const std::string& w : config->ignored_file_warnings()) spdlog::warn("{}", w);
    return plan(*config, *json);
  });
}

}  // namespace strata::cli
