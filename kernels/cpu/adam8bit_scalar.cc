// Adam/AdamW with 8-bit states, baseline x86-64, one lane: the reference the vector variants are tested against.
// The block loop is in adam8bit_kernel.h; this file only instantiates it with ScalarOps.
#include "kernels/cpu/adam8bit_kernel.h"
#include "kernels/cpu/optim_variants.h"

namespace strata::kernels::detail {

void adam8bit_update_scalar(const AdamConstants& c, const AdamFormats& f, const Adam8bitSpan& s) {
  adam8bit_dispatch<ScalarOps>(c, f, s);
}

}  // namespace strata::kernels::detail
