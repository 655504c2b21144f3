// The dense peak TFLOP/s of a GPU for the precision its GEMMs run in: the denominator of MFU.
// A table of NVIDIA datasheet / whitepaper figures (dense, not 2:4 sparsity; tensor cores with fp32
// accumulation, which GeForce cards run at half their fp16-accumulate rate), matched on the
// device name cudaGetDeviceProperties reports. Not a measurement (bench/ times real GEMMs) and not
// a clock-scaled estimate: a GPU not in the table has no peak unless the user gives one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/backend.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

namespace strata {

// The arithmetic of the training GEMMs: fp32 on CUDA cores, tf32 / fp16 / bf16 on tensor cores.
enum class PeakPrecision : uint8_t { fp32, tf32, fp16, bf16 };
std::string_view peak_precision_name(PeakPrecision precision);  // "fp32", "tf32", "fp16", "bf16"

// The precision of a run's GEMMs: f32 -> fp32 (tf32 when `tf32`, BackendOptions::tf32), f16 ->
// fp16, bf16 -> bf16 (`tf32` only affects f32). Another dtype is invalid_argument naming it.
StatusOr<PeakPrecision> peak_precision_for(DType dtype, bool tf32);

struct DevicePeak {
  double tflops = 0;   // dense TFLOP/s
  std::string gpu;     // the table row matched ("H100 SXM"), or "" for an override
  std::string source;  // where the figure is from ("NVIDIA H100 datasheet", "--peak-tflops")
};

// The peak of `device` for `precision`. `peak_tflops_override` > 0 wins over the table for any
// device (the CLI's --peak-tflops); 0 (or anything not > 0) means none. nullopt, with `reason` set
// when given, for: the CPU backend (compute_capability 0); a GPU not in the table (MIG instances
// included: they have a fraction of the GPU); a precision the GPU has no tensor cores for (V100 and
// T4 have no bf16 or tf32). Every reason says to pass --peak-tflops. Thread-safe (a const table).
// Names match by words, ignoring "NVIDIA", "GeForce", "Tesla", "Generation", memory sizes ("80GB")
// and kinds ("HBM3"): "NVIDIA H100 80GB HBM3" is the H100 SXM, "NVIDIA A100-SXM4-80GB" the A100,
// but "NVIDIA A10G", "NVIDIA GeForce RTX 4090 D" and "... Laptop GPU" are not in the table.
std::optional<DevicePeak> device_peak(const DeviceDescription& device, PeakPrecision precision,
                                      double peak_tflops_override = 0, std::string* reason = nullptr);

}  // namespace strata
