// The optimizer's memory-ceiling kernel, AVX2 (8 lanes); compiled with -mavx2 -mfma -mf16c, called only after cpuid says so.
// The loop is in stream_ceiling_kernel.h; this file only instantiates it with Avx2Ops.
#include "kernels/cpu/optim_variants.h"
#include "kernels/cpu/stream_ceiling_kernel.h"

namespace strata::kernels::detail {

void stream_ceiling_avx2(const AdamFormats& f, bool eight_bit_states, const CeilingSpan& s) {
  ceiling_dispatch<Avx2Ops>(f, eight_bit_states, s);
}

}  // namespace strata::kernels::detail
