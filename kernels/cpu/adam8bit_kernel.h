// The 8-bit-state Adam block loop, written once against simd_ops.h and instantiated by
// adam8bit_scalar.cc, adam8bit_avx2.cc and adam8bit_avx512.cc. Per block of kAdam8bitBlock
// elements: pass 1 dequantizes m and v, runs adam_element (adam_kernel.h), writes the weights and
// the copy, keeps the new fp32 m and sqrt(v) (the root the update already took) in block-local
// buffers (in L1) and the absmax of m and v; pass 2 requantizes the buffers without a square root
// or a division (nearest_root). Internal to kernels/cpu; the API is adam8bit.h.
#pragma once

#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/adam_kernel.h"

namespace strata::kernels {
namespace {

constexpr float kMCodeMax = 127.0f;
constexpr float kVCodeMax = 255.0f;
constexpr float kMDequant = 1.0f / (127.0f * 127.0f);
constexpr float kVDequant = 1.0f / (255.0f * 255.0f * 255.0f * 255.0f);
// An m block whose absmax is below this is stored as zero: 127^2 / absmax would overflow fp32
// near 4.7e-35, and such moments move no weight (adam8bit.h).
constexpr float kMinMScale = 0x1p-100f;

// Per-block scalars, the same in every variant: dequantization multipliers.
inline float dequant_m_factor(float scale) { return scale * kMDequant; }
inline float dequant_v_factor(float scale) { return scale * kVDequant; }

template <class V>
typename V::F dequant_m(const int8_t* code, typename V::F factor) {
  const typename V::F q = V::load_i8(code);
  return V::mul(V::mul(q, V::abs(q)), factor);
}

template <class V>
typename V::F dequant_v(const uint8_t* code, typename V::F factor) {
  const typename V::F u = V::load_u8(code);
  const typename V::F u2 = V::mul(u, u);
  return V::mul(V::mul(u2, u2), factor);
}

// For 0 <= z < 255.5^2: the integer q with (q - 0.5)^2 <= z < (q + 0.5)^2, i.e. sqrt(z) rounded to
// nearest, ties up, decided by exact comparisons (the thresholds are exact in fp32). The estimate
// y is within 0.13 of sqrt(z) (rsqrt_estimate: 2^-11 relative), so floor(y) is q or q - 1, and one
// comparison settles which: the same q in every variant although the estimates differ. z below
// 2^-20 (q = 0) is estimated as z * 2^10 so that z = 0 needs no 0 * Inf.
template <class V>
typename V::F nearest_root(typename V::F z) {
  const typename V::F y = V::mul(z, V::rsqrt_estimate(V::max(z, V::set1(0x1p-20f))));
  const typename V::F low = V::floor(y);
  const typename V::F half_up = V::add(low, V::set1(0.5f));
  return V::add_one_where_ge(low, z, V::mul(half_up, half_up));
}

// m: z = |m| * (127^2 / s_m) <= 127^2 (1 + 2^-23), so q <= 127; the sign is m's.
template <class V>
void quant_m(int8_t* code, typename V::F m, typename V::F to_code) {
  const typename V::F q = nearest_root<V>(V::mul(V::abs(m), to_code));
  V::store_code8(reinterpret_cast<uint8_t*>(code), V::add(V::copysign(q, m), V::set1(kRoundMagic)));
}

// v, from its root r = sqrt(v): z = r * (255^2 / sqrt(s_v)) <= 255^2 (1 + 2^-23), so u <= 255.
template <class V>
void quant_v(uint8_t* code, typename V::F sqrt_v, typename V::F to_code) {
  V::store_code8(code, V::add(nearest_root<V>(V::mul(sqrt_v, to_code)), V::set1(kRoundMagic)));
}

// Requantizes block-local fp32 m and sqrt(v) (n elements) into codes; writes the block's two
// scales. m_absmax = max |m|, v_absmax = max v. Vectors of V for the whole part, ScalarOps for
// the tail.
template <class V>
void requantize_block(const float* m, const float* sqrt_v, size_t n, float m_absmax, float v_absmax,
                      int8_t* m_code, uint8_t* v_code, float* m_scale, float* v_scale) {
  const float m_s = m_absmax >= kMinMScale ? m_absmax : 0.0f;
  const float v_root = std::sqrt(v_absmax);  // = max sqrt(v): sqrt is monotonic and exactly rounded
  *m_scale = m_s;
  *v_scale = v_absmax;
  const float m_to = m_s > 0.0f ? kMCodeMax * kMCodeMax / m_s : 0.0f;
  const float v_to = v_root > 0.0f ? kVCodeMax * kVCodeMax / v_root : 0.0f;
  const size_t whole = n - n % V::kLanes;
  for (size_t i = 0; i < whole; i += V::kLanes) {
    quant_m<V>(m_code + i, V::load(m + i), V::set1(m_to));
    quant_v<V>(v_code + i, V::load(sqrt_v + i), V::set1(v_to));
  }
  for (size_t i = whole; i < n; ++i) {
    quant_m<ScalarOps>(m_code + i, m[i], m_to);
    quant_v<ScalarOps>(v_code + i, sqrt_v[i], v_to);
  }
}

// Pass 1 over elements [begin, end) of one block (a multiple of W::kLanes long) with ops W.
template <class W, FloatFormat G, CopyOut O, bool kDecoupled>
void adam8bit_block_part(const AdamConstants& c, const Adam8bitSpan& s, size_t base, size_t begin,
                         size_t end, float m_factor, float v_factor, float* m_new, float* sqrt_v_new,
                         typename W::F& m_absmax, typename W::F& v_absmax) {
  const AdamVecConstants<W> k(c);
  const typename W::F mf = W::set1(m_factor), vf = W::set1(v_factor);
  for (size_t j = begin; j < end; j += W::kLanes) {
    const size_t i = base + j;
    typename W::F m = dequant_m<W>(s.m_code + i, mf);
    typename W::F v = dequant_v<W>(s.v_code + i, vf);
    const typename W::F p = adam_element<W, kDecoupled>(k, W::load(s.param + i), load_grad<W, G>(s.grad, i), m, v);
    W::store(s.param + i, p);
    store_copy<W, O>(s.copy_out, i, p);
    W::store(m_new + j, m);
    W::store(sqrt_v_new + j, W::sqrt(v));  // the compiler reuses adam_element's root
    m_absmax = W::max(m_absmax, W::abs(m));
    v_absmax = W::max(v_absmax, v);
  }
}

template <class V, FloatFormat G, CopyOut O, bool kDecoupled>
void adam8bit_span(const AdamConstants& c, const Adam8bitSpan& s) {
  alignas(64) float m_new[kAdam8bitBlock];
  alignas(64) float sqrt_v_new[kAdam8bitBlock];
  for (size_t b = 0; b * kAdam8bitBlock < s.n; ++b) {
    const size_t base = b * kAdam8bitBlock;
    const size_t len = s.n - base < kAdam8bitBlock ? s.n - base : kAdam8bitBlock;
    const size_t whole = len - len % V::kLanes;
    const float m_factor = dequant_m_factor(s.m_scale[b]), v_factor = dequant_v_factor(s.v_scale[b]);
    typename V::F m_max = V::set1(0.0f), v_max = V::set1(0.0f);
    float m_max_tail = 0.0f, v_max_tail = 0.0f;
    adam8bit_block_part<V, G, O, kDecoupled>(c, s, base, 0, whole, m_factor, v_factor, m_new, sqrt_v_new, m_max, v_max);
    adam8bit_block_part<ScalarOps, G, O, kDecoupled>(c, s, base, whole, len, m_factor, v_factor, m_new, sqrt_v_new,
                                                     m_max_tail, v_max_tail);
    const float m_absmax = ScalarOps::max(V::reduce_max(m_max), m_max_tail);
    const float v_absmax = ScalarOps::max(V::reduce_max(v_max), v_max_tail);
    requantize_block<V>(m_new, sqrt_v_new, len, m_absmax, v_absmax, s.m_code + base, s.v_code + base,
                        s.m_scale + b, s.v_scale + b);
  }
}

template <class V, FloatFormat G, CopyOut O, bool kDecoupled>
struct Adam8bitKernel {
  static void run(const AdamConstants& c, const Adam8bitSpan& s) { adam8bit_span<V, G, O, kDecoupled>(c, s); }
};

template <class V>
void adam8bit_dispatch(const AdamConstants& c, const AdamFormats& f, const Adam8bitSpan& s) {
  run_instantiation<Adam8bitKernel, V>(f, c.decoupled, c, s);
}

}  // namespace
}  // namespace strata::kernels
