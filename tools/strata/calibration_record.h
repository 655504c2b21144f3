// Recording measured rates into the calibration cache (model/plan/calibration.h): the `strata bench`
// commands' results as the rates the planner uses (--calibration FILE, --no-record), and `strata
// plan --calibrate`, a measurement of a few seconds (a small io bench on each --nvme-path, a small
// Adam bench, and the copies and GEMMs of the run's backend: PCIe and the GPU's GEMMs, or memcpy
// and the CPU's). A bench's result stands whether or not its record is written: problems with the
// file are warnings.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/adam_bench.h"
#include "bench/device_bench.h"
#include "bench/io_bench.h"
#include "bench/pcie_bench.h"
#include "model/plan/calibration.h"
#include "model/train/train_options.h"
#include "runtime/config.h"

namespace strata::cli {

// The rates in a bench's report, stamped now and `by` the command that measured them. io: the best
// read and write over the points (on the first path, with its disk and filesystem); adam: per
// moment format, the fp32-gradient case with the most tensors (the trainer's Adam reads fp32
// gradient sums); pcie: H2D and D2H of the largest pinned transfer near the device; device: each
// precision's GEMM TFLOP/s at the model's forward shapes (the square shape's when those did not run).
std::vector<model::CalibrationRate> io_rates(const bench::IoBenchReport& report, const bench::IoBenchOptions& options,
                                             const std::string& by);
std::vector<model::CalibrationRate> adam_rates(const bench::AdamBenchReport& report, const std::string& by);
std::vector<model::CalibrationRate> pcie_rates(const bench::PcieBenchReport& report, const std::string& by);
std::vector<model::CalibrationRate> device_rates(const bench::DeviceBenchReport& report, const std::string& by);

// "nvme_read 3.85 GB/s on /data (nvme0n1, xfs)", "adam 226M parameters/s (fp32 moments, 2 threads)".
std::string rate_summary(const model::CalibrationRate& rate);

// Adds `rates` to this machine's entry of the file at `path` and logs what was recorded. A file of
// another version is replaced; a corrupt one is moved aside to PATH.corrupt first; the rates of
// other machines in it are kept. Failures are logged as warnings.
void record_calibration(const std::string& path, const std::vector<model::CalibrationRate>& rates);

// The bench commands' --calibration FILE (env STRATA_CALIBRATION; "none": do not record) and
// --no-record.
struct RecordFlags {
  std::string calibration;
  bool no_record = false;
  std::string path() const;  // the file to record into; "" for none
};
void add_record_flags(CLI::App& app, RecordFlags& flags);

// `strata plan --calibrate`: measures this machine for a run of `o` and records into `path`.
// Errors: a bench's (an --nvme-path that cannot hold the test file, ...).
Status calibrate(const Config& config, const model::TrainOptions& o, const std::string& path);

}  // namespace strata::cli
