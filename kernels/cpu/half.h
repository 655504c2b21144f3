// Scalar conversions between fp32 and the two 16-bit float formats, bf16 and IEEE fp16: the
// reference every vectorized conversion in strata is tested against, and the one place these
// roundings are written. Both directions round to nearest, ties to even; NaN stays NaN (quiet).
// Not a half-precision arithmetic type: values are carried as raw uint16_t bits.
// The functions are `static inline` on purpose: this header is included by files compiled with
// AVX flags, and an inline function with external linkage could then be merged into baseline code.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace strata::kernels {

// The element formats a kernel can read or write as floats.
enum class FloatFormat : uint8_t { f32, bf16, f16 };

static inline std::string_view float_format_name(FloatFormat f) {
  switch (f) {
    case FloatFormat::f32: return "fp32";
    case FloatFormat::bf16: return "bf16";
    case FloatFormat::f16: return "fp16";
  }
  return "?";
}

static inline size_t float_format_size(FloatFormat f) { return f == FloatFormat::f32 ? 4 : 2; }

static inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

static inline float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// bf16 is the top half of an fp32. Rounding adds 0x7fff plus the lowest kept bit (ties to even);
// a carry out of the mantissa correctly rounds up to the next binade or to Inf. NaN keeps its sign
// and top payload bits and gets the quiet bit (0x0040), so it can never round into Inf.
static inline uint16_t float_to_bf16(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

static inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Overflow rounds to Inf, values
// below 2^-14 become subnormals (rounded to nearest even), below 2^-25 zero. NaN: sign, the top 10
// payload bits and the quiet bit -- exactly what x86 F16C (vcvtps2ph) produces, so the vector
// variants match this function bit for bit.
static inline uint16_t float_to_fp16(float x) {
  const uint32_t u = float_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x03ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: Inf
  if (a >= 0x38800000u) {  // normal in fp16 (>= 2^-14): rebias exponent, round 13 dropped bits
    uint32_t r = a - 0x38000000u;  // exponent bias 127 -> 15
    r += 0x0fffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (a < 0x33000000u) return sign;  // < 2^-25: rounds to zero (2^-25 itself is a tie to 0)
  // Subnormal: value = mant * 2^-24 with mant in [0, 1024]; shift the full significand.
  const uint32_t exp = a >> 23;
  const uint32_t sig = (a & 0x007fffffu) | 0x00800000u;
  const uint32_t shift = 126u - exp;  // 14 .. 24 for exp in [102, 112]
  const uint32_t kept = sig >> shift;
  const uint32_t rest = sig & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  const uint32_t up = (rest > half || (rest == half && (kept & 1u))) ? 1u : 0u;
  return static_cast<uint16_t>(sign | (kept + up));  // kept + up may carry into the min normal
}

static inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x03ffu;
  if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant ? 0x00400000u | (mant << 13) : 0u));
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in fp32.
  const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return bits_float(sign | float_bits(mag));
}

// One 16-bit element of `format` (bf16 or f16; f32 is not a 16-bit format) and back.
static inline float half_to_float(FloatFormat format, uint16_t h) {
  return format == FloatFormat::bf16 ? bf16_to_float(h) : fp16_to_float(h);
}
static inline uint16_t float_to_half(FloatFormat format, float x) {
  return format == FloatFormat::bf16 ? float_to_bf16(x) : float_to_fp16(x);
}

}  // namespace strata::kernels
