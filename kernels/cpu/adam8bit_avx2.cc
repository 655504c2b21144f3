// Adam/AdamW with 8-bit states, AVX2 (8 lanes); compiled with -mavx2 -mfma -mf16c, called only after cpuid says so.
// The block loop is in adam8bit_kernel.h; this file only instantiates it with Avx2Ops.
#include "kernels/cpu/adam8bit_kernel.h"
#include "kernels/cpu/optim_variants.h"

namespace strata::kernels::detail {

void adam8bit_update_avx2(const AdamConstants& c, const AdamFormats& f, const Adam8bitSpan& s) {
  adam8bit_dispatch<Avx2Ops>(c, f, s);
}

}  // namespace strata::kernels::detail
