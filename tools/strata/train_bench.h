// `strata train --bench`: the breakdown of every training step and its lower bound. Before
// training, the sequential read and write bandwidth of the run's --nvme-path directories is
// measured through the run's I/O engine (bench/io_bench.h measure_store_bandwidth); during it, each
// step is the deltas of the run's cumulative counters between Trainer::step calls (weight waits,
// optimizer visits and waits, gradient spill waits, NVMe and PCIe bytes) and the sum of the
// "compute" spans the model records on the trace; after it, a table, the bound and one sentence
// naming the bottleneck. Not a profiler (the trace is) and not the progress line (metrics_log.h).
// Thread-safety: the training thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/train/run.h"
#include "model/train/trainer.h"
#include "offload/trace.h"
#include "runtime/config.h"
#include "model/train/train_offload.h"

namespace strata::cli {

// The disk as the run sees it: sequential O_DIRECT bandwidth of an NvmeStore striped over the
// --nvme-path directories, with the run's io_engine, aio shape and stripe unit.
struct DiskBandwidth {
  double read_gbps = 0;   // 1e9 bytes per second
  double write_gbps = 0;
  uint64_t bytes = 0;     // bytes moved each way by the measurement
  size_t paths = 0;
  std::string engine;
};

// The measurement's size, per path: twice what a step moves (so the drives reach their steady
// rate on at least as much data as a step asks of them), at least 64 MiB (below that the setup of
// a pass shows) and at most 1 GiB (a few seconds on one drive). `moved_per_step` is the run's
// estimate: every byte homed on NVMe read once and written once.
uint64_t disk_measure_bytes_per_path(uint64_t moved_per_step, size_t paths);

// The disk of a run whose TrainOffload holds an NvmeStore (nullopt when nothing is homed on NVMe):
// disk_measure_bytes_per_path of 2 x the store's capacity, capped at half the free space of the
// fullest path. Logs the result. Errors: the engine's, the store's (no_space names the paths).
StatusOr<std::optional<DiskBandwidth>> measure_run_disk(const Config& config, const model::TrainOffload& offload);

// One step's share of the counters (deltas), or of the final update.
struct BenchStep {
  uint64_t step = 0;         // 1-based; 0 for the final update
  double step_s = 0;         // wall time of Trainer::step
  double compute_s = 0;      // sum of the step's "compute" spans
  double weight_wait_s = 0;  // TierStats.compute_wait_seconds
  double optimizer_s = 0;    // OptimizerPipelineStats visit + read wait + write wait
  double grad_wait_s = 0;    // GradientOffloaderStats nvme read + write waits
  uint64_t nvme_read_bytes = 0;   // weights + optimizer state + gradients
  uint64_t nvme_write_bytes = 0;
  uint64_t pcie_bytes = 0;   // H2D weights + D2H gradients
  // Paged weights (TierStats): the acquires, and those whose chunk arrived after the compute needed
  // it (late_arrivals); the rest arrived in time.
  uint64_t acquires = 0;
  uint64_t late_arrivals = 0;
  double begin_us = 0, end_us = 0;  // on the trace recorder's clock
};

// The lower bound of a step: max(compute, NVMe time), NVMe time = read bytes / read bandwidth +
// write bytes / write bandwidth (one drive serves reads and writes one at a time, so they add).
// Without a disk: compute alone.
struct BenchBound {
  double nvme_s = 0;
  double bound_s = 0;
  double efficiency = 0;  // bound / step time
  bool nvme_bound = false;
};
BenchBound bench_bound(const BenchStep& s, const std::optional<DiskBandwidth>& disk);

struct BenchReport {
  std::optional<BenchStep> warmup;  // the run's first step
  std::vector<BenchStep> steps;     // the others
  BenchStep mean;                   // of `steps` (of the warm-up when it ran alone)
  std::optional<BenchStep> final_update;  // Trainer::finish_update after the last step, when it did work
  std::optional<DiskBandwidth> disk;
};

// The table (a line per step, then the mean), the disk and bound lines and the bottleneck
// sentence, for stdout.
std::string bench_table(const BenchReport& report);
// {"bench":true,"steps":..,"step_s":..,"compute_s":..,...,"bound_s":..,"efficiency":..}: the means;
// with paged weights also "acquires", "late_arrivals" (a step's) and "fetches_in_time" (their share).
std::string bench_json_line(const BenchReport& report);

// The --bench observer of a run (model::TrainingRun's RunHooks::make_observer): measure_run_disk,
// then a TrainBench over `offload`.
class TrainBench;
StatusOr<std::unique_ptr<model::StepObserver>> make_train_bench(const Config& config, model::TrainOffload& offload);

class TrainBench : public model::StepObserver {
 public:
  // `offload` outlives this; `disk` from measure_run_disk. Uses the offload's recorder (--trace),
  // else its own.
  TrainBench(model::TrainOffload& offload, std::optional<DiskBandwidth> disk);
  TrainBench(const TrainBench&) = delete;
  TrainBench& operator=(const TrainBench&) = delete;

  // The recorder the model's compute spans must go to (Transformer::set_trace): create this before
  // the model, destroy it after.
  TraceRecorder* trace() override { return trace_; }

  // Bracket every Trainer::step call (nothing else between them).
  void begin_step(const model::Trainer& trainer) override;
  void end_step(const model::Trainer& trainer, uint64_t step) override;
  // Bracket the Trainer::finish_update call after the last step (the last step's update, when the
  // optimizer overlaps the next forward): reported as the final update.
  void begin_final_update(const model::Trainer& trainer) override;
  void end_final_update(const model::Trainer& trainer) override;
  // After the run: applies (and measures as the final update) an update still pending when no
  // finish_update was bracketed, sums each step's compute spans, and returns the report.
  StatusOr<BenchReport> report(model::Trainer& trainer);
  // The run's end (model::StepObserver): report(), its table on stdout, and its JSON line appended
  // to `metrics_path` when there is one.
  Status finish(model::Trainer& trainer, const std::string& metrics_path) override;

 private:
  struct Counters {
    double weight_wait_s = 0, optimizer_s = 0, grad_wait_s = 0;
    uint64_t nvme_read_bytes = 0, nvme_write_bytes = 0, pcie_bytes = 0, acquires = 0, late_arrivals = 0;
  };
  Counters read(const model::Trainer& trainer) const;
  BenchStep delta(const Counters& before, const Counters& after, double begin_us, double end_us) const;

  const model::TrainOffload& offload_;
  std::optional<DiskBandwidth> disk_;
  std::unique_ptr<TraceRecorder> own_trace_;
  TraceRecorder* trace_ = nullptr;
  Counters before_;
  double begin_us_ = 0;
  std::vector<BenchStep> steps_;
  std::optional<BenchStep> final_update_;
};

}  // namespace strata::cli
