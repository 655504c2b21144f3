// 8-bit-state Adam entry points: dispatch to a SIMD variant the CPU can run (baseline-compiled;
// AVX variants are called only after cpuid; AVX-512 has a second build for AVX512_BF16 CPUs), and
// the scalar quantize/dequantize helpers.
#include "kernels/cpu/adam8bit.h"

#include "kernels/cpu/adam8bit_bf16.h"
#include "kernels/cpu/adam8bit_kernel.h"
#include "kernels/cpu/optim_variants.h"

namespace strata::kernels {

bool detail::cpu_has_avx512_bf16() {
  return simd_level_supported(SimdLevel::avx512) && __builtin_cpu_supports("avx512bf16");
}

SimdLevel adam8bit_update(const AdamConstants& c, const AdamFormats& formats, const Adam8bitSpan& span,
                          SimdLevel level) {
  const SimdLevel run = runnable_simd_level(level);
  switch (run) {
    case SimdLevel::avx512:
      if (detail::cpu_has_avx512_bf16()) {
        detail::adam8bit_update_avx512_bf16(c, formats, span);
      } else {
        detail::adam8bit_update_avx512(c, formats, span);
      }
      break;
    case SimdLevel::avx2: detail::adam8bit_update_avx2(c, formats, span); break;
    case SimdLevel::scalar: detail::adam8bit_update_scalar(c, formats, span); break;
  }
  return run;
}

void adam8bit_quantize(const float* m, const float* v, size_t n, const Adam8bitSpan& span) {
  for (size_t b = 0; b * kAdam8bitBlock < n; ++b) {
    const size_t base = b * kAdam8bitBlock;
    const size_t len = n - base < kAdam8bitBlock ? n - base : kAdam8bitBlock;
    float m_absmax = 0.0f, v_absmax = 0.0f, sqrt_v[kAdam8bitBlock];
    for (size_t i = 0; i < len; ++i) {
      m_absmax = ScalarOps::max(m_absmax, ScalarOps::abs(m[base + i]));
      v_absmax = ScalarOps::max(v_absmax, v[base + i]);
      sqrt_v[i] = ScalarOps::sqrt(v[base + i]);
    }
    requantize<ScalarOps>(finish_block(m + base, sqrt_v, len, m_absmax, v_absmax, span.m_code + base,
                                       span.v_code + base, span.m_scale + b, span.v_scale + b));
  }
}

void adam8bit_dequantize(const Adam8bitSpan& span, float* m, float* v) {
  for (size_t i = 0; i < span.n; ++i) {
    const size_t b = i / kAdam8bitBlock;
    m[i] = dequant_m<ScalarOps>(span.m_code + i, dequant_m_factor(span.m_scale[b]));
    v[i] = dequant_v<ScalarOps>(span.v_code + i, dequant_v_factor(span.v_scale[b]));
  }
}

}  // namespace strata::kernels
