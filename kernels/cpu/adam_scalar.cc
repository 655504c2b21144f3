// Adam/AdamW and the gradient finite check, baseline x86-64, one lane: the reference the vector variants are tested against.
// The loop bodies are in adam_kernel.h; this file only instantiates them with ScalarOps.
#include "kernels/cpu/adam_kernel.h"
#include "kernels/cpu/optim_variants.h"

namespace strata::kernels::detail {

void adam_update_scalar(const AdamConstants& c, const AdamFormats& f, const AdamSpan& s) {
  adam_dispatch<ScalarOps>(c, f, s);
}

bool grad_all_finite_scalar(const void* grad, FloatFormat format, size_t n) {
  return all_finite_dispatch<ScalarOps>(grad, format, n);
}

}  // namespace strata::kernels::detail
