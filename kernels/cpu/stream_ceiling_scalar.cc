// The optimizer's memory-ceiling kernel, baseline x86-64, one lane: the reference the vector variants are tested against.
// The loop is in stream_ceiling_kernel.h; this file only instantiates it with ScalarOps.
#include "kernels/cpu/optim_variants.h"
#include "kernels/cpu/stream_ceiling_kernel.h"

namespace strata::kernels::detail {

void stream_ceiling_scalar(const AdamFormats& f, bool eight_bit_states, const CeilingSpan& s) {
  ceiling_dispatch<ScalarOps>(f, eight_bit_states, s);
}

}  // namespace strata::kernels::detail
