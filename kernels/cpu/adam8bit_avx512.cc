// Adam/AdamW with 8-bit states, AVX-512 (16 lanes); compiled with -mavx512f/bw/vl/dq, called only after cpuid says so.
// The block loop is in adam8bit_kernel.h; this file only instantiates it with Avx512Ops.
#include "kernels/cpu/adam8bit_kernel.h"
#include "kernels/cpu/optim_variants.h"

namespace strata::kernels::detail {

void adam8bit_update_avx512(const AdamConstants& c, const AdamFormats& f, const Adam8bitSpan& s) {
  adam8bit_dispatch<Avx512Ops>(c, f, s);
}

}  // namespace strata::kernels::detail
