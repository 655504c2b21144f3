// The Adam/AdamW element loop, written once against the vector ops of simd_ops.h and instantiated
// by adam_scalar.cc, adam_avx2.cc and adam_avx512.cc (each with its own Ops). A vector variant runs
// whole vectors with its Ops and the tail with ScalarOps: same operations, same bits.
// Internal to kernels/cpu (include only from the variant files); the API is adam.h.
#pragma once

#include <xmmintrin.h>  // _mm_sfence (SSE: baseline x86-64)

#include <cstdint>

#include "kernels/cpu/adam.h"
#include "kernels/cpu/simd_ops.h"

namespace strata::kernels {
namespace {

template <class V, FloatFormat G>
typename V::F load_grad(const void* grad, size_t i) {
  if constexpr (G == FloatFormat::f32) return V::load(static_cast<const float*>(grad) + i);
  if constexpr (G == FloatFormat::bf16) return V::load_bf16(static_cast<const uint16_t*>(grad) + i);
  if constexpr (G == FloatFormat::f16) return V::load_f16(static_cast<const uint16_t*>(grad) + i);
}

// The copy-out is written and never read back by the step, so vector variants write it with
// non-temporal stores where they can: no read-for-ownership of its cache lines (2 of Adam's
// 30 B/param and of the 8-bit kernel's 18 B/param come back) and no cache pollution. They need
// each vector's 16-bit elements on their natural boundary (32 bytes for 16 lanes, 16 for 8), which
// holds for every vector once the range's copy starts on one; otherwise, and for ScalarOps (the
// reference and the tails), plain stores. Same bits either way.
template <class V, CopyOut O>
bool copy_streams(const void* out) {
  return O != CopyOut::none && V::kLanes > 1 && reinterpret_cast<uintptr_t>(out) % (2 * V::kLanes) == 0;
}

template <class V, CopyOut O>
[[gnu::always_inline]] inline void store_copy_plain(uint16_t* dst, typename V::F p) {
  if constexpr (O == CopyOut::bf16) V::store_bf16(dst, p);
  if constexpr (O == CopyOut::f16) V::store_f16(dst, p);
}

// GCC 12 flags the _mm512_undefined_* inside its own intrinsics as "used uninitialized" once they
// are inlined into the local below (GCC bug 105593, as in simd_ops.h).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
template <class V, CopyOut O>
[[gnu::always_inline]] inline void store_copy(void* out, size_t i, typename V::F p, bool stream = false) {
  if constexpr (O != CopyOut::none) {
    auto* dst = static_cast<uint16_t*>(out) + i;
#if defined(__AVX2__)
    if constexpr (V::kLanes > 1) {
      if (stream) {
        // Converted into a local first (the compiler keeps it in a register), then streamed.
        alignas(32) uint16_t h[V::kLanes];
        store_copy_plain<V, O>(h, p);
        if constexpr (V::kLanes == 16) {
          _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), _mm256_load_si256(reinterpret_cast<const __m256i*>(h)));
        } else {
          static_assert(V::kLanes == 8, "a streamed copy is 16 or 8 lanes");
          _mm_stream_si128(reinterpret_cast<__m128i*>(dst), _mm_load_si128(reinterpret_cast<const __m128i*>(h)));
        }
        return;
      }
    }
#endif
    store_copy_plain<V, O>(dst, p);
  }
  (void)stream;
}
#pragma GCC diagnostic pop

// Non-temporal stores are weakly ordered: after a range whose copy streamed, a store fence makes
// them visible before whatever the caller does next (release the range to another thread, start a
// DMA from it).
inline void finish_copy_stream(bool streamed) {
  if (streamed) _mm_sfence();
}

// The per-step constants broadcast once into vectors.
template <class V>
struct AdamVecConstants {
  using F = typename V::F;
  explicit AdamVecConstants(const AdamConstants& c)
      : beta1(V::set1(c.beta1)), one_minus_beta1(V::set1(c.one_minus_beta1)), beta2(V::set1(c.beta2)),
        one_minus_beta2(V::set1(c.one_minus_beta2)), step_size(V::set1(c.step_size)),
        inv_sqrt_bias2(V::set1(c.inv_sqrt_bias2)), eps(V::set1(c.eps)), lr_decay(V::set1(c.lr_decay)),
        l2(V::set1(c.l2)), grad_scale(V::set1(c.grad_scale)) {}
  F beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, inv_sqrt_bias2, eps, lr_decay, l2, grad_scale;
};

