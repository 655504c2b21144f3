// The machine a plan is for (plan_machine.h): budgets detected or described, rates given,
// measured (the calibration cache) or assumed.
#include "model/plan/plan_machine.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/cpu/crc32c.h"
#include "runtime/cpu_backend.h"
#include "runtime/device_memory_probe.h"
#include "runtime/fs_probe.h"
#include "runtime/units.h"
#include "model/plan/train_preflight.h"

namespace strata::model {
namespace {

using model::PlanRateKind;

bool given(const Config& config, std::string_view key) { return config.source(key) != ConfigSource::default_value; }

// The CUDA backend's --gpu-mem auto takes 9/10 of the device's free memory: NVML's free memory
// when NVML answers, else the total.
void cuda_budget(const DeviceDescription& gpu, Machine& m) {
  uint64_t base = gpu.total_memory;
  std::string what = "memory";
  if (StatusOr<std::unique_ptr<DeviceMemoryProbe>> probe = DeviceMemoryProbe::open(gpu.pci_bus_id); probe.is_ok())
    if (StatusOr<DeviceMemory> mem = (*probe)->read(); mem.is_ok() && mem->total >= mem->used) {
      base = mem->total - mem->used;
      what = "free memory";
    }
  m.hardware.gpu_bytes = base / 10 * 9;
  m.gpu_from = fmt::format("9/10 of {}'s {} {}", gpu.name, format_size(base), what);
}

Status detect_gpu(const Config& config, MachineFor purpose, Machine& m) {
  if (std::optional<uint64_t> bytes = config.get_size_or_auto("gpu_mem")) {
    m.hardware.gpu_bytes = *bytes;
    m.gpu_from = "--gpu-mem";
    return Status::ok();
  }
  const std::string& device = config.get_text("device");
  std::string why;
  const std::vector<DeviceDescription> gpus = device == "cpu" ? std::vector<DeviceDescription>{} : list_cuda_devices(&why);
  m.described = false;
  if (device == "cpu" || (purpose == MachineFor::train && gpus.empty())) {
    m.hardware.gpu_bytes = kCpuBackendDefaultBudget;
    m.gpu_from = "the CPU backend's default arena";
    return Status::ok();
  }
  const int64_t index = config.get_int("gpu_index");
  if (index >= int64_t(gpus.size()))
    return error(Code::invalid_argument, "no GPU {} to plan for ({}); pass --gpu-mem SIZE for the machine you plan for",
                 index, gpus.empty() ? (why.empty() ? "none visible" : why) : fmt::format("{} visible", gpus.size()));
  cuda_budget(gpus[size_t(index)], m);
  return Status::ok();
}

// For train, --cpu-mem 0 is the pinned pool's "no limit": what the machine has.
Status detect_cpu(const Config& config, MachineFor purpose, Machine& m) {
  const std::optional<uint64_t> bytes = config.get_size_or_auto("cpu_mem");
  if (bytes && (*bytes > 0 || purpose == MachineFor::plan)) {
    m.hardware.cpu_bytes = *bytes;
    m.cpu_from = "--cpu-mem";
    return Status::ok();
  }
  const std::optional<uint64_t> available = mem_available();
  if (!available)
    return error(Code::invalid_argument, "cannot read MemAvailable from /proc/meminfo; pass --cpu-mem SIZE");
  m.hardware.cpu_bytes = *available;
  m.hardware.cpu_bytes_given = false;  // what the machine has free: the read cache leaves it alone
  m.cpu_from = "MemAvailable";
  m.described = false;
  rlimit memlock{};
  if (::getrlimit(RLIMIT_MEMLOCK, &memlock) == 0 && memlock.rlim_cur != RLIM_INFINITY) m.memlock = memlock.rlim_cur;
  return Status::ok();
}

// nvme_mem is `strata plan`'s key (a described machine's NVMe); train uses what its paths hold.
Status detect_nvme(const Config& config, Machine& m) {
  if (config.schema().find("nvme_mem") != nullptr)
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

// CRC-32C bytes/s on one core: the best of 3 passes over 16 MiB (about 10 ms). Measured for every
// CPU-backend plan rather than cached: it is cheaper than reading a file.
double measure_crc_rate() {
  std::vector<std::byte> bytes(16ull << 20, std::byte{0x5a});
  double best = 0;
  uint32_t crc = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    crc = kernels::crc32c(crc, bytes.data(), bytes.size());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s > 0) best = std::max(best, double(bytes.size()) / s);
  }
  spdlog::debug("crc32c: {:.3g} GB/s (crc 0x{:08x})", best / 1e9, crc);
  return best;
}

void warn(const std::string& path, const std::string& what) { spdlog::warn("calibration: {}: {}", path, what); }

// What the cached rates are for: the run's backend, device, precision, moments and disks.
model::RateQuery rate_query(const Config& config, const model::TrainOptions& o) {
  model::RateQuery q;
  std::string why;
  q.backend = train_backend_kind(config, &why) == BackendKind::cuda ? "cuda" : "cpu";
  if (q.backend == "cuda") {
    const std::vector<DeviceDescription> gpus = list_cuda_devices();
    const size_t index = size_t(config.get_int("gpu_index"));
    if (index < gpus.size()) q.device = gpus[index].name;
  }
  q.precision = std::string(model::flops_precision(o.dtype, o.tf32));
  q.states = o.adam_states == AdamStates::q8 ? "8bit" : "fp32";
  for (const std::string& p : config.get_list("nvme_path")) {
    StatusOr<PathInfo> info = probe_path(p);
    if (info.is_ok()) q.nvme.push_back({p, info->block_device, info->fs_type});
  }
  return q;
}

// The cached rates that apply to this run, with warnings for a cache that cannot be used.
std::optional<model::CachedRates> load_cached_rates(const Config& config, const model::TrainOptions& o,
                                                    const Machine& m, std::string& used_path) {
  const std::string path = calibration_path(config);
  const bool named = given(config, "calibration") && !config.get_text("calibration").empty();
  if (path.empty() || (m.described && !named)) return std::nullopt;
  StatusOr<std::optional<model::CalibrationCache>> cache = model::read_calibration(path);
  if (!cache.is_ok()) {
    warn(path, fmt::format("{}; its rates are not used (`strata plan --calibrate` measures this machine again and "
                           "replaces the file)",
                           cache.status().message()));
    return std::nullopt;
  }
  if (!*cache) return std::nullopt;
  model::RateQuery q = rate_query(config, o);
  const model::MachineRates* rates = nullptr;
  std::string on;
  if (m.described) {
    if ((*cache)->machines.size() != 1) {
      warn(path, fmt::format("holds the rates of {} machines; a described machine takes a file of one: not used",
                             (*cache)->machines.size()));
      return std::nullopt;
    }
    rates = &(*cache)->machines.front();
    on = fmt::format(" on {}", model::describe_fingerprint(rates->machine));
    q.nvme.clear();  // the described machine's disks: every disk the file measured
    for (const model::CalibrationRate& r : rates->rates)
      if (r.rate == "nvme_read") q.nvme.push_back({r.path, r.disk, r.filesystem});
  } else {
    StatusOr<model::MachineFingerprint> here = model::this_machine();
    if (!here.is_ok()) {
      warn(path, fmt::format("cannot tell this machine ({}); its rates are not used", here.status().message()));
      return std::nullopt;
    }
    rates = model::rates_of(**cache, *here);
    if (rates == nullptr) {
      std::vector<std::string> others;
      for (const model::MachineRates& other : (*cache)->machines)
        others.push_back(model::fingerprint_difference(*here, other.machine));
      if (!others.empty())
        warn(path, fmt::format("its rates were measured on another machine ({}); not used for this one ({}): "
                               "`strata plan --calibrate` measures this one",
                               fmt::join(others, "; "), model::describe_fingerprint(*here)));
      return std::nullopt;
    }
  }
  model::CachedRates cached = model::cached_rates(rates->rates, q);
  for (const std::string& note : cached.notes) warn(path, note);
  for (std::optional<model::CachedRate>& r : cached.rates)
    if (r) r->source += on;
  used_path = path;
  return cached;
}

void read_rates(const Config& config, const std::optional<model::CachedRates>& cached, Machine& m) {
  double* values[model::kPlanRateKinds] = {&m.hardware.rates.flops, &m.hardware.rates.pcie,
                                           &m.hardware.rates.nvme_read, &m.hardware.rates.nvme_write,
                                           &m.hardware.rates.adam};
  const double scale[model::kPlanRateKinds] = {1e12, 1e9, 1e9, 1e9, 1e9};
  for (size_t k = 0; k < model::kPlanRateKinds; ++k) {
    const std::string_view key = model::plan_rate_key(PlanRateKind(k));
    *values[k] = config.text(key) == "auto" ? 0.0 : config.get_real(key) * scale[k];
    m.rate_source[k] = "assumed default";
    if (given(config, key)) {
      m.rate_source[k] = "given";
    } else if (cached && cached->rates[k]) {
      *values[k] = cached->rates[k]->value;
      m.rate_source[k] = cached->rates[k]->source;
    }
  }
}

// `strata plan`'s world (--ranks, --nodes and the links' GB/s): a rank's budgets are a GPU's and its
// share of the node's pinned memory and NVMe.
Status read_world(const Config& config, Machine& m) {
  model::World& w = m.hardware.world;
  w.ranks = uint32_t(config.get_int("ranks"));
  w.nodes = uint32_t(config.get_int("nodes"));
  w.intra_node = config.get_real("rate_intra_node") * 1e9;
  w.inter_node = config.get_real("rate_inter_node") * 1e9;
  if (given(config, "rate_intra_node")) m.intra_node_source = "given";
  if (given(config, "rate_inter_node")) m.inter_node_source = "given";
  STRATA_RETURN_IF_ERROR(model::check_world(w));
  const uint32_t per_node = w.ranks_per_node();
  if (per_node == 1) return Status::ok();
  m.hardware.cpu_bytes /= per_node;
  m.cpu_from += fmt::format(", / {} ranks per node", per_node);
  if (m.hardware.nvme_bytes > 0) {
    m.hardware.nvme_bytes /= per_node;
    m.nvme_from += fmt::format(", / {} ranks per node", per_node);
  }
  return Status::ok();
}

}  // namespace

