// fp16 gradient accumulation with F16C (grad_accumulate.h); compiled with -mavx2 -mfma -mf16c and
// called only after cpuid says so. vcvtph2ps widens exactly as half.h's fp16_to_float (subnormals
// kept, NaN quieted with its payload), so this path gives the scalar path's bits; the test checks
// all 65536 fp16 values.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/half.h"

namespace strata::kernels::detail {

void accumulate_f16_avx2(const uint16_t* src, float* acc, size_t n, bool first) {
  size_t i = 0;
  if (first) {
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
      _mm256_storeu_ps(acc + i, v);
    }
    for (; i < n; ++i) acc[i] = fp16_to_float(src[i]);
    return;
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), v));
  }
  for (; i < n; ++i) acc[i] = acc[i] + fp16_to_float(src[i]);
}

}  // namespace strata::kernels::detail