// One element-vector of the update (adam.h gives the formula). `m` and `v` are updated in place;
// returns the new parameter value. Shared by the fp32-state and the 8-bit-state kernels.
template <class V, bool kDecoupled>
[[gnu::always_inline]] inline typename V::F adam_element(const AdamVecConstants<V>& k, typename V::F p,
                                                        typename V::F g, typename V::F& m, typename V::F& v) {
  g = V::mul(g, k.grad_scale);
  if constexpr (kDecoupled) {
    p = V::sub(p, V::mul(k.lr_decay, p));
  } else {
    g = V::add(g, V::mul(k.l2, p));
  }
  m = V::add(V::mul(k.beta1, m), V::mul(k.one_minus_beta1, g));
  v = V::add(V::mul(k.beta2, v), V::mul(k.one_minus_beta2, V::mul(g, g)));
  const typename V::F denom = V::add(V::mul(V::sqrt(v), k.inv_sqrt_bias2), k.eps);
  return V::sub(p, V::mul(k.step_size, V::div(m, denom)));
}

// Elements [begin, end) of `s`; end - begin must be a multiple of V::kLanes.
template <class V, FloatFormat G, CopyOut O, bool kDecoupled>
void adam_range(const AdamConstants& c, const AdamSpan& s, size_t begin, size_t end, bool stream) {
  const AdamVecConstants<V> k(c);
  for (size_t i = begin; i < end; i += V::kLanes) {
    typename V::F m = V::load(s.m + i);
    typename V::F v = V::load(s.v + i);
    const typename V::F p = adam_element<V, kDecoupled>(k, V::load(s.param + i), load_grad<V, G>(s.grad, i), m, v);
    V::store(s.m + i, m);
    V::store(s.v + i, v);
    V::store(s.param + i, p);
    store_copy<V, O>(s.copy_out, i, p, stream);
  }
}

template <class V, FloatFormat G, CopyOut O, bool kDecoupled>
void adam_span(const AdamConstants& c, const AdamSpan& s) {
  const size_t whole = s.n - s.n % V::kLanes;
  const bool stream = copy_streams<V, O>(s.copy_out);
  adam_range<V, G, O, kDecoupled>(c, s, 0, whole, stream);
  adam_range<ScalarOps, G, O, kDecoupled>(c, s, whole, s.n, false);
  finish_copy_stream(stream);
}

template <class V, FloatFormat G, CopyOut O, bool kDecoupled>
struct AdamKernel {
  static void run(const AdamConstants& c, const AdamSpan& s) { adam_span<V, G, O, kDecoupled>(c, s); }
};

// Turns run-time choices into one of the 18 instantiations of Kernel<V, G, O, flag>::run(args...):
// the gradient format, the copy-out format and the kernel's bool (for the Adam kernels: decoupled
// weight decay; for the ceiling kernel: 8-bit states).
template <template <class, FloatFormat, CopyOut, bool> class Kernel, class V, FloatFormat G, CopyOut O,
          class... Args>
void run_with_flag(bool flag, const Args&... args) {
  if (flag) {
    Kernel<V, G, O, true>::run(args...);
  } else {
    Kernel<V, G, O, false>::run(args...);
  }
}

template <template <class, FloatFormat, CopyOut, bool> class Kernel, class V, FloatFormat G, class... Args>
void run_with_copy(CopyOut copy, bool flag, const Args&... args) {
  switch (copy) {
    case CopyOut::none: return run_with_flag<Kernel, V, G, CopyOut::none>(flag, args...);
    case CopyOut::bf16: return run_with_flag<Kernel, V, G, CopyOut::bf16>(flag, args...);
    case CopyOut::f16: return run_with_flag<Kernel, V, G, CopyOut::f16>(flag, args...);
  }
}

template <template <class, FloatFormat, CopyOut, bool> class Kernel, class V, class... Args>
void run_instantiation(const AdamFormats& f, bool flag, const Args&... args) {
  switch (f.grad) {
    case FloatFormat::f32: return run_with_copy<Kernel, V, FloatFormat::f32>(f.copy, flag, args...);
    case FloatFormat::bf16: return run_with_copy<Kernel, V, FloatFormat::bf16>(f.copy, flag, args...);
    case FloatFormat::f16: return run_with_copy<Kernel, V, FloatFormat::f16>(f.copy, flag, args...);
  }
}

template <class V>
void adam_dispatch(const AdamConstants& c, const AdamFormats& f, const AdamSpan& s) {
  run_instantiation<AdamKernel, V>(f, c.decoupled, c, s);
}

template <class V, FloatFormat G>
bool all_finite_span(const void* grad, size_t n) {
  const size_t whole = n - n % V::kLanes;
  for (size_t i = 0; i < whole; i += V::kLanes)
    if (!V::all_finite(load_grad<V, G>(grad, i))) return false;
  for (size_t i = whole; i < n; ++i)
    if (!ScalarOps::all_finite(load_grad<ScalarOps, G>(grad, i))) return false;
  return true;
}

template <class V>
bool all_finite_dispatch(const void* grad, FloatFormat format, size_t n) {
  switch (format) {
    case FloatFormat::f32: return all_finite_span<V, FloatFormat::f32>(grad, n);
    case FloatFormat::bf16: return all_finite_span<V, FloatFormat::bf16>(grad, n);
    case FloatFormat::f16: return all_finite_span<V, FloatFormat::f16>(grad, n);
  }
  return false;
}

}  // namespace
}  // namespace strata::kernels
