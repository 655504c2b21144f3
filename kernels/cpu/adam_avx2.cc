// Adam/AdamW and the gradient finite check, AVX2 (8 lanes); compiled with -mavx2 -mfma -mf16c, called only after cpuid says so.
// The loop bodies are in adam_kernel.h; this file only instantiates them with Avx2Ops.
#include "kernels/cpu/adam_kernel.h"
#include "kernels/cpu/optim_variants.h"

namespace strata::kernels::detail {

void adam_update_avx2(const AdamConstants& c, const AdamFormats& f, const AdamSpan& s) {
  adam_dispatch<Avx2Ops>(c, f, s);
}

bool grad_all_finite_avx2(const void* grad, FloatFormat format, size_t n) {
  return all_finite_dispatch<Avx2Ops>(grad, format, n);
}

}  // namespace strata::kernels::detail
