// TrainBench (train_bench.h): per-step counter deltas, compute spans, the disk and the bound.
#include "tools/strata/train_bench.h"


#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "bench/io_bench.h"
#include "model/train/metrics_log.h"
#include "offload/config_keys.h"
#include "offload/nvme_store.h"
#include "offload/tier_manager.h"
#include "runtime/units.h"

namespace strata::cli {
namespace {

constexpr uint64_t kMinMeasureBytes = 64ull << 20;
constexpr uint64_t kMaxMeasureBytes = 1ull << 30;
constexpr double kGB = 1e9;

// Sum of the spans that begin inside [begin_us, end_us].
double busy_seconds(const std::vector<std::pair<double, double>>& spans, double begin_us, double end_us) {
  double us = 0;
  for (auto it = std::lower_bound(spans.begin(), spans.end(), std::make_pair(begin_us, begin_us));
       it != spans.end() && it->first <= end_us; ++it)
    us += it->second - it->first;
  return us / 1e6;
}

BenchStep mean_of(const std::vector<BenchStep>& steps) {
  BenchStep m;
  if (steps.empty()) return m;
  const double n = double(steps.size());
  for (const BenchStep& s : steps) {
    m.step_s += s.step_s / n;
    m.compute_s += s.compute_s / n;
    m.weight_wait_s += s.weight_wait_s / n;
    m.optimizer_s += s.optimizer_s / n;
    m.grad_wait_s += s.grad_wait_s / n;
    m.nvme_read_bytes += s.nvme_read_bytes;
    m.nvme_write_bytes += s.nvme_write_bytes;
    m.pcie_bytes += s.pcie_bytes;
    m.acquires += s.acquires;
    m.late_arrivals += s.late_arrivals;
  }
  m.nvme_read_bytes /= steps.size();
  m.nvme_write_bytes /= steps.size();
  m.pcie_bytes /= steps.size();
  m.acquires /= steps.size();
  m.late_arrivals /= steps.size();
  return m;
}

double gbps(uint64_t bytes, double seconds) { return seconds > 0 ? double(bytes) / seconds / kGB : 0.0; }

std::string row(const std::string& label, const BenchStep& s, const std::optional<DiskBandwidth>& disk) {
  const BenchBound b = bench_bound(s, disk);
  return fmt::format("{:<12} {:>8.3f} {:>9.3f} {:>13.3f} {:>11.3f} {:>11.3f} {:>12.4f} {:>13.4f} {:>9.3f} {:>9.3f} "
                     "{:>9.3f} {:>8.3f} {:>10.3f}\n",
                     label, s.step_s, s.compute_s, s.weight_wait_s, s.optimizer_s, s.grad_wait_s,
                     double(s.nvme_read_bytes) / kGB, double(s.nvme_write_bytes) / kGB,
                     gbps(s.nvme_read_bytes + s.nvme_write_bytes, s.step_s), gbps(s.pcie_bytes, s.step_s), b.nvme_s,
                     b.bound_s, b.efficiency);
}

}  // namespace

uint64_t disk_measure_bytes_per_path(uint64_t moved_per_step, size_t paths) {
  const uint64_t per_path = paths > 0 ? 2 * moved_per_step / paths : 0;
  return std::clamp(per_path, kMinMeasureBytes, kMaxMeasureBytes);
}

StatusOr<std::optional<DiskBandwidth>> measure_run_disk(const Config& config, const model::TrainOffload& offload) {
  if (offload.nvme_bytes() == 0) return std::optional<DiskBandwidth>();
  const std::vector<std::string>& paths = config.get_list("nvme_path");
  // Every homed byte read once and written once: the floor of what a step moves.
  uint64_t per_path = disk_measure_bytes_per_path(2 * offload.nvme_bytes(), paths.size());
  for (const std::string& p : paths) {
    std::error_code ec;
    const std::filesystem::space_info room = std::filesystem::space(p, ec);
    if (!ec) per_path = std::min<uint64_t>(per_path, room.available / 2 / (8 << 20) * (8 << 20));
  }
  if (per_path < (8 << 20))
    return error(Code::no_space, "bench: {} has too little free space left after the run's swap files to measure "
                                 "its bandwidth (8 MiB needed per path); free some, or drop --bench",
                 fmt::join(paths, ", "));
  STRATA_ASSIGN_OR_RETURN(IoEngineConfig ec, io_engine_config(config));
  const uint64_t stripe_unit = NvmeStoreOptions{}.stripe_unit;  // as TrainOffload's store
  STRATA_ASSIGN_OR_RETURN(bench::StoreBandwidth bw,
                          bench::measure_store_bandwidth(ec, paths, per_path * paths.size(), stripe_unit));
  DiskBandwidth d{.read_gbps = bw.read_gbps, .write_gbps = bw.write_gbps, .bytes = bw.bytes, .paths = paths.size(),
                  .engine = bw.engine};
  spdlog::info("bench: disk read {:.3f} GB/s, write {:.3f} GB/s ({} each way over {} path(s), engine {}, O_DIRECT)",
               d.read_gbps, d.write_gbps, format_size(d.bytes), d.paths, d.engine);
  return std::optional<DiskBandwidth>(d);
}

BenchBound bench_bound(const BenchStep& s, const std::optional<DiskBandwidth>& disk) {
  BenchBound b;
  if (disk && disk->read_gbps > 0 && disk->write_gbps > 0)
    b.nvme_s = double(s.nvme_read_bytes) / (disk->read_gbps * kGB) +
               double(s.nvme_write_bytes) / (disk->write_gbps * kGB);
  b.nvme_bound = b.nvme_s > s.compute_s;
  b.bound_s = std::max(s.compute_s, b.nvme_s);
  b.efficiency = s.step_s > 0 ? b.bound_s / s.step_s : 0.0;
  return b;
}

std::string bench_table(const BenchReport& r) {
  std::string out = fmt::format(
      "bench: the step's breakdown and its lower bound ({}; GB = 1e9 bytes, GB/s over the step's wall time)\n",
      r.steps.empty() ? "only the warm-up step ran: pass --steps 2 or more for steady-state figures"
                      : fmt::format("{}; step {} is the warm-up",
                                    r.steps.size() == 1 ? fmt::format("step {}", r.steps.front().step)
                                                        : fmt::format("steps {}..{}", r.steps.front().step,
                                                                      r.steps.back().step),
                                    r.warmup ? r.warmup->step : r.steps.front().step - 1));
  out += fmt::format("{:<12} {:>8} {:>9} {:>13} {:>11} {:>11} {:>12} {:>13} {:>9} {:>9} {:>9} {:>8} {:>10}\n", "step",
                     "step s", "compute s", "weight wait s", "optimizer s", "grad wait s", "nvme read GB",
                     "nvme write GB", "nvme GB/s", "pcie GB/s", "nvme s", "bound s", "efficiency");
  if (r.warmup) out += row(fmt::format("{} (warm-up)", r.warmup->step), *r.warmup, r.disk);
  for (const BenchStep& s : r.steps) out += row(fmt::to_string(s.step), s, r.disk);
  out += row("mean", r.mean, r.disk);
  if (r.final_update)
    out += fmt::format("final update (the last step's, applied after it): {:.3f} s, optimizer {:.3f} s, nvme read "
                       "{:.4f} GB, written {:.4f} GB\n",
                       r.final_update->step_s, r.final_update->optimizer_s,
                       double(r.final_update->nvme_read_bytes) / kGB, double(r.final_update->nvme_write_bytes) / kGB);
  if (r.mean.acquires > 0)
    out += fmt::format("weights: {:.1f}% of a step's {} acquires arrived before the compute needed them ({} late: the "
                       "compute stood over {:.0f} us for each)\n",
                       100.0 * arrived_in_time(r.mean.acquires, r.mean.late_arrivals), r.mean.acquires, r.mean.late_arrivals,
                       kLateArrivalSeconds * 1e6);
  const BenchBound b = bench_bound(r.mean, r.disk);
  if (r.disk) {
    out += fmt::format("disk: read {:.3f} GB/s, write {:.3f} GB/s, measured before training over {} path(s) ({} each "
                       "way, engine {}, O_DIRECT, sequential)\n",
                       r.disk->read_gbps, r.disk->write_gbps, r.disk->paths, format_size(r.disk->bytes),
                       r.disk->engine);
    out += "bound: max(compute, nvme s); nvme s = read GB / read GB/s + write GB / write GB/s (a drive serves reads "
           "and writes one at a time, so their times add)\n";
    out += fmt::format("bottleneck: {} ({:.3f} s of compute against {:.3f} s of NVMe transfer per step); the step runs "
                       "at {:.1f}% of its bound ({:.3f} s bound, {:.3f} s step)\n",
                       b.nvme_bound ? "NVMe" : "compute", r.mean.compute_s, b.nvme_s, 100.0 * b.efficiency, b.bound_s,
                       r.mean.step_s);
  } else {
    out += "bound: compute alone (nothing is homed on NVMe)\n";
    out += fmt::format("bottleneck: compute ({:.3f} s per step, no NVMe transfer); the step runs at {:.1f}% of its "
                       "bound ({:.3f} s bound, {:.3f} s step)\n",
                       r.mean.compute_s, 100.0 * b.efficiency, b.bound_s, r.mean.step_s);
  }
  return out;
}

std::string bench_json_line(const BenchReport& r) {
  const BenchBound b = bench_bound(r.mean, r.disk);
  nlohmann::ordered_json j;
  j["bench"] = true;
  j["steps"] = r.steps.size();
  j["step_s"] = r.mean.step_s;
  j["compute_s"] = r.mean.compute_s;
  j["weight_wait_s"] = r.mean.weight_wait_s;
  j["optimizer_s"] = r.mean.optimizer_s;
  j["grad_wait_s"] = r.mean.grad_wait_s;
  j["nvme_read_bytes"] = r.mean.nvme_read_bytes;
  j["nvme_write_bytes"] = r.mean.nvme_write_bytes;
  j["pcie_bytes"] = r.mean.pcie_bytes;
  if (r.mean.acquires > 0) {
    j["acquires"] = r.mean.acquires;
    j["late_arrivals"] = r.mean.late_arrivals;
    j["fetches_in_time"] = arrived_in_time(r.mean.acquires, r.mean.late_arrivals);
  }
  j["disk_read_gbps"] = r.disk ? nlohmann::ordered_json(r.disk->read_gbps) : nlohmann::ordered_json(nullptr);
  j["disk_write_gbps"] = r.disk ? nlohmann::ordered_json(r.disk->write_gbps) : nlohmann::ordered_json(nullptr);
  j["nvme_s"] = b.nvme_s;
  j["bound_s"] = b.bound_s;
  j["efficiency"] = b.efficiency;
  j["bottleneck"] = b.nvme_bound ? "nvme" : "compute";
  if (r.final_update) j["final_update_s"] = r.final_update->step_s;
  return j.dump();
}

TrainBench::TrainBench(model::TrainOffload& offload, std::optional<DiskBandwidth> disk)
    : offload_(offload), disk_(std::move(disk)), trace_(offload.trace()) {
  if (trace_ == nullptr) {
    own_trace_ = std::make_unique<TraceRecorder>();
    trace_ = own_trace_.get();
  }
}

TrainBench::Counters TrainBench::read(const model::Trainer& trainer) const {
  Counters c;
  if (const TierManager* tiers = offload_.tiers()) {
    const TierStats s = tiers->stats();
    c.weight_wait_s = s.compute_wait_seconds;
    c.nvme_read_bytes += s.nvme_read_bytes;
    c.nvme_write_bytes += s.nvme_write_bytes;
    c.pcie_bytes += s.h2d_bytes;
    c.acquires = s.acquires();
    c.late_arrivals = s.late_arrivals;
  }
  const OptimizerPipelineStats o = trainer.state_stats();
  c.optimizer_s = o.visit_seconds + o.read_wait_seconds + o.write_wait_seconds;
  c.nvme_read_bytes += o.read_bytes;
  c.nvme_write_bytes += o.write_bytes;
  if (const GradientOffloader* grads = trainer.gradients()) {
    const GradientOffloaderStats g = grads->stats();
    c.grad_wait_s = g.nvme_read_wait_seconds + g.nvme_write_wait_seconds;
    c.nvme_read_bytes += g.nvme_read_bytes;
    c.nvme_write_bytes += g.nvme_write_bytes;
    c.pcie_bytes += g.d2h_bytes;
  }
  return c;
}

BenchStep TrainBench::delta(const Counters& a, const Counters& b, double begin_us, double end_us) const {
  return BenchStep{.step_s = (end_us - begin_us) / 1e6,
                   .weight_wait_s = b.weight_wait_s - a.weight_wait_s,
                   .optimizer_s = b.optimizer_s - a.optimizer_s,
                   .grad_wait_s = b.grad_wait_s - a.grad_wait_s,
                   .nvme_read_bytes = b.nvme_read_bytes - a.nvme_read_bytes,
                   .nvme_write_bytes = b.nvme_write_bytes - a.nvme_write_bytes,
                   .pcie_bytes = b.pcie_bytes - a.pcie_bytes,
                   .acquires = b.acquires - a.acquires,
                   .late_arrivals = b.late_arrivals - a.late_arrivals,
                   .begin_us = begin_us,
                   .end_us = end_us};
}

void TrainBench::begin_step(const model::Trainer& trainer) {
  before_ = read(trainer);
  begin_us_ = trace_->now_us();
}

void TrainBench::end_step(const model::Trainer& trainer, uint64_t step) {
  const double end_us = trace_->now_us();
  BenchStep s = delta(before_, read(trainer), begin_us_, end_us);
  s.step = step;
  steps_.push_back(s);
}

void TrainBench::begin_final_update(const model::Trainer& trainer) { begin_step(trainer); }

void TrainBench::end_final_update(const model::Trainer& trainer) {
  final_update_ = delta(before_, read(trainer), begin_us_, trace_->now_us());
}

StatusOr<BenchReport> TrainBench::report(model::Trainer& trainer) {
  BenchReport r;
  r.disk = disk_;
  if (!final_update_) {
    begin_final_update(trainer);
    STRATA_RETURN_IF_ERROR(trainer.finish_update());
    end_final_update(trainer);
  }
  // Without a pending update finish_update returns at once: nothing to report.
  const BenchStep& f = *final_update_;
  if (f.optimizer_s > 0 || f.nvme_read_bytes > 0 || f.nvme_write_bytes > 0) r.final_update = f;
  const std::vector<std::pair<double, double>> spans = trace_->spans_on("compute");
  for (BenchStep& s : steps_) s.compute_s = busy_seconds(spans, s.begin_us, s.end_us);
  if (steps_.empty()) return r;
  r.warmup = steps_.front();
  r.steps.assign(steps_.begin() + 1, steps_.end());
  r.mean = r.steps.empty() ? *r.warmup : mean_of(r.steps);
  return r;
}

Status TrainBench::finish(model::Trainer& trainer, const std::string& metrics_path) {
  STRATA_ASSIGN_OR_RETURN(BenchReport r, report(trainer));
  fmt::print("{}", bench_table(r));
  std::fflush(stdout);
  if (!metrics_path.empty()) STRATA_RETURN_IF_ERROR(model::append_line(metrics_path, bench_json_line(r)));
  return Status::ok();
}

StatusOr<std::unique_ptr<model::StepObserver>> make_train_bench(const Config& config, model::TrainOffload& offload) {
  STRATA_ASSIGN_OR_RETURN(std::optional<DiskBandwidth> disk, measure_run_disk(config, offload));
  return std::unique_ptr<model::StepObserver>(std::make_unique<TrainBench>(offload, std::move(disk)));
}

}  // namespace strata::cli
