// `strata bench pcie [--device cpu|cuda|auto] [--gpu-index N] [--sizes 64KiB,...,1GiB]
// [--direction h2d,d2h,both] [--memory pinned,pageable] [--numa near|far|all] [--repeat N]
// [--warmup N] [--no-plain] [--json FILE] [--csv FILE] [--png FILE] [--calibration FILE]
// [--no-record]`: host<->device copy GB/s of the backend's chunk path beside a plain peer and the
// PCIe link's rate; H2D and D2H of the largest pinned size are recorded in the calibration cache.
// Only flag parsing, progress and output files live here; the benchmark is bench/pcie_bench.h.
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "bench/bench_util.h"
#include "bench/pcie_bench.h"
#include "runtime/units.h"
#include "tools/strata/calibration_record.h"
#include "tools/strata/command.h"

namespace strata::cli {
namespace {

struct BenchPcieFlags {
  std::string device = "auto";
  int gpu_index = 0;
  std::vector<std::string> sizes = {"64KiB", "1MiB", "16MiB", "256MiB", "1GiB"};
  std::vector<std::string> directions = {"h2d", "d2h", "both"};
  std::vector<std::string> memory = {"pinned", "pageable"};
  std::string numa = "all";
  int repeat = 5;
  int warmup = 1;
  bool no_plain = false;
  std::string json, csv, png;
  RecordFlags record;
};

StatusOr<bench::PcieBenchOptions> to_options(const BenchPcieFlags& f) {
  bench::PcieBenchOptions o;
  STRATA_ASSIGN_OR_RETURN(bench::BackendChoice choice, bench::choose_backend(f.device));
  o.backend = choice.kind;
  if (f.gpu_index < 0) return error(Code::invalid_argument, "--gpu-index {}: must be >= 0", f.gpu_index);
  o.device_index = f.gpu_index;
  o.sizes.clear();
  for (const std::string& s : f.sizes) {
    STRATA_ASSIGN_OR_RETURN(uint64_t bytes, parse_size(s));
    o.sizes.push_back(bytes);
  }
  o.directions.clear();
  for (const std::string& d : f.directions) {
    if (d == "h2d") o.directions.push_back(CopyDirection::h2d);
    else if (d == "d2h") o.directions.push_back(CopyDirection::d2h);
    else if (d == "both") o.directions.push_back(CopyDirection::both);
    else return error(Code::invalid_argument, "--direction {}: expected h2d, d2h or both", d);
  }
  o.memory.clear();
  for (const std::string& m : f.memory) {
    if (m == "pinned") o.memory.push_back(bench::HostMemory::pinned);
    else if (m == "pageable") o.memory.push_back(bench::HostMemory::pageable);
    else return error(Code::invalid_argument, "--memory {}: expected pinned or pageable", m);
  }
  if (f.numa == "near") o.numa = bench::NumaPlacement::near;
  else if (f.numa == "far") o.numa = bench::NumaPlacement::far;
  else if (f.numa == "all") o.numa = bench::NumaPlacement::all;
  else return error(Code::invalid_argument, "--numa {}: expected near, far or all", f.numa);
  if (f.repeat < 1) return error(Code::invalid_argument, "--repeat {}: must be >= 1", f.repeat);
  if (f.warmup < 0) return error(Code::invalid_argument, "--warmup {}: must be >= 0", f.warmup);
  o.repeat = f.repeat;
  o.warmup = f.warmup;
  o.plain = !f.no_plain;
  return o;
}

}  // namespace

void add_bench_pcie_command(CLI::App& bench, CommandRegistry& registry) {
  auto flags = std::make_shared<BenchPcieFlags>();
  CLI::App* app = bench.add_subcommand(
      "pcie", "Host<->device copy GB/s (H2D, D2H, both at once; pinned and pageable; 64 KiB to 1 GiB) of the "
              "backend's chunk path beside plain cudaMemcpyAsync and the PCIe link's rate, per NUMA placement. "
              "On the CPU backend: its copy threads' memcpy rates, said so");
  app->add_option("--device", flags->device, "backend: cpu, cuda or auto (CUDA when a device is visible)")
      ->capture_default_str();
  app->add_option("--gpu-index", flags->gpu_index, "CUDA device ordinal")->capture_default_str();
  app->add_option("--sizes", flags->sizes, "transfer sizes (comma list; sizes that do not fit in memory are left out)")
      ->delimiter(',')->capture_default_str();
  app->add_option("--direction", flags->directions, "h2d, d2h, both (comma list)")
      ->delimiter(',')->capture_default_str();
  app->add_option("--memory", flags->memory, "host memory: pinned, pageable (comma list)")
      ->delimiter(',')->capture_default_str();
  app->add_option("--numa", flags->numa,
                  "copy thread and host buffers on the GPU's NUMA node (near), another node (far) or both (all; "
                  "near only on a one-node machine)")
      ->capture_default_str();
  app->add_option("--repeat", flags->repeat, "timed runs per point and path (median, min and max reported)")
      ->capture_default_str();
  app->add_option("--warmup", flags->warmup, "untimed runs per point and path first")->capture_default_str();
  app->add_flag("--no-plain", flags->no_plain, "do not time the plain peer (cudaMemcpyAsync / memcpy)");
  app->add_option("--json", flags->json, "write the results as one JSON document to FILE");
  app->add_option("--csv", flags->csv, "write the results as CSV to FILE");
  app->add_option("--png", flags->png,
                  "draw GB/s against transfer size to FILE with gnuplot, when installed (the CSV goes to --csv, or "
                  "FILE.csv)");
  add_record_flags(*app, flags->record);
  registry.add(app, [flags]() {
    StatusOr<bench::PcieBenchOptions> options = to_options(*flags);
    if (!options.is_ok()) return report_error(options.status().message(), kExitUsage);
    options->progress = [](size_t done, size_t total, const std::string& what) {
      bench::print_progress("bench pcie", done, total, what);
    };
    StatusOr<bench::PcieBenchReport> report = bench::run_pcie_bench(*options);
    if (!report.is_ok()) {
      const Code code = report.status().code();
      return report_error(report.status().message(), code == Code::invalid_argument ? kExitUsage : kExitFailure);
    }
    fmt::print("{}", bench::pcie_bench_table(*report));
    std::fflush(stdout);
    if (!flags->json.empty())
      if (Status s = bench::write_text_file(flags->json, bench::pcie_bench_json(*report) + "\n"); !s.is_ok())
        return report_error(s.message());
    const std::string csv = !flags->csv.empty() ? flags->csv : flags->png.empty() ? "" : flags->png + ".csv";
    if (!csv.empty())
      if (Status s = bench::write_text_file(csv, bench::pcie_bench_csv(*report)); !s.is_ok()) return report_error(s.message());
    if (!flags->png.empty()) {
      Status plot = bench::pcie_bench_plot(csv, flags->png);
      if (!plot.is_ok()) fmt::print(stderr, "bench pcie: no plot: {}\n", plot.message());
    }
    record_calibration(flags->record.path(), pcie_rates(*report, "strata bench pcie"));
    return kExitOk;
  });
}

}  // namespace strata::cli
