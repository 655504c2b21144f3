// The ceiling loop (stream_ceiling.h), written once against simd_ops.h with the same loads and
// stores as the Adam kernels (adam_kernel.h, adam8bit_kernel.h) and only adds between them.
// Internal to kernels/cpu; instantiated by stream_ceiling_{scalar,avx2,avx512}.cc.
#pragma once

#include "kernels/cpu/adam_kernel.h"
#include "kernels/cpu/stream_ceiling.h"

namespace strata::kernels {
namespace {

template <class V, FloatFormat G, CopyOut O, bool kEightBit>
void ceiling_range(const CeilingSpan& s, size_t begin, size_t end) {
  const typename V::F one = V::set1(1.0f);
  for (size_t i = begin; i < end; i += V::kLanes) {
    const typename V::F g = load_grad<V, G>(s.grad, i);
    const typename V::F p = V::add(V::load(s.param + i), g);
    V::store(s.param + i, p);
    store_copy<V, O>(s.copy_out, i, p);
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

template <class V, FloatFormat G, CopyOut O, bool kEightBit>
struct CeilingKernel {
  static void run(const CeilingSpan& s) {
    const size_t whole = s.n - s.n % V::kLanes;
    ceiling_range<V, G, O, kEightBit>(s, 0, whole);
    ceiling_range<ScalarOps, G, O, kEightBit>(s, whole, s.n);
  }
};

template <class V>
void ceiling_dispatch(const AdamFormats& f, bool eight_bit_states, const CeilingSpan& s) {
  run_instantiation<CeilingKernel, V>(f, eight_bit_states, s);
}

}  // namespace
}  // namespace strata::kernels
