// `strata bench io --path DIR[,DIR...] [--size 1GiB] [--block 128KiB,1MiB,8MiB] [--qd 1,8,32]
// [--mode read,write] [--engine auto|io_uring|posix] [--repeat N] [--pages huge|4k] [--no-fio] [--csv FILE]
// [--png FILE] [--json] [--calibration FILE] [--no-record]`: sequential O_DIRECT throughput of
// strata's I/O engine beside fio's on the same file; the best read and write of the first path are
// recorded in the calibration cache (calibration_record.h). Only flag parsing, progress and printing
// live here; the benchmark is bench/io_bench.h.
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "bench/bench_util.h"
#include "bench/io_bench.h"
#include "runtime/units.h"
#include "tools/strata/calibration_record.h"
#include "tools/strata/command.h"

namespace strata::cli {
namespace {

struct BenchIoFlags {
  std::vector<std::string> paths;
  std::string size = "1GiB";
  std::vector<std::string> blocks = {"128KiB", "1MiB", "8MiB"};
  std::vector<uint32_t> qds = {1, 8, 32};
  std::vector<std::string> modes = {"read", "write"};
  std::string engine = "auto";
  int repeat = 1;
  std::string pages = "huge";
  bool no_fio = false;
  std::string csv = "strata-bench-io.csv";
  std::string png = "strata-bench-io.png";
  bool json = false;
  RecordFlags record;
};

StatusOr<bench::IoBenchOptions> to_options(const BenchIoFlags& f) {
  bench::IoBenchOptions o;
  o.paths = f.paths;
  STRATA_ASSIGN_OR_RETURN(o.size, parse_size(f.size));
  o.blocks.clear();
  for (const std::string& b : f.blocks) {
    STRATA_ASSIGN_OR_RETURN(uint64_t bytes, parse_size(b));
    o.blocks.push_back(bytes);
  }
  for (uint32_t q : f.qds)
    if (q < 1 || q > 4096) return error(Code::invalid_argument, "--qd {}: queue depths must be in [1, 4096]", q);
  o.queue_depths = f.qds;
  o.modes.clear();
  for (const std::string& m : f.modes) {
    if (m == "read") o.modes.push_back(IoOp::read);
    else if (m == "write") o.modes.push_back(IoOp::write);
    else return error(Code::invalid_argument, "--mode {}: expected read or write", m);
  }
  STRATA_ASSIGN_OR_RETURN(o.engine, parse_io_engine_kind(f.engine));
  o.repeat = f.repeat;
  if (f.pages != "huge" && f.pages != "4k")
    return error(Code::invalid_argument, "--pages {}: expected huge or 4k", f.pages);
  o.huge_pages = f.pages == "huge";
  o.fio = !f.no_fio;
  return o;
}

}  // namespace

void add_bench_io_command(CLI::App& bench, CommandRegistry& registry) {
  auto flags = std::make_shared<BenchIoFlags>();
  CLI::App* app = bench.add_subcommand(
      "io", "Sequential O_DIRECT read/write GB/s, IOPS and latency of strata's I/O engine over block sizes and "
            "queue depths, beside fio (io_uring) on the same file; with several paths, the striped NVMe store "
            "against one path");
  app->add_option("--path", flags->paths, "directories to test (comma list; the first holds the test file)")
      ->delimiter(',')->required();
  app->add_option("--size", flags->size, "test file size, e.g. 4GiB")->capture_default_str();
  app->add_option("--block", flags->blocks, "block sizes (comma list)")->delimiter(',')->capture_default_str();
  app->add_option("--qd", flags->qds, "queue depths (comma list)")->delimiter(',')->capture_default_str();
  app->add_option("--mode", flags->modes, "read, write (comma list)")->delimiter(',')->capture_default_str();
  app->add_option("--engine", flags->engine, "auto, io_uring or posix")->capture_default_str();
  app->add_option("--repeat", flags->repeat, "runs per point and tool, alternating (the median is kept)")
      ->capture_default_str();
  app->add_option("--pages", flags->pages,
                  "strata's buffers: huge (transparent huge pages, strata's default) or 4k (the same memory "
                  "fio's default buffers get, for a like-for-like comparison)")
      ->capture_default_str();
  app->add_flag("--no-fio", flags->no_fio, "do not run fio");
  app->add_option("--csv", flags->csv, "CSV file for the results (\"\" for none)")->capture_default_str();
  app->add_option("--png", flags->png, "PNG plot of GB/s against block size, when gnuplot is installed (\"\" for none)")
      ->capture_default_str();
  app->add_flag("--json", flags->json, "print one JSON document instead of the table");
  add_record_flags(*app, flags->record);
  registry.add(app, [flags]() {
    StatusOr<bench::IoBenchOptions> options = to_options(*flags);
    if (!options.is_ok()) return report_error(options.status().message(), kExitUsage);
    options->progress = [](size_t done, size_t total, const std::string& what) {
      bench::print_progress("bench io", done, total, what);
    };
    StatusOr<bench::IoBenchReport> report = bench::run_io_bench(*options);
    if (!report.is_ok()) {
      const Code code = report.status().code();
      return report_error(report.status().message(), code == Code::invalid_argument ? kExitUsage : kExitFailure);
    }
    if (!flags->csv.empty()) {
      if (Status written = bench::write_text_file(flags->csv, bench::io_bench_csv(*report)); !written.is_ok()) {
        return report_error(written.message(), kExitFailure);
      }
      if (!flags->png.empty()) {
        Status plot = bench::io_bench_plot(flags->csv, flags->png);
        if (!plot.is_ok()) fmt::print(stderr, "bench io: no plot: {}\n", plot.message());
      }
    }
    fmt::print("{}\n", flags->json ? bench::io_bench_json(*report) : bench::io_bench_table(*report));
    std::fflush(stdout);
    record_calibration(flags->record.path(), io_rates(*report, *options, "strata bench io"));
    return kExitOk;
  });
}

}  // namespace strata::cli
