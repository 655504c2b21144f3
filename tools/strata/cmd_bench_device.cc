// `strata bench device [--device cpu|cuda|auto] [--gpu-index N] [--preset NAME] [--micro-batch B]
// [--seq T] [--precision fp32,tf32,bf16,fp16] [--square N] [--copy-size SIZE] [--repeat N]
// [--min-time S] [--peak-tflops X] [--quick] [--json FILE] [--csv FILE] [--calibration FILE]
// [--no-record]`: GEMM TFLOP/s at a model's forward shapes and a square shape beside the nominal
// peak, and device-to-device copy GB/s; each precision's TFLOP/s is recorded in the calibration
// cache (not a --quick run's). Only flag parsing, progress and output files live here; the
// benchmark is bench/device_bench.h.
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include "bench/bench_util.h"
#include "bench/device_bench.h"
#include "runtime/units.h"
#include "tools/strata/calibration_record.h"
#include "tools/strata/command.h"

namespace strata::cli {
namespace {

struct BenchDeviceFlags {
  std::string device = "auto";
  int gpu_index = 0;
  std::string preset = "gpt2-124m";
  int64_t micro_batch = 0, seq = 0, square = 0;
  std::vector<std::string> precisions = {"fp32", "tf32", "bf16", "fp16"};
  std::string copy_size;
  int repeat = 5;
  double min_time = -1;
  double peak_tflops = 0;
  bool quick = false;
  bool repeat_given = false;
  std::string json, csv;
  RecordFlags record;
};

StatusOr<bench::DeviceBenchOptions> to_options(const BenchDeviceFlags& f) {
  bench::DeviceBenchOptions o;
  STRATA_ASSIGN_OR_RETURN(bench::BackendChoice choice, bench::choose_backend(f.device));
  o.backend = choice.kind;
  if (f.gpu_index < 0) return error(Code::invalid_argument, "--gpu-index {}: must be >= 0", f.gpu_index);
  o.device_index = f.gpu_index;
  o.preset = f.preset;
  if (f.micro_batch < 0 || f.seq < 0)
    return error(Code::invalid_argument, "--micro-batch {} / --seq {}: must be >= 1 (0 = the backend's default)",
                 f.micro_batch, f.seq);
  if (f.square < 0)
    return error(Code::invalid_argument, "--square {}: must be >= 1 (0 = the backend's default)", f.square);
  o.micro_batch = f.micro_batch;
  o.seq = f.seq;
  o.square = f.square;
  o.precisions.clear();
  for (const std::string& p : f.precisions) {
    if (p == "fp32") o.precisions.push_back(PeakPrecision::fp32);
    else if (p == "tf32") o.precisions.push_back(PeakPrecision::tf32);
    else if (p == "bf16") o.precisions.push_back(PeakPrecision::bf16);
    else if (p == "fp16") o.precisions.push_back(PeakPrecision::fp16);
    else return error(Code::invalid_argument, "--precision {}: expected fp32, tf32, bf16 or fp16", p);
  }
  if (!f.copy_size.empty()) {
    STRATA_ASSIGN_OR_RETURN(o.copy_bytes, parse_size(f.copy_size));
  }
  if (f.repeat < 1) return error(Code::invalid_argument, "--repeat {}: must be >= 1", f.repeat);
  o.repeat = f.repeat;
  o.min_seconds_per_run = f.min_time;
  if (f.peak_tflops < 0) return error(Code::invalid_argument, "--peak-tflops {}: must be > 0", f.peak_tflops);
  o.peak_tflops_override = f.peak_tflops;
  if (f.quick) {  // small shapes for a smoke run; explicit flags still win
    if (o.micro_batch == 0) o.micro_batch = 1;
    if (o.seq == 0) o.seq = 32;
    if (o.square == 0) o.square = 256;
    if (o.copy_bytes == 0) o.copy_bytes = 16ull << 20;
    if (!f.repeat_given) o.repeat = 2;
    if (o.min_seconds_per_run < 0) o.min_seconds_per_run = 0;
  }
  return o;
}

}  // namespace

void add_bench_device_command(CLI::App& bench, CommandRegistry& registry) {
  auto flags = std::make_shared<BenchDeviceFlags>();
  CLI::App* app = bench.add_subcommand(
      "device", "The ceilings MFU is measured against: GEMM TFLOP/s (fp32, TF32, bf16, fp16) through the backend's "
                "matmul at a model's forward shapes and a large square shape, beside the GPU's nominal peak, and "
                "device-to-device copy GB/s");
  app->add_option("--device", flags->device, "backend: cpu, cuda or auto (CUDA when a device is visible)")
      ->capture_default_str();
  app->add_option("--gpu-index", flags->gpu_index, "CUDA device ordinal")->capture_default_str();
  app->add_option("--preset", flags->preset, "model whose linear layers give the GEMM shapes")->capture_default_str();
  app->add_option("--micro-batch", flags->micro_batch, "sequences per micro-batch (0 = CUDA 16, CPU 1)")
      ->capture_default_str();
  app->add_option("--seq", flags->seq, "tokens per sequence (0 = CUDA 1024, CPU 128)")->capture_default_str();
  app->add_option("--precision", flags->precisions, "fp32, tf32, bf16, fp16 (comma list; tf32 is skipped on the CPU)")
      ->delimiter(',')->capture_default_str();
  app->add_option("--square", flags->square, "side of the square GEMM (0 = CUDA 8192, CPU 1024)")
      ->capture_default_str();
  app->add_option("--copy-size", flags->copy_size, "device-to-device copy size (default CUDA 1GiB, CPU 64MiB)");
  app->add_option("--repeat", flags->repeat, "timed runs per measurement (median, min and max reported)")
      ->capture_default_str()
      ->each([flags](const std::string&) { flags->repeat_given = true; });
  app->add_option("--min-time", flags->min_time,
                  "seconds a timed run lasts at least, repeating the op (default CUDA 0.05, CPU one op)");
  app->add_option("--peak-tflops", flags->peak_tflops, "nominal peak to compare against, for a GPU not in the table");
  app->add_flag("--quick", flags->quick, "small shapes (1 x 32 tokens, square 256, 16 MiB copy, 2 runs): a smoke run");
  app->add_option("--json", flags->json, "write the results as one JSON document to FILE");
  app->add_option("--csv", flags->csv, "write the GEMM results as CSV to FILE");
  add_record_flags(*app, flags->record);
  registry.add(app, [flags]() {
    StatusOr<bench::DeviceBenchOptions> options = to_options(*flags);
    if (!options.is_ok()) return report_error(options.status().message(), kExitUsage);
    options->progress = [](size_t done, size_t total, const std::string& what) {
      bench::print_progress("bench device", done, total, what);
    };
    StatusOr<bench::DeviceBenchReport> report = bench::run_device_bench(*options);
    if (!report.is_ok()) {
      const Code code = report.status().code();
      return report_error(report.status().message(), code == Code::invalid_argument ? kExitUsage : kExitFailure);
    }
    fmt::print("{}", bench::device_bench_table(*report));
    std::fflush(stdout);
    if (!flags->json.empty())
      if (Status s = bench::write_text_file(flags->json, bench::device_bench_json(*report) + "\n"); !s.is_ok())
        return report_error(s.message());
    if (!flags->csv.empty())
      if (Status s = bench::write_text_file(flags->csv, bench::device_bench_csv(*report)); !s.is_ok())
        return report_error(s.message());
    if (flags->quick)  // a smoke run's shapes are far smaller than training's GEMMs
      spdlog::info("calibration: a --quick run's TFLOP/s are not recorded (its GEMMs are far smaller than training's)");
    else
      record_calibration(flags->record.path(), device_rates(*report, "strata bench device"));
    return kExitOk;
  });
}

}  // namespace strata::cli
