// The small vector abstraction the CPU optimizer kernels are written once against: ScalarOps (one
// lane, always), Avx2Ops (8 lanes, only where the file is compiled with -mavx2 -mfma -mf16c) and
// Avx512Ops (16 lanes, only with -mavx512f/bw/vl/dq). Every operation is an IEEE-exact op (add,
// mul, div, sqrt, max, floor) or a bit manipulation, and none is fused (no FMA), so one kernel body
// gives the same bits in every variant. The exceptions, rsqrt_estimate and rcp_estimate, differ by
// variant and may only feed a computation that an exact comparison then corrects (adam8bit_kernel.h).
// Not a general SIMD library: just what the kernels need.
// Internal linkage on purpose (unnamed namespace): each variant file gets its own copies, so no
// AVX-compiled function can be merged into baseline code by the linker.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/half.h"

// Bit-identical variants need every a*b+c rounded twice, as written: GCC contracts mul+add into
// FMA by default (-ffp-contract=fast, also for intrinsics) in the files built with -mfma but cannot
// in the baseline scalar file. Turn contraction off for everything after this point, intrinsic
// headers included (so they still inline). Memory-bound kernels lose nothing by it. Clang (the
// fuzz build) has no optimize pragma and contracts within an expression by default: its own pragma.
#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#if defined(__AVX2__) || defined(__AVX512F__)
// GCC 12 warns "__Y may be used uninitialized" inside its own AVX-512 intrinsics (they start from
// _mm512_undefined_*; GCC bug 105593). The pragma covers the intrinsic headers included here.
#if defined(__clang__)
#include <immintrin.h>
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#endif

