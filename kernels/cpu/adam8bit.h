// AdamW / Adam with 8-bit optimizer states (`adamw8bit`): fp32 master weights are kept, m and v
// are stored as one byte each per element with one fp32 scale per block of kAdam8bitBlock values.
// One fused pass per block: dequantize m and v, run the exact fp32 update of adam.h (the weights
// are updated from the fresh fp32 m and v), write the weights and the bf16/fp16 copy, requantize
// (with no square root or division: the update's sqrt(v) is reused, codes come from an estimate
// corrected by one exact comparison, see adam8bit_kernel.h).
// Not a multi-threaded driver (see offload/cpu_adam.h), and not a format for checkpoints to
// exchange with other programs.
//
// Codes (one per element, block-wise dynamic scale = the block's absmax, recomputed every step):
//   m: int8 q in [-127, 127],  m = s_m * q*|q| / 127^2        (signed square law: fine near 0)
//   v: uint8 u in [0, 255],    v = s_v * (u^2)^2 / 255^4      (sqrt(v) is square-law in u)
//   quantize: q = sign(m) * round(127 * sqrt(|m| / s_m)),  u = round(255 * sqrt(sqrt(v / s_v)))
//   exactly: with z = |m| * (127^2 / s_m) for m and z = sqrt(v) * (255^2 / sqrt(s_v)) for v (each
//   an fp32 product of fp32 values), the code magnitude is the integer q with
//   (q - 0.5)^2 <= z < (q + 0.5)^2 (thresholds exact in fp32), i.e. round to nearest, ties up.
// Error bound (from rounding x = sqrt(|m|/s_m) to a multiple of 1/127, i.e. |dx| <= 1/254; the fp32
// arithmetic adds a few ulps): |m - m_q| <= s_m * (2x/254 + 1/254^2) <= 0.0079 * s_m, and
// relative to m itself about 1/|q| (0.8% at |q| = 127, coarser for small codes). For v, with
// y = (v/s_v)^(1/4) rounded to a multiple of 1/255: |sqrt(v) - sqrt(v_q)| <= sqrt(s_v) *
// (2y/510 + 1/510^2) <= 0.0040 * sqrt(s_v). Values below s_m/64516 (m) or s_v/510^4 (v, i.e.
// sqrt(v) below 3.8e-6 sqrt(s_v)) flush to zero, and so does an m block whose absmax is below
// 2^-100 (~8e-31: 127^2 / s_m would overflow; such moments move no weight). Rounding is to
// nearest (exact ties are measure-zero and round up), so there is no systematic drift; increments
// smaller than half a code step are lost (as in every 8-bit Adam without stochastic rounding).
// Non-finite values are not representable: check gradients first (grad_all_finite) and skip the
// step.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/adam.h"

namespace strata::kernels {

// Elements per quantization block (one m scale and one v scale each). 256 keeps the scale
// overhead at 8 bytes per 256 elements (0.03 B/param) and the absmax local.
inline constexpr size_t kAdam8bitBlock = 256;

constexpr size_t adam8bit_blocks(size_t n) { return (n + kAdam8bitBlock - 1) / kAdam8bitBlock; }

// The codes' constants (above), shared by every implementation of the pass (the CPU variants,
// kernels/cuda/optimizer.cu): the largest code magnitudes and the dequantization multipliers.
inline constexpr float kMCodeMax = 127.0f;
inline constexpr float kVCodeMax = 255.0f;
inline constexpr float kMDequant = 1.0f / (127.0f * 127.0f);
inline constexpr float kVDequant = 1.0f / (255.0f * 255.0f * 255.0f * 255.0f);
// An m block whose absmax is below this is stored as zero: 127^2 / absmax would overflow fp32
// near 4.7e-35, and such moments move no weight.
inline constexpr float kMinMScale = 0x1p-100f;

// One range of one tensor with 8-bit states: n elements starting on a block boundary of the tensor
// (element 0 of the range is element k * kAdam8bitBlock of the tensor, so the range may be any
// whole number of blocks plus, at the tensor's end, a partial block). m_scale and v_scale have
// adam8bit_blocks(n) entries for the range. All-zero codes and scales are zero moments.
struct Adam8bitSpan {
  float* param = nullptr;
  int8_t* m_code = nullptr;
  uint8_t* v_code = nullptr;
  float* m_scale = nullptr;
  float* v_scale = nullptr;
  const void* grad = nullptr;
  void* copy_out = nullptr;
  size_t n = 0;
};

// One fused pass (see the top of this file). Runs runnable_simd_level(level) and returns it; every
// level produces the same bits. Thread-safety: concurrent calls on disjoint spans are fine.
SimdLevel adam8bit_update(const AdamConstants& c, const AdamFormats& formats, const Adam8bitSpan& span,
                          SimdLevel level);

// Quantizes fp32 moments m and v (n elements, on a block boundary) into the codes and scales of
// `span` (its param, grad and copy_out are not used). For initializing from fp32 states and tests.
void adam8bit_quantize(const float* m, const float* v, size_t n, const Adam8bitSpan& span);
// The inverse: writes the fp32 moments the codes of `span` stand for.
void adam8bit_dequantize(const Adam8bitSpan& span, float* m, float* v);

}  // namespace strata::kernels
