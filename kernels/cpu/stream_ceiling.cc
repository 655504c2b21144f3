// Dispatch of the memory-ceiling kernel to a SIMD variant the CPU can run (baseline-compiled;
// AVX variants are called only after cpuid).
#include "kernels/cpu/stream_ceiling.h"

#include "kernels/cpu/optim_variants.h"

namespace strata::kernels {

SimdLevel stream_ceiling(const AdamFormats& formats, bool eight_bit_states, const CeilingSpan& span,
                         SimdLevel level) {
  const SimdLevel run = runnable_simd_level(level);
  switch (run) {
    case SimdLevel::avx512: detail::stream_ceiling_avx512(formats, eight_bit_states, span); break;
    case SimdLevel::avx2: detail::stream_ceiling_avx2(formats, eight_bit_states, span); break;
    case SimdLevel::scalar: detail::stream_ceiling_scalar(formats, eight_bit_states, span); break;
  }
  return run;
}

}  // namespace strata::kernels