namespace strata::kernels {
namespace {

// Adding 1.5 * 2^23 to a float in [-2^22, 2^22] rounds it to an integer (ties to even, the IEEE
// default mode) and leaves that integer in the low mantissa bits: its low byte is the int8/uint8
// code. Used to quantize without a float->int conversion instruction.
constexpr float kRoundMagic = 12582912.0f;

struct ScalarOps {
  using F = float;
  static constexpr size_t kLanes = 1;
  static F set1(float x) { return x; }
  static F load(const float* p) { return *p; }
  static void store(float* p, F x) { *p = x; }
  static F load_bf16(const uint16_t* p) { return bf16_to_float(*p); }
  static F load_f16(const uint16_t* p) { return fp16_to_float(*p); }
  static void store_bf16(uint16_t* p, F x) { *p = float_to_bf16(x); }
  static void store_f16(uint16_t* p, F x) { *p = float_to_fp16(x); }
  static F add(F a, F b) { return a + b; }
  static F sub(F a, F b) { return a - b; }
  static F mul(F a, F b) { return a * b; }
  static F div(F a, F b) { return a / b; }
  static F sqrt(F a) { return std::sqrt(a); }
  // 1/sqrt(a) and 1/a within 2^-11 relative (+Inf at 0, 0 at +Inf); NOT the same bits in every
  // variant (see the top).
  static F rsqrt_estimate(F a) { return 1.0f / std::sqrt(a); }
  static F rcp_estimate(F a) { return 1.0f / a; }
  static F floor(F a) { return std::floor(a); }
  // x + 1 where a >= b, else x.
  static F add_one_where_ge(F x, F a, F b) { return a >= b ? x + 1.0f : x; }
  static F abs(F a) { return bits_float(float_bits(a) & 0x7fffffffu); }
  // |mag| with the sign of `sign`.
  static F copysign(F mag, F sign) {
    return bits_float((float_bits(mag) & 0x7fffffffu) | (float_bits(sign) & 0x80000000u));
  }
  static F max(F a, F b) { return a > b ? a : b; }  // as maxps: b when either is NaN
  static float reduce_max(F a) { return a; }
  static F load_i8(const int8_t* p) { return static_cast<float>(*p); }
  static F load_u8(const uint8_t* p) { return static_cast<float>(*p); }
  // `x` holds kRoundMagic + code; stores the code's low byte.
  static void store_code8(uint8_t* p, F x) { *p = static_cast<uint8_t>(float_bits(x) & 0xffu); }
  // True if every lane is finite (not Inf, not NaN).
  static bool all_finite(F a) { return (float_bits(a) & 0x7f800000u) != 0x7f800000u; }
};

#if defined(__AVX2__)
struct Avx2Ops {
  using F = __m256;
  static constexpr size_t kLanes = 8;
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static F load_bf16(const uint16_t* p) {
    __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
  }
  static F load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // Round to nearest even as float_to_bf16: add 0x7fff + lsb, take the high half; NaN -> quiet.
  static void store_bf16(uint16_t* p, F x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    r = _mm256_blendv_epi8(r, qnan, _mm256_castps_si256(nan));
    // r holds 16-bit values in 32-bit lanes: pack (per 128-bit half) and gather the halves.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static void store_f16(uint16_t* p, F x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F sqrt(F a) { return _mm256_sqrt_ps(a); }
  static F rsqrt_estimate(F a) { return _mm256_rsqrt_ps(a); }  // 1.5 * 2^-12 relative
  static F rcp_estimate(F a) { return _mm256_rcp_ps(a); }      // 1.5 * 2^-12 relative
  static F floor(F a) { return _mm256_floor_ps(a); }
  static F add_one_where_ge(F x, F a, F b) {
    return _mm256_add_ps(x, _mm256_and_ps(_mm256_cmp_ps(a, b, _CMP_GE_OQ), _mm256_set1_ps(1.0f)));
  }
  static F abs(F a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
  static F copysign(F mag, F sign) {
    const __m256 s = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
    return _mm256_or_ps(_mm256_andnot_ps(s, mag), _mm256_and_ps(s, sign));
  }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static float reduce_max(F a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  static F load_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static F load_u8(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static void store_code8(uint8_t* p, F x) {
    // Byte 0 of each 32-bit lane to bytes 0..3 of each 128-bit half, then the two halves together.
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i b = _mm256_shuffle_epi8(_mm256_castps_si256(x), pick);
    const __m256i both = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(both));
  }
  static bool all_finite(F a) {
    const __m256i e = _mm256_set1_epi32(0x7f800000);
    const __m256i inf = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(a), e), e);
    return _mm256_testz_si256(inf, inf);
  }
};
#endif

#if defined(__AVX512F__)
struct Avx512Ops {
  using F = __m512;
  static constexpr size_t kLanes = 16;
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static F load_bf16(const uint16_t* p) {
    __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
  }
  static F load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store_bf16(uint16_t* p, F x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
  }
  static void store_f16(uint16_t* p, F x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F sqrt(F a) { return _mm512_sqrt_ps(a); }
  static F rsqrt_estimate(F a) { return _mm512_rsqrt14_ps(a); }  // 2^-14 relative
  static F rcp_estimate(F a) { return _mm512_rcp14_ps(a); }      // 2^-14 relative
  static F floor(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static F add_one_where_ge(F x, F a, F b) {
    return _mm512_mask_add_ps(x, _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ), x, _mm512_set1_ps(1.0f));
  }
  static F abs(F a) { return _mm512_abs_ps(a); }
  static F copysign(F mag, F sign) {
    const __m512i s = _mm512_set1_epi32(static_cast<int>(0x80000000u));
    // ternary logic 0xCA = (s ? sign : mag), bit by bit.
    return _mm512_castsi512_ps(
        _mm512_ternarylogic_epi32(s, _mm512_castps_si512(sign), _mm512_castps_si512(mag), 0xca));
  }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static float reduce_max(F a) {
    __m256 m8 = _mm256_max_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  static F load_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static F load_u8(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static void store_code8(uint8_t* p, F x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(_mm512_castps_si512(x)));
  }
  static bool all_finite(F a) {
    const __m512i e = _mm512_set1_epi32(0x7f800000);
    return _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(a), e), e) == 0;
  }
};
#endif

}  // namespace
}  // namespace strata::kernels
