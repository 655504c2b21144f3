// The optimizer's memory-ceiling kernel, AVX-512 (16 lanes); compiled with -mavx512f/bw/vl/dq, called only after cpuid says so.
// The loop is in stream_ceiling_kernel.h; this file only instantiates it with Avx512Ops.
#include "kernels/cpu/optim_variants.h"
#include "kernels/cpu/stream_ceiling_kernel.h"

namespace strata::kernels::detail {

void stream_ceiling_avx512(const AdamFormats& f, bool eight_bit_states, const CeilingSpan& s) {
  ceiling_dispatch<Avx512Ops>(f, eight_bit_states, s);
}

}  // namespace strata::kernels::detail
