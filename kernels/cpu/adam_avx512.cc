// Adam/AdamW and the gradient finite check, AVX-512 (16 lanes); compiled with -mavx512f/bw/vl/dq, called only after cpuid says so.
// The loop bodies are in adam_kernel.h; this file only instantiates them with Avx512Ops.
#include "kernels/cpu/adam_kernel.h"
#include "kernels/cpu/optim_variants.h"

namespace strata::kernels::detail {

void adam_update_avx512(const AdamConstants& c, const AdamFormats& f, const AdamSpan& s) {
  adam_dispatch<Avx512Ops>(c, f, s);
}

bool grad_all_finite_avx512(const void* grad, FloatFormat format, size_t n) {
  return all_finite_dispatch<Avx512Ops>(grad, format, n);
}

}  // namespace strata::kernels::detail
