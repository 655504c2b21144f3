// The ceiling loop (stream_ceiling.h), written once against simd_ops.h with the same loads and
// stores as the Adam kernels (adam_kernel.h, adam8bit_kernel.h) and only adds between them. The
// 8-bit pattern moves its code bytes 64 at a time (one cache line per stream) with byte adds, so
// that the ceiling measures memory, not byte<->float conversions (which made the first 8-bit
// ceiling compute-bound on Zen 4). Internal to kernels/cpu; instantiated by
// stream_ceiling_{scalar,avx2,avx512}.cc.
#pragma once

#include <type_traits>

#include "kernels/cpu/adam_kernel.h"
#include "kernels/cpu/stream_ceiling.h"

namespace strata::kernels {
namespace {

// Elements [i, i + V::kLanes) of the weight, gradient and copy streams: p += g, copy = convert(p).
// Returns g.
template <class V, FloatFormat G, CopyOut O>
[[gnu::always_inline]] inline typename V::F ceiling_weights(const CeilingSpan& s, size_t i, bool stream) {
  const typename V::F g = load_grad<V, G>(s.grad, i);
  const typename V::F p = V::add(V::load(s.param + i), g);
  V::store(s.param + i, p);
  store_copy<V, O>(s.copy_out, i, p, stream);
  return g;
}

// Element by element (or vector by vector for fp32 states): m += 1, v += g; 8-bit codes += 1.
template <class V, FloatFormat G, CopyOut O, bool kEightBit>
void ceiling_range(const CeilingSpan& s, size_t begin, size_t end, bool stream) {
  const typename V::F one = V::set1(1.0f);
  for (size_t i = begin; i < end; i += V::kLanes) {
    const typename V::F g = ceiling_weights<V, G, O>(s, i, stream);
    if constexpr (kEightBit) {
      uint8_t* m = static_cast<uint8_t*>(s.m) + i;
      uint8_t* v = static_cast<uint8_t*>(s.v) + i;
      V::store_code8(m, V::add(V::load_u8(m), V::set1(kRoundMagic + 1.0f)));
      V::store_code8(v, V::add(V::load_u8(v), V::set1(kRoundMagic + 1.0f)));
    } else {
      float* m = static_cast<float*>(s.m) + i;
      float* v = static_cast<float*>(s.v) + i;
      V::store(m, V::add(V::load(m), one));
      V::store(v, V::add(V::load(v), g));
    }
  }
}

// 64 code bytes += 1 (mod 256) with the widest byte add the variant has.
template <class V>
[[gnu::always_inline]] inline void bump_codes64(uint8_t* p) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<V, Avx512Ops>) {
    _mm512_storeu_si512(p, _mm512_add_epi8(_mm512_loadu_si512(p), _mm512_set1_epi8(1)));
    return;
  }
#endif
#if defined(__AVX2__)
  if constexpr (std::is_same_v<V, Avx2Ops>) {
    for (int h = 0; h < 64; h += 32) {
      auto* q = reinterpret_cast<__m256i*>(p + h);
      _mm256_storeu_si256(q, _mm256_add_epi8(_mm256_loadu_si256(q), _mm256_set1_epi8(1)));
    }
    return;
  }
#endif
  for (int k = 0; k < 64; ++k) p[k] = static_cast<uint8_t>(p[k] + 1);
}

// The 8-bit pattern over [begin, end), a multiple of 64 elements: per 64, the weight streams vector
// by vector and one 64-byte line of each code stream.
template <class V, FloatFormat G, CopyOut O>
void ceiling_range_codes64(const CeilingSpan& s, size_t begin, size_t end, bool stream) {
  for (size_t i = begin; i < end; i += 64) {
    for (size_t j = i; j < i + 64; j += V::kLanes) ceiling_weights<V, G, O>(s, j, stream);
    bump_codes64<V>(static_cast<uint8_t*>(s.m) + i);
    bump_codes64<V>(static_cast<uint8_t*>(s.v) + i);
  }
}

template <class V, FloatFormat G, CopyOut O, bool kEightBit>
struct CeilingKernel {
  static void run(const CeilingSpan& s) {
    const bool stream = copy_streams<V, O>(s.copy_out);  // as the Adam kernels do
    const size_t step = kEightBit ? 64 : V::kLanes;
    const size_t whole = s.n - s.n % step;
    if constexpr (kEightBit) {
      ceiling_range_codes64<V, G, O>(s, 0, whole, stream);
    } else {
      ceiling_range<V, G, O, false>(s, 0, whole, stream);
    }
    ceiling_range<ScalarOps, G, O, kEightBit>(s, whole, s.n, false);
    finish_copy_stream(stream);
  }
};

template <class V>
void ceiling_dispatch(const AdamFormats& f, bool eight_bit_states, const CeilingSpan& s) {
  run_instantiation<CeilingKernel, V>(f, eight_bit_states, s);
}

}  // namespace
}  // namespace strata::kernels
