// `strata bench adam`: CPU Adam throughput at memory bandwidth. For each case (state format x
// gradient format x tensor count) it checks the kernel against the scalar reference on a slice,
// warms up, times the median of --repeat steps on a ThreadPool (the state formats of one gradient
// format and tensor count in turn, round by round), and measures in the same run the ceiling of
// this machine with a kernel of Adam's access pattern (kernels/cpu/stream_ceiling.h).
// When python3 can import torch it also times torch.optim.Adam/AdamW (bench/peers/torch_adam.py).
// Not a correctness test suite (tests/kernels, tests/offload are).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/adam.h"
#include "offload/cpu_adam.h"
#include "runtime/status.h"

namespace strata::bench {

struct AdamBenchOptions {
  uint64_t params = 100'000'000;
  std::vector<size_t> tensor_counts = {1, 200};
  int threads = 0;  // 0 = every core
  std::vector<kernels::FloatFormat> grads = {kernels::FloatFormat::f32, kernels::FloatFormat::bf16};
  std::vector<AdamStates> states = {AdamStates::f32, AdamStates::q8};
  kernels::CopyOut copy = kernels::CopyOut::bf16;
  kernels::SimdLevel simd = kernels::SimdLevel::avx512;  // clamped to what the CPU runs
  int repeat = 5;
  bool torch = true;              // run the torch peer when python can import torch
  std::string python = "python3";
  std::function<void(const std::string&)> progress;  // one line per finished measurement
};

// One timed case. Bytes per parameter are what the step must move through memory: fp32 states
// read+write weights, m, v (24 B); 8-bit states weights (8 B) + codes (4 B) + scales (16/256 B);
// plus the gradient read (4 or 2 B) and the copy write (2 B).
struct AdamBenchCase {
  std::string variant;  // e.g. "adamw fp32-states grad=bf16 copy=bf16"
  AdamStates states{};
  kernels::FloatFormat grad{};
  size_t tensors = 0;
  uint64_t params = 0;
  double bytes_per_param = 0;
  double seconds = 0;  // median step time
  double params_per_s = 0;
  double ceiling_params_per_s = 0;  // the Adam-pattern kernel on the same buffers and threads
  // 8-bit cases when fp32 states ran too: the median over the interleaved rounds of fp32's step
  // time over this case's (its params/s over fp32's), and the same for the ceilings.
  std::optional<double> vs_fp32_states, ceiling_vs_fp32_states;
  std::optional<double> torch_params_per_s;  // fastest torch AdamW at this tensor count
  std::string torch_impl;                    // e.g. "AdamW fused (torch 2.5.1)"
};

struct TorchPeerResult {
  std::string optimizer, impl, version;
  size_t tensors = 0;
  double params_per_s = 0;
};

struct AdamBenchReport {
  int threads = 0;
  int repeat = 0;
  std::string simd;
  std::vector<AdamBenchCase> cases;
  std::vector<TorchPeerResult> torch;
  std::string torch_note;  // why torch did not run, or which interpreter ran it
};

StatusOr<AdamBenchReport> run_adam_bench(const AdamBenchOptions& options);

// The final human table (params/s, GB/s, % of ceiling, torch ratio, and for each 8-bit case its
// params/s and ceiling over the fp32-state case's with the same gradient format and tensor count),
// and the --json document: a list of cases (variant, params, params_per_s, ceiling_params_per_s,
// torch_params_per_s, vs_fp32_states, ...).
std::string adam_bench_table(const AdamBenchReport& report);
std::string adam_bench_json(const AdamBenchReport& report);

}  // namespace strata::bench
