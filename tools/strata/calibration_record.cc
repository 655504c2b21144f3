// Bench results into the calibration cache, and `strata plan --calibrate` (calibration_record.h).
#include "tools/strata/calibration_record.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/cpu/simd_level.h"
#include "offload/config_keys.h"
#include "runtime/device_peak.h"
#include "runtime/fs_probe.h"
#include "runtime/units.h"
#include "model/plan/plan_machine.h"

namespace strata::cli {
namespace {

// The element of `items` that `keep` accepts with the largest `key`, or null.
template <class T, class Keep, class Key>
const T* largest(const std::vector<T>& items, Keep keep, Key key) {
  const T* best = nullptr;
  for (const T& item : items)
    if (keep(item) && (best == nullptr || key(item) > key(*best))) best = &item;
  return best;
}

model::CalibrationRate stamped(std::string rate, double value, const std::string& by, std::string how) {
  model::CalibrationRate r;
  r.rate = std::move(rate);
  r.value = value;
  r.measured_at = model::utc_timestamp();
  r.by = by;
  r.how = std::move(how);
  return r;
}

// The file's cache to record into: empty when there is none, replaced when it is of another
// version, moved aside when corrupt; nullopt (with a warning) when it cannot be used at all.
std::optional<model::CalibrationCache> cache_to_record_into(const std::string& path) {
  StatusOr<std::optional<model::CalibrationCache>> read = model::read_calibration(path);
  if (read.is_ok()) return read->value_or(model::CalibrationCache{});
  if (read.status().code() == Code::failed_precondition) {
    spdlog::warn("calibration: {}; replacing it with this measurement", read.status().message());
    return model::CalibrationCache{};
  }
  if (read.status().code() == Code::corruption) {
    const std::string aside = path + ".corrupt";
    std::error_code ec;
    std::filesystem::rename(path, aside, ec);
    if (!ec) {
      spdlog::warn("calibration: {}; moved it to {} and started a new file", read.status().message(), aside);
      return model::CalibrationCache{};
    }
  }
  spdlog::warn("calibration: {}; not recorded", read.status().message());
  return std::nullopt;
}

}  // namespace

std::vector<model::CalibrationRate> io_rates(const bench::IoBenchReport& report, const bench::IoBenchOptions& options,
                                             const std::string& by) {
  std::vector<model::CalibrationRate> out;
  if (options.paths.empty()) return out;
  const std::string& path = options.paths.front();
  StatusOr<PathInfo> info = probe_path(path);
  if (!info.is_ok()) {
    spdlog::warn("calibration: {}: {}; not recorded", path, info.status().message());
    return out;
  }
  for (const IoOp mode : {IoOp::read, IoOp::write}) {
    const auto of_mode = [&](const bench::IoBenchPoint& p) { return p.mode == mode; };
    const bench::IoBenchPoint* best = largest(report.points, of_mode, [](const auto& p) { return p.strata.gbps; });
    if (best == nullptr || !(best->strata.gbps > 0)) continue;
    const auto points = std::count_if(report.points.begin(), report.points.end(), of_mode);
    model::CalibrationRate r =
        stamped(mode == IoOp::read ? "nvme_read" : "nvme_write", best->strata.gbps * 1e9, by,
                fmt::format("best of {} point(s): {} blocks at queue depth {}, {} file, {} engine", points,
                            format_size(best->block_bytes), best->queue_depth, format_size(report.size), report.engine));
    r.path = path;
    r.disk = info->block_device;
    r.filesystem = info->fs_type;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<model::CalibrationRate> adam_rates(const bench::AdamBenchReport& report, const std::string& by) {
  std::vector<model::CalibrationRate> out;
  for (const AdamStates states : {AdamStates::f32, AdamStates::q8}) {
    const bench::AdamBenchCase* best = largest(
        report.cases, [&](const auto& c) { return c.states == states && c.grad == kernels::FloatFormat::f32; },
        [](const auto& c) { return c.tensors; });
    if (best == nullptr || !(best->params_per_s > 0)) continue;
    model::CalibrationRate r =
        stamped("adam", best->params_per_s, by,
                fmt::format("{}, {} tensors, {} parameters, {} kernels, median of {}", best->variant, best->tensors,
                            format_count(double(best->params)), report.simd, report.repeat));
    r.states = states == AdamStates::q8 ? "8bit" : "fp32";
    r.threads = report.threads;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<model::CalibrationRate> pcie_rates(const bench::PcieBenchReport& report, const std::string& by) {
  std::vector<model::CalibrationRate> out;
  for (const CopyDirection direction : {CopyDirection::h2d, CopyDirection::d2h}) {
    const bench::PciePoint* p = largest(
        report.points,
        [&](const auto& q) { return q.direction == direction && q.memory == bench::HostMemory::pinned && q.near; },
        [](const auto& q) { return q.bytes; });
    if (p == nullptr || !(p->strata_gbps.median > 0)) continue;
    model::CalibrationRate r =
        stamped(direction == CopyDirection::h2d ? "pcie_h2d" : "pcie_d2h", p->strata_gbps.median * 1e9, by,
                fmt::format("{} pinned copies near the device, median of {}: {}", format_size(p->bytes), report.repeat,
                            report.strata_path));
    r.backend = report.backend;
    r.device = report.device;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<model::CalibrationRate> device_rates(const bench::DeviceBenchReport& report, const std::string& by) {
  std::vector<model::CalibrationRate> out;
  for (const bench::PrecisionSummary& s : report.precisions) {
    if (!s.ran) continue;
    const std::optional<double> tflops = s.model_tflops ? s.model_tflops : s.square_tflops;
    if (!tflops || !(*tflops > 0)) continue;
    model::CalibrationRate r =
        stamped("flops", *tflops * 1e12, by,
                s.model_tflops ? fmt::format("{}'s forward GEMMs at {} x {} tokens, {}", report.model,
                                             report.micro_batch, report.seq, report.gemm_path)
                               : fmt::format("the square GEMM, {}", report.gemm_path));
    r.backend = report.backend;
    r.device = report.device;
    r.precision = std::string(peak_precision_name(s.precision));
    out.push_back(std::move(r));
  }
  return out;
}

std::string rate_summary(const model::CalibrationRate& r) {
  if (r.rate == "adam")
    return fmt::format("adam {} parameters/s ({} moments, {} threads)", format_count(r.value), r.states, r.threads);
  if (r.rate == "flops")
    return fmt::format("flops {:.3g} TFLOP/s ({}, {} on {})", r.value / 1e12, r.precision, r.backend, r.device);
  if (r.rate == "nvme_read" || r.rate == "nvme_write")
    return fmt::format("{} {:.3g} GB/s on {} ({}, {})", r.rate, r.value / 1e9, r.path,
                       r.disk.empty() ? "no block device" : r.disk, r.filesystem);
  return fmt::format("{} {:.3g} GB/s ({} on {})", r.rate, r.value / 1e9, r.backend, r.device);
}

void record_calibration(const std::string& path, const std::vector<model::CalibrationRate>& rates) {
  if (path.empty() || rates.empty()) return;
  StatusOr<model::MachineFingerprint> here = model::this_machine();
  if (!here.is_ok()) {
    spdlog::warn("calibration: cannot tell this machine ({}); not recorded in {}", here.status().message(), path);
    return;
  }
  std::optional<model::CalibrationCache> cache = cache_to_record_into(path);
  if (!cache) return;
  model::record_rates(*cache, *here, rates);
  if (Status s = model::write_calibration(path, *cache); !s.is_ok()) {
    spdlog::warn("calibration: {}; not recorded", s.message());
    return;
  }
  std::vector<std::string> what;
  for (const model::CalibrationRate& r : rates) what.push_back(rate_summary(r));
  spdlog::info("calibration: recorded in {} for this machine ({}): {}", path, model::describe_fingerprint(*here),
               fmt::join(what, "; "));
}

std::string RecordFlags::path() const {
  if (no_record || calibration == "none") return "";
  if (!calibration.empty()) return calibration;
  return model::default_calibration_path(std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"));
}

void add_record_flags(CLI::App& app, RecordFlags& flags) {
  app.add_option("--calibration", flags.calibration,
                 "calibration cache to record the measured rates in, for `strata plan` and `strata train` (default "
                 "$XDG_CACHE_HOME/strata/calibration.json or ~/.cache/strata/calibration.json; none: do not record)")
      ->envname("STRATA_CALIBRATION");
  app.add_flag("--no-record", flags.no_record, "do not record the measured rates in the calibration cache");
}

Status calibrate(const Config& config, const model::TrainOptions& o, const std::string& path) {
  const std::string by = "strata plan --calibrate";
  std::vector<model::CalibrationRate> rates;
  for (const std::string& dir : config.get_list("nvme_path")) {
    spdlog::info("calibrate: sequential O_DIRECT reads and writes on {}", dir);
    bench::IoBenchOptions io;
    io.paths = {dir};
    io.size = 256ull << 20;
    io.blocks = {8ull << 20};
    io.queue_depths = {32};
    io.fio = false;
    STRATA_ASSIGN_OR_RETURN(IoEngineConfig ec, io_engine_config(config));
    io.engine = ec.kind;
    STRATA_ASSIGN_OR_RETURN(bench::IoBenchReport report, bench::run_io_bench(io));
    for (model::CalibrationRate& r : io_rates(report, io, by)) rates.push_back(std::move(r));
  }
  spdlog::info("calibrate: CPU AdamW on 8M parameters");
  bench::AdamBenchOptions adam;
  adam.params = 8'000'000;
  adam.tensor_counts = {32};
  adam.threads = int(config.get_int("threads"));
  adam.grads = {kernels::FloatFormat::f32};
  adam.states = {o.adam_states};
  adam.simd = kernels::best_simd_level();
  adam.repeat = 3;
  adam.torch = false;
  STRATA_ASSIGN_OR_RETURN(bench::AdamBenchReport adam_report, bench::run_adam_bench(adam));
  for (model::CalibrationRate& r : adam_rates(adam_report, by)) rates.push_back(std::move(r));
  // The copies and GEMMs of the backend the run would use: on the CPU backend, memcpy between
  // pinned buffers and the "device" arena, and the CPU's GEMMs (the planner adds them to AdamW's
  // time: the same cores).
  std::string why;
  const BackendKind backend = model::train_backend_kind(config, &why);
  const bool cuda = backend == BackendKind::cuda;
  spdlog::info("calibrate: host<->device copies and the model's GEMMs on the {} backend ({})", cuda ? "CUDA" : "CPU",
               why);
  bench::PcieBenchOptions pcie;
  pcie.backend = backend;
  pcie.device_index = int(config.get_int("gpu_index"));
  pcie.sizes = {cuda ? 256ull << 20 : 64ull << 20};
  pcie.directions = {CopyDirection::h2d, CopyDirection::d2h};
  pcie.memory = {bench::HostMemory::pinned};
  pcie.numa = bench::NumaPlacement::near;
  pcie.repeat = 3;
  pcie.plain = false;
  STRATA_ASSIGN_OR_RETURN(bench::PcieBenchReport pcie_report, bench::run_pcie_bench(pcie));
  for (model::CalibrationRate& r : pcie_rates(pcie_report, by)) rates.push_back(std::move(r));
  bench::DeviceBenchOptions device;
  device.backend = backend;
  device.device_index = pcie.device_index;
  if (!o.preset.empty()) device.preset = o.preset;  // the run's GEMM shapes (its base preset's)
  STRATA_ASSIGN_OR_RETURN(PeakPrecision precision, peak_precision_for(o.dtype, o.tf32));
  device.precisions = {precision};
  device.square = -1;
  device.copy_bytes = 64ull << 20;
  device.repeat = 3;
  device.min_seconds_per_run = cuda ? 0.02 : 0.0;
  STRATA_ASSIGN_OR_RETURN(bench::DeviceBenchReport device_report, bench::run_device_bench(device));
  for (model::CalibrationRate& r : device_rates(device_report, by)) rates.push_back(std::move(r));
  record_calibration(path, rates);
  return Status::ok();
}

}  // namespace strata::cli
