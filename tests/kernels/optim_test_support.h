// Shared helpers for the optimizer kernel tests: the SIMD levels to compare against the scalar
// reference (skipping those this CPU lacks), deterministic test data, and buffers for one tensor.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/adam.h"
#include "kernels/cpu/half.h"

namespace strata::kernels::testing {

// The sizes the issue asks for: one element, around a vector (15, 17), a page, and a big odd size.
inline const std::vector<size_t> kOptimSizes = {1, 15, 17, 4096, 1000003};

// Skips the current test when the CPU cannot run `level` (so the vector variant is never faked).
#define STRATA_SKIP_IF_UNSUPPORTED(level)                                                        \
  if (!::strata::kernels::simd_level_supported(level))                                          \
  GTEST_SKIP() << "this CPU has no " << ::strata::kernels::simd_level_name(level) << " support"

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> out(n);
  for (float& x : out) x = d(rng);
  return out;
}

// Gradient bytes in `format` from fp32 values (rounded as the conversions of half.h do).
inline std::vector<uint8_t> encode_floats(const std::vector<float>& x, FloatFormat format) {
  std::vector<uint8_t> out(x.size() * float_format_size(format));
  for (size_t i = 0; i < x.size(); ++i) {
    if (format == FloatFormat::f32) {
      std::memcpy(out.data() + 4 * i, &x[i], 4);
    } else {
      const uint16_t h = format == FloatFormat::bf16 ? float_to_bf16(x[i]) : float_to_fp16(x[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

inline uint32_t bits_of(float x) { return float_bits(x); }

// Bit equality, except that any NaN equals any NaN (payload propagation through arithmetic is not
// part of the contract).
inline bool same_float(float a, float b) { return (a != a && b != b) || bits_of(a) == bits_of(b); }

// Index of the first element where the arrays differ (by same_float), or n.
inline size_t first_float_mismatch(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!same_float(a[i], b[i])) return i;
  return n;
}

inline size_t first_byte_mismatch(const void* a, const void* b, size_t n) {
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  for (size_t i = 0; i < n; ++i)
    if (x[i] != y[i]) return i;
  return n;
}

}  // namespace strata::kernels::testing
