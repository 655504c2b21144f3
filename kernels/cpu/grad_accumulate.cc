// Gradient accumulation and the deterministic sum of squares (grad_accumulate.h): plain loops
// that gcc vectorizes at baseline x86-64 (bf16 widening is a shift, fp32 a load), plus an F16C
// path for fp16 (grad_accumulate_avx2.cc) since the scalar fp16 widening branches per element.
#include "kernels/cpu/grad_accumulate.h"

#include <algorithm>
#include <cstring>

namespace strata::kernels {
namespace detail {
// grad_accumulate_avx2.cc; call only where simd_level_supported(SimdLevel::avx2).
void accumulate_f16_avx2(const uint16_t* src, float* acc, size_t n, bool first);
}  // namespace detail

namespace {

void accumulate_f32(const float* __restrict src, float* __restrict acc, size_t n, bool first) {
  if (first) {
    std::memcpy(acc, src, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + src[i];
}

void accumulate_bf16(const uint16_t* __restrict src, float* __restrict acc, size_t n, bool first) {
  if (first) {
    for (size_t i = 0; i < n; ++i) acc[i] = bf16_to_float(src[i]);
    return;
  }
  for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + bf16_to_float(src[i]);
}

void accumulate_f16_scalar(const uint16_t* __restrict src, float* __restrict acc, size_t n, bool first) {
  if (first) {
    for (size_t i = 0; i < n; ++i) acc[i] = fp16_to_float(src[i]);
    return;
  }
  for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + fp16_to_float(src[i]);
}

}  // namespace

void accumulate_widened(FloatFormat src_format, const void* src, float* acc, size_t n, bool first,
                        SimdLevel level) {
  if (n == 0) return;
  switch (src_format) {
    case FloatFormat::f32:
      accumulate_f32(static_cast<const float*>(src), acc, n, first);
      return;
    case FloatFormat::bf16:
      accumulate_bf16(static_cast<const uint16_t*>(src), acc, n, first);
      return;
    case FloatFormat::f16:
      if (level != SimdLevel::scalar && simd_level_supported(SimdLevel::avx2)) {
        detail::accumulate_f16_avx2(static_cast<const uint16_t*>(src), acc, n, first);
      } else {
        accumulate_f16_scalar(static_cast<const uint16_t*>(src), acc, n, first);
      }
      return;
  }
}

void accumulate_widened(FloatFormat src_format, const void* src, float* acc, size_t n, bool first) {
  accumulate_widened(src_format, src, acc, n, first, best_simd_level());
}

double sum_squares_block(const float* x, size_t n) {
  // Lane j holds the sum over i = j (mod 8), in increasing i. The inner loop over j is eight
  // independent accumulators, which gcc turns into packed double adds without reassociating.
  double lane[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t j = 0; j < 8; ++j) {
      const double v = static_cast<double>(x[i + j]);
      lane[j] += v * v;
    }
  }
  for (size_t j = 0; i + j < n; ++j) {  // the tail: element i + j belongs to lane j (i is a multiple of 8)
    const double v = static_cast<double>(x[i + j]);
    lane[j] += v * v;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

double sum_squares(const float* x, size_t n, const ParallelFor& parallel_for) {
  return sum_squares(x, n, nullptr, parallel_for);
}

double sum_squares(const float* x, size_t n, double* blocks_out, const ParallelFor& parallel_for) {
  const size_t blocks = (n + kSumSquaresBlock - 1) / kSumSquaresBlock;
  auto block = [&](size_t b) {
    const size_t begin = b * kSumSquaresBlock;
    return sum_squares_block(x + begin, std::min(kSumSquaresBlock, n - begin));
  };
  double total = 0.0;
  if (!parallel_for || blocks <= 1) {
    for (size_t b = 0; b < blocks; ++b) {
      const double v = block(b);
      if (blocks_out != nullptr) blocks_out[b] = v;
      total += v;
    }
    return total;
  }
  // Batches of block results on the stack (no allocation): computed in parallel, combined in
  // block order on this thread.
  constexpr size_t kBatch = 512;  // 2M floats per batch
  double results[kBatch];
  for (size_t b0 = 0; b0 < blocks; b0 += kBatch) {
    const size_t count = std::min(kBatch, blocks - b0);
    parallel_for(count, 4, [&](size_t begin, size_t end) {
      for (size_t k = begin; k < end; ++k) results[k] = block(b0 + k);
    });
    for (size_t k = 0; k < count; ++k) total += results[k];
    if (blocks_out != nullptr) std::copy_n(results, count, blocks_out + b0);
  }
  return total;
}

}  // namespace strata::kernels
