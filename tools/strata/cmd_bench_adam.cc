// `strata bench adam [--params 100M] [--tensors 1,200] [--threads N] [--grad fp32,bf16]
// [--states fp32,8bit] [--simd auto|scalar|avx2|avx512] [--repeat N] [--python PATH] [--json]
// [--calibration FILE] [--no-record]`: CPU AdamW throughput against this machine's Adam-pattern
// memory ceiling and against PyTorch; the fp32-gradient rates are recorded in the calibration cache.
// Only flag parsing and printing live here; the benchmark is bench/adam_bench.h.
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "bench/adam_bench.h"
#include "runtime/units.h"
#include "tools/strata/calibration_record.h"
#include "tools/strata/command.h"

namespace strata::cli {
namespace {

struct BenchAdamFlags {
  std::string params = "100M";
  std::vector<size_t> tensors = {1, 200};
  int threads = 0;
  std::vector<std::string> grads = {"fp32", "bf16"};
  std::vector<std::string> states = {"fp32", "8bit"};
  std::string copy = "bf16";
  std::string simd = "auto";
  int repeat = 5;
  std::string python = "python3";
  bool no_torch = false;
  bool json = false;
  RecordFlags record;
};

// Turns the flag strings into bench options; a usage error names the bad value and the choices.
StatusOr<bench::AdamBenchOptions> to_options(const BenchAdamFlags& f) {
  bench::AdamBenchOptions o;
  STRATA_ASSIGN_OR_RETURN(o.params, parse_count(f.params));
  o.tensor_counts = f.tensors;
  o.threads = f.threads;
  o.repeat = f.repeat;
  o.python = f.python;
  o.torch = !f.no_torch;
  o.grads.clear();
  for (const std::string& g : f.grads) {
    if (g == "fp32") o.grads.push_back(kernels::FloatFormat::f32);
    else if (g == "bf16") o.grads.push_back(kernels::FloatFormat::bf16);
    else if (g == "fp16") o.grads.push_back(kernels::FloatFormat::f16);
    else return error(Code::invalid_argument, "--grad {}: expected fp32, bf16 or fp16", g);
  }
  o.states.clear();
  for (const std::string& s : f.states) {
    if (s == "fp32") o.states.push_back(AdamStates::f32);
    else if (s == "8bit") o.states.push_back(AdamStates::q8);
    else return error(Code::invalid_argument, "--states {}: expected fp32 or 8bit", s);
  }
  if (f.copy == "bf16") o.copy = kernels::CopyOut::bf16;
  else if (f.copy == "fp16") o.copy = kernels::CopyOut::f16;
  else if (f.copy == "none") o.copy = kernels::CopyOut::none;
  else return error(Code::invalid_argument, "--copy {}: expected bf16, fp16 or none", f.copy);
  if (f.simd == "auto") {
    o.simd = kernels::best_simd_level();
  } else if (!kernels::parse_simd_level(f.simd, &o.simd)) {
    return error(Code::invalid_argument, "--simd {} (or STRATA_SIMD): expected auto, scalar, avx2 or avx512", f.simd);
  } else if (!kernels::simd_level_supported(o.simd)) {
    return error(Code::invalid_argument, "--simd {}: this CPU does not support it (best here: {})", f.simd,
                 kernels::simd_level_name(kernels::best_simd_level()));
  }
  return o;
}

}  // namespace

void add_bench_adam_command(CLI::App& bench, CommandRegistry& registry) {
  auto flags = std::make_shared<BenchAdamFlags>();
  CLI::App* app = bench.add_subcommand(
      "adam", "CPU AdamW (fp32 or 8-bit states) in params/s and GB/s against this machine's memory ceiling for "
              "Adam's access pattern, and against PyTorch's CPU Adam/AdamW when python3 can import torch");
  app->add_option("--params", flags->params, "parameters per step, e.g. 100M, 1.5B")->capture_default_str();
  app->add_option("--tensors", flags->tensors, "tensor counts to split them into (comma list)")
      ->delimiter(',')->capture_default_str();
  app->add_option("--threads", flags->threads, "worker threads (0 = every core)")->capture_default_str();
  app->add_option("--grad", flags->grads, "gradient formats: fp32, bf16, fp16 (comma list)")
      ->delimiter(',')->capture_default_str();
  app->add_option("--states", flags->states, "optimizer state formats: fp32, 8bit (comma list)")
      ->delimiter(',')->capture_default_str();
  app->add_option("--copy", flags->copy, "working copy written by the step: bf16, fp16, none")->capture_default_str();
  app->add_option("--simd", flags->simd, "kernel variant: auto, scalar, avx2, avx512")
      ->envname("STRATA_SIMD")->capture_default_str();
  app->add_option("--repeat", flags->repeat, "timed steps per case (the median is reported)")->capture_default_str();
  app->add_option("--python", flags->python, "interpreter for the torch peer")->capture_default_str();
  app->add_flag("--no-torch", flags->no_torch, "do not run the torch peer");
  app->add_flag("--json", flags->json, "print one JSON document (a list of cases) instead of the table");
  add_record_flags(*app, flags->record);
  registry.add(app, [flags]() {
    StatusOr<bench::AdamBenchOptions> options = to_options(*flags);
    if (!options.is_ok()) return report_error(options.status().message(), kExitUsage);
    if (!flags->json) {
      options->progress = [](const std::string& line) {
        fmt::print("{}\n", line);
        std::fflush(stdout);
      };
      fmt::print("bench adam: {} params, checking each kernel against the scalar reference first\n",
                 format_count(static_cast<double>(options->params)));
    }
    StatusOr<bench::AdamBenchReport> report = bench::run_adam_bench(*options);
    if (!report.is_ok()) {
      const Code code = report.status().code();
      return report_error(report.status().message(), code == Code::invalid_argument ? kExitUsage : kExitFailure);
    }
    fmt::print("{}\n", flags->json ? bench::adam_bench_json(*report) : bench::adam_bench_table(*report));
    std::fflush(stdout);
    record_calibration(flags->record.path(), adam_rates(*report, "strata bench adam"));
    return kExitOk;
  });
}

}  // namespace strata::cli
