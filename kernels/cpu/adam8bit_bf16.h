// The second AVX-512 build of the 8-bit Adam kernel, for CPUs with AVX512_BF16: it writes the bf16
// copy with vcvtneps2bf16 (one instruction instead of eight integer ops) and is otherwise the same
// code and the same bits as the plain AVX-512 build. Internal to kernels/cpu: adam8bit.cc picks it
// for SimdLevel::avx512 when the CPU has AVX512_BF16; tests call both builds directly.
#pragma once

#include "kernels/cpu/adam8bit.h"

namespace strata::kernels::detail {

// True if this CPU runs AVX512_BF16 (and the AVX-512 level: the build needs both).
bool cpu_has_avx512_bf16();

// Call only when cpu_has_avx512_bf16().
void adam8bit_update_avx512_bf16(const AdamConstants& c, const AdamFormats& f, const Adam8bitSpan& s);

}  // namespace strata::kernels::detail
