// `strata bench device`: the compute ceilings MFU is measured against, in one run -- GEMM TFLOP/s
// through the backend's ComputeOps::matmul_forward (cuBLAS on CUDA, OpenBLAS on the CPU backend)
// at the forward shapes of a model's linear layers (the shapes strata's transformer issues at
// micro-batch x seq tokens) and at one large square shape, in fp32, TF32, bf16 and fp16, beside
// the nominal peak of runtime/device_peak.h; and device-to-device copy GB/s
// (Backend::copy_on_device, bytes read + written). Each GEMM is checked against a float64 dot
// product on sampled outputs before it is timed. Not a training run (strata train) and not a
// host<->device benchmark (bench pcie). Runs one measurement at a time; not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "model/net/model_config.h"
#include "runtime/backend.h"
#include "runtime/device_peak.h"
#include "runtime/status.h"

namespace strata::bench {

struct DeviceBenchOptions {
  BackendKind backend = BackendKind::cpu;
  int device_index = 0;
  std::string preset = "gpt2-124m";
  // 0 = the backend's default: CUDA 16 x 1024 (a gpt2-124m training micro-batch), CPU 1 x 128
  // (seconds, not minutes, on a few cores). seq is capped by nothing here: GEMM shapes only.
  int64_t micro_batch = 0, seq = 0;
  std::vector<PeakPrecision> precisions = {PeakPrecision::fp32, PeakPrecision::tf32, PeakPrecision::bf16,
                                           PeakPrecision::fp16};
  int64_t square = 0;       // the square GEMM's side; 0 = CUDA 8192, CPU 1024; < 0 = none
  uint64_t copy_bytes = 0;  // device-to-device copy size; 0 = CUDA 1 GiB, CPU 64 MiB
  int repeat = 5;           // timed runs per measurement (median, min, max)
  // A timed run repeats the op back to back until it lasts at least this long (one op when it
  // is longer); < 0 = the backend's default (CUDA 0.05 s, CPU 0: one op per run).
  double min_seconds_per_run = -1;
  double peak_tflops_override = 0;  // > 0 replaces the peak table (--peak-tflops)
  std::function<void(size_t done, size_t total, const std::string& what)> progress;
};

// One GEMM shape: out (N, OC) = inp (N, C) @ weight (OC, C)^T [+ bias (OC)], run `count` times in
// one forward pass of the model.
struct GemmShape {
  std::string name;  // "q, k, v, attn proj", "mlp in", "head", "square"
  int64_t N = 0, C = 0, OC = 0;
  bool bias = false;
  int64_t count = 1;
  // Row stride of out in elements (0 = OC): the head writes the logits with the model's padded
  // rows (model::padded_vocab), so the bench times the GEMM the model runs.
  int64_t out_stride = 0;
  int64_t out_row() const { return out_stride > 0 ? out_stride : OC; }
  double flops() const { return 2.0 * static_cast<double>(N) * static_cast<double>(C) * static_cast<double>(OC); }
};

// The forward GEMMs strata's transformer issues for `config` at `tokens` = B x T rows: per layer
// q (C -> C), k and v (C -> NKV x HS each: three GEMMs over row blocks of the fused weight), the
// attention projection (C -> C), the MLP's first (C -> H, LLaMA's gate|up C -> 2H) and second
// (H -> C) weights, and the head (C -> V) once. Identical (N, C, OC, bias) shapes are merged, their
// names joined and counts summed: gpt2-124m has 4 x 12 GEMMs of (N, 768, 768). The head's output
// rows are padded to model::padded_vocab(V), as the model stores its logits.
std::vector<GemmShape> model_gemm_shapes(const model::ModelConfig& config, int64_t tokens);

struct GemmResult {
  GemmShape shape;
  PeakPrecision precision = PeakPrecision::fp32;
  int ops_per_run = 0;
  Spread tflops;
  double max_error = 0;  // worst |out - ref| / sum |inp * weight| over the sampled outputs
};

struct PrecisionSummary {
  PeakPrecision precision = PeakPrecision::fp32;
  bool ran = false;
  std::string skipped;                  // why not, when !ran
  std::optional<double> model_tflops;   // the model's forward GEMMs: sum(flops x count) / sum(time x count)
  std::optional<double> square_tflops;  // the square GEMM's median
  std::optional<DevicePeak> peak;
  std::string no_peak;                  // why there is no nominal peak
};

struct DeviceBenchReport {
  std::string backend, device, model;
  int64_t micro_batch = 0, seq = 0;
  int repeat = 0;
  std::string gemm_path;  // "cuBLAS through ComputeOps::matmul_forward", ...
  std::vector<GemmResult> gemms;
  std::vector<PrecisionSummary> precisions;
  uint64_t copy_bytes = 0;
  int copies_per_run = 0;
  Spread copy_gbps;  // (read + written) bytes per second / 1e9
  std::vector<std::string> notes;
};

// invalid_argument for bad options (unknown preset, micro_batch/seq < 0, repeat < 1, a square side
// beyond 65536, a copy size below 4 KiB); a GEMM whose sampled outputs miss the float64 reference
// by more than its precision allows is `internal`; the backend's errors otherwise.
StatusOr<DeviceBenchReport> run_device_bench(const DeviceBenchOptions& options);

std::string device_bench_table(const DeviceBenchReport& report);
// {"backend", "device", "model", "micro_batch", "seq", "repeat", "gemm_path",
//  "gemms": [{"name", "N", "C", "OC", "count", "precision", "ops_per_run", "tflops", "min_tflops",
//             "max_tflops", "max_error"}],
//  "precisions": [{"precision", "ran", "skipped", "model_tflops", "square_tflops", "peak_tflops",
//                  "peak_source", "fraction_of_peak", "no_peak"}],
//  "copy": {"bytes", "copies_per_run", "gbps", "min_gbps", "max_gbps"}, "notes": [...]}
std::string device_bench_json(const DeviceBenchReport& report);
// precision,name,N,C,OC,count,ops_per_run,tflops,min_tflops,max_tflops,max_error
std::string device_bench_csv(const DeviceBenchReport& report);

}  // namespace strata::bench