BackendKind train_backend_kind(const Config& config, std::string* why) {
  const std::string& device = config.get_text("device");
  if (device == "cuda") {
    *why = "--device cuda";
    return BackendKind::cuda;
  }
  if (device == "cpu") {
    *why = "--device cpu";
    return BackendKind::cpu;
  }
  std::string reason;
  if (cuda_available(&reason)) {
    *why = "--device auto and a CUDA device is visible";
    return BackendKind::cuda;
  }
  *why = "--device auto: " + reason;
  return BackendKind::cpu;
}

std::string calibration_path(const Config& config) {
  const std::string& given_path = config.get_text("calibration");
  if (given_path == "none") return "";
  if (!given_path.empty()) return given_path;
  return model::default_calibration_path(std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"));
}

std::vector<std::string> assumed_rates(const Machine& m) {
  std::vector<std::string> keys;
  for (size_t k = 0; k < model::kPlanRateKinds; ++k)
    if (m.rate_source[k] == "assumed default") keys.emplace_back(model::plan_rate_key(PlanRateKind(k)));
  return keys;
}

StatusOr<Machine> describe_budgets(const Config& config, MachineFor purpose) {
  Machine m;
  STRATA_RETURN_IF_ERROR(detect_gpu(config, purpose, m));
  STRATA_RETURN_IF_ERROR(detect_cpu(config, purpose, m));
  STRATA_RETURN_IF_ERROR(detect_nvme(config, m));
  if (purpose == MachineFor::train) m.described = false;  // a run is always on this machine
  return m;
}

StatusOr<Machine> describe_machine(const Config& config, const model::TrainOptions& o, MachineFor purpose) {
  STRATA_ASSIGN_OR_RETURN(Machine m, describe_budgets(config, purpose));
  if (config.schema().find("ranks") != nullptr) STRATA_RETURN_IF_ERROR(read_world(config, m));
  read_rates(config, load_cached_rates(config, o, m, m.calibration), m);
  // A run on the CPU backend (this machine without a GPU, or --device cpu) computes on the cores
  // that also copy and run AdamW; a described machine is a GPU machine unless --device cpu says not.
  std::string why;
  m.hardware.rates.shared_cores = train_backend_kind(config, &why) == BackendKind::cpu &&
                                  (!m.described || config.get_text("device") == "cpu");
  m.crc_source = "assumed default";
  if (m.hardware.rates.shared_cores && !m.described) {
    if (const double crc = measure_crc_rate(); crc > 0) {
      m.hardware.rates.crc = crc;
      m.crc_source = "measured now, 16 MiB on one core";
    }
  }
  STRATA_RETURN_IF_ERROR(model::check_hardware(m.hardware));
  return m;
}

void add_plan_rate_config_keys(ConfigSchema& schema) {
  const PlanRates d;
  schema.add({.name = "calibration",
              .type = ValueType::path,
              .help = "Calibration cache of measured rates (strata bench and strata plan --calibrate record into "
                      "it; plan and train read this machine's rates from it): default "
                      "$XDG_CACHE_HOME/strata/calibration.json, else ~/.cache/strata/calibration.json; none: no "
                      "cache"});
  schema.add({.name = "rate_flops",
              .type = ValueType::real,
              .default_text = "auto",
              .help = fmt::format("Device TFLOP/s the step-time model takes (auto: measured, else {:g} at bf16/fp16, "
                                  "{:g} at fp32)",
                                  default_flops(DType::bf16) / 1e12, default_flops(DType::f32) / 1e12),
              .min = 1e-6,
              .allow_auto = true});
  // A rate in 1e9 per second whose default is PlanRates's.
  const auto add_rate = [&schema](const char* name, double rate, const char* help) {
    schema.add({.name = name, .type = ValueType::real, .default_text = fmt::format("{:g}", rate / 1e9), .help = help,
                .min = 1e-6});
  };
  add_rate("rate_pcie", d.pcie,
           "Host <-> device GB/s, each direction, the step-time model takes (not given: measured, else this)");
  add_rate("rate_nvme_read", d.nvme_read,
           "NVMe read GB/s, all paths together, the step-time model takes (not given: measured, else this)");
  add_rate("rate_nvme_write", d.nvme_write,
           "NVMe write GB/s, all paths together, the step-time model takes (not given: measured, else this)");
  add_rate("rate_adam", d.adam,
           "CPU AdamW billions of parameters per second (every thread) the step-time model takes (not given: "
           "measured, else this)");
}

}  // namespace strata::model
