// The 8-bit-state Adam block loop, written once against simd_ops.h and instantiated by
// adam8bit_scalar.cc, adam8bit_avx2.cc and adam8bit_avx512.cc. Per block of kAdam8bitBlock
// elements: the update dequantizes m and v, runs adam_element (adam_kernel.h), writes the weights
// and the copy, keeps the new fp32 m and sqrt(v) (the root the update already took) in block-local
// buffers (in L1) and the absmax of m and v; the requantization turns the buffers into codes
// without a square root or a division (nearest_root), in the loop of the next block's update.
// Internal to kernels/cpu; the API is adam8bit.h.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/adam_kernel.h"

namespace strata::kernels {
namespace {

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
// y = 1 / (1 / sqrt(z)) is within 2^-10 relative (two estimates of 2^-11), i.e. within 0.25 of
// sqrt(z), so floor(y) is q or q - 1, and one comparison settles which: the same q in every
// variant although the estimates differ. z = 0 gives 1 / Inf = 0.
template <class V>
typename V::F nearest_root(typename V::F z) {
  const typename V::F y = V::rcp_estimate(V::rsqrt_estimate(z));
  const typename V::F low = V::floor(y);
  const typename V::F half_up = V::add(low, V::set1(0.5f));
  return V::add_one_where_ge(low, z, V::mul(half_up, half_up));
}

// floor(y) + 2^23 for 0 <= y < 2^22, exact: its low mantissa bits hold floor(y). AVX-512 does it in
// one add rounded down (embedded rounding); the others floor, then add.
template <class V>
typename V::F floor_plus_2p23(typename V::F y) {
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<Avx512Ops, V>)
    return _mm512_add_round_ps(y, _mm512_set1_ps(0x1p23f), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
#endif
  return V::add(V::floor(y), V::set1(0x1p23f));
}

// nearest_root(z) + 2^23 (low byte: the unsigned code), one op shorter than adding kRoundMagic after
// nearest_root: low = floor(y) + 2^23, and the threshold (floor(y) + 0.5)^2 comes from
// low - (2^23 - 0.5), both exact (2^23 - 0.5 is an fp32; low + 1 < 2^24 stays exact).
template <class V>
typename V::F nearest_root_plus_2p23(typename V::F z) {
  const typename V::F low = floor_plus_2p23<V>(V::rcp_estimate(V::rsqrt_estimate(z)));
  const typename V::F half_up = V::sub(low, V::set1(0x1p23f - 0.5f));
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
  V::store_code8(code, nearest_root_plus_2p23<V>(V::mul(sqrt_v, to_code)));
}

// A block whose update is done: its new fp32 m and sqrt(v) wait in a block-local buffer for
// requantization into its codes. len == 0: nothing waits.
struct PendingBlock {
  const float* m = nullptr;       // [len]
  const float* sqrt_v = nullptr;  // [len]
  int8_t* m_code = nullptr;       // [len]
  uint8_t* v_code = nullptr;      // [len]
  size_t len = 0;
  float m_to_code = 0.0f;  // 127^2 / s_m (0 for a zero block)
  float v_to_code = 0.0f;  // 255^2 / sqrt(s_v)
};

// Writes the block's scales (m_absmax = max |m|, v_absmax = max v) and returns its requantization.
inline PendingBlock finish_block(const float* m, const float* sqrt_v, size_t len, float m_absmax, float v_absmax,
                                 int8_t* m_code, uint8_t* v_code, float* m_scale, float* v_scale) {
  const float m_s = m_absmax >= kMinMScale ? m_absmax : 0.0f;
  const float v_root = std::sqrt(v_absmax);  // = max sqrt(v): sqrt is monotonic and exactly rounded
  *m_scale = m_s;
  *v_scale = v_absmax;
  return PendingBlock{m, sqrt_v, m_code, v_code, len, m_s > 0.0f ? kMCodeMax * kMCodeMax / m_s : 0.0f,
                      v_root > 0.0f ? kVCodeMax * kVCodeMax / v_root : 0.0f};
}

// Elements [j, j + V::kLanes) of a pending block. always_inline here and in update_lanes: GCC
// otherwise calls them out of line from the pipelined loop, passing vectors through memory.
template <class V>
[[gnu::always_inline]] inline void requantize_lanes(const PendingBlock& b, size_t j, typename V::F m_to_code,
                                                    typename V::F v_to_code) {
  quant_m<V>(b.m_code + j, V::load(b.m + j), m_to_code);
  quant_v<V>(b.v_code + j, V::load(b.sqrt_v + j), v_to_code);
}

// All of a pending block: vectors of V for the whole part, ScalarOps for the tail.
template <class V>
void requantize(const PendingBlock& b) {
  const size_t whole = b.len - b.len % V::kLanes;
  for (size_t j = 0; j < whole; j += V::kLanes)
    requantize_lanes<V>(b, j, V::set1(b.m_to_code), V::set1(b.v_to_code));
  for (size_t j = whole; j < b.len; ++j) requantize_lanes<ScalarOps>(b, j, b.m_to_code, b.v_to_code);
}

// The update of elements [j, j + W::kLanes) of the block at element `base` of the span: dequantize,
// adam_element, write weight and copy, keep m and sqrt(v) in the block buffers, track the absmax.
template <class W, FloatFormat G, CopyOut O, bool kDecoupled>
[[gnu::always_inline]] inline void update_lanes(const AdamVecConstants<W>& k, const Adam8bitSpan& s, size_t base,
                                                size_t j, typename W::F m_factor, typename W::F v_factor,
                                                float* m_new, float* sqrt_v_new, typename W::F& m_absmax,
                                                typename W::F& v_absmax, bool stream) {
  const size_t i = base + j;
  typename W::F m = dequant_m<W>(s.m_code + i, m_factor);
  typename W::F v = dequant_v<W>(s.v_code + i, v_factor);
  const typename W::F p = adam_element<W, kDecoupled>(k, W::load(s.param + i), load_grad<W, G>(s.grad, i), m, v);
  W::store(s.param + i, p);
  store_copy<W, O>(s.copy_out, i, p, stream);
  W::store(m_new + j, m);
  W::store(sqrt_v_new + j, W::sqrt(v));  // the compiler reuses adam_element's root
  m_absmax = W::max(m_absmax, W::abs(m));
  v_absmax = W::max(v_absmax, v);
}

// Software prefetch one block ahead of the update at element i: a 64-byte line of weights and of
// gradients per 16 elements, a line of each code stream per 64. The loop is compute-bound, and the
// hardware prefetchers alone leave it waiting on memory (measured at 2 threads on Zen 4: +10-20%
// params/s with these). Prefetches past the span's end are harmless hints (integer addresses: no
// out-of-range pointer is formed). The copy is not prefetched: it is streamed (adam_kernel.h).
template <FloatFormat G>
[[gnu::always_inline]] inline void prefetch_block_ahead(const Adam8bitSpan& s, size_t i) {
  const size_t ahead = i + kAdam8bitBlock;
  const auto at = [](const void* base, size_t offset) {
    return reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(base) + offset);
  };
  if (ahead % 16 == 0) {
    __builtin_prefetch(at(s.param, 4 * ahead));
    __builtin_prefetch(at(s.grad, float_format_size(G) * ahead));
  }
  if (ahead % 64 == 0) {
    __builtin_prefetch(at(s.m_code, ahead));
    __builtin_prefetch(at(s.v_code, ahead));
  }
}

// Block b's update runs in the same loop as block b-1's requantization (software pipelining), so
// the out-of-order core can overlap the update's divider work (one sqrt, one division per vector)
// with the requantization's other ops (measured: ~2% on Zen 4, which is bound by the count of
// vector ops). Two buffer pairs (2 x 2 x kAdam8bitBlock floats) alternate.
template <class V, FloatFormat G, CopyOut O, bool kDecoupled>
void adam8bit_span(const AdamConstants& c, const Adam8bitSpan& span) {
  const Adam8bitSpan s = span;  // a local copy: the stores below cannot alias it (no reloads per vector)
  alignas(64) float m_new[2][kAdam8bitBlock];
  alignas(64) float sqrt_v_new[2][kAdam8bitBlock];
  const AdamVecConstants<V> k(c);
  const AdamVecConstants<ScalarOps> k_tail(c);
  const bool stream = copy_streams<V, O>(s.copy_out);  // every block starts on a vector boundary of it
  PendingBlock pending;
  for (size_t b = 0; b * kAdam8bitBlock < s.n; ++b) {
    const size_t base = b * kAdam8bitBlock;
    const size_t len = s.n - base < kAdam8bitBlock ? s.n - base : kAdam8bitBlock;
    const size_t whole = len - len % V::kLanes;
    float* m_buf = m_new[b % 2];
    float* sqrt_v_buf = sqrt_v_new[b % 2];
    const float m_factor = dequant_m_factor(s.m_scale[b]), v_factor = dequant_v_factor(s.v_scale[b]);
    const typename V::F mf = V::set1(m_factor), vf = V::set1(v_factor);
    typename V::F m_max = V::set1(0.0f), v_max = V::set1(0.0f);
    if (whole == pending.len) {
      const typename V::F m_to = V::set1(pending.m_to_code), v_to = V::set1(pending.v_to_code);
      for (size_t j = 0; j < whole; j += V::kLanes) {
        prefetch_block_ahead<G>(s, base + j);
        update_lanes<V, G, O, kDecoupled>(k, s, base, j, mf, vf, m_buf, sqrt_v_buf, m_max, v_max, stream);
        requantize_lanes<V>(pending, j, m_to, v_to);
      }
    } else {
      requantize<V>(pending);
      for (size_t j = 0; j < whole; j += V::kLanes) {
        prefetch_block_ahead<G>(s, base + j);
        update_lanes<V, G, O, kDecoupled>(k, s, base, j, mf, vf, m_buf, sqrt_v_buf, m_max, v_max, stream);
      }
    }
    float m_max_tail = 0.0f, v_max_tail = 0.0f;
    for (size_t j = whole; j < len; ++j)
      update_lanes<ScalarOps, G, O, kDecoupled>(k_tail, s, base, j, m_factor, v_factor, m_buf, sqrt_v_buf, m_max_tail,
                                                v_max_tail, false);
    pending = finish_block(m_buf, sqrt_v_buf, len, ScalarOps::max(V::reduce_max(m_max), m_max_tail),
                           ScalarOps::max(V::reduce_max(v_max), v_max_tail), s.m_code + base, s.v_code + base,
                           s.m_scale + b, s.v_scale + b);
  }
  requantize<V>(pending);
  finish_copy_stream(stream);
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
