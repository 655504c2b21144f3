// The per-ISA entry points of the optimizer kernels (Adam, 8-bit Adam, the finite check, the
// ceiling), one set per variant file (*_scalar.cc, *_avx2.cc, *_avx512.cc). Internal to
// kernels/cpu: only the dispatchers (adam.cc, adam8bit.cc, stream_ceiling.cc) call these, and only
// after checking that the CPU supports the variant.
#pragma once

#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/stream_ceiling.h"

namespace strata::kernels::detail {

void adam_update_scalar(const AdamConstants& c, const AdamFormats& f, const AdamSpan& s);
bool grad_all_finite_scalar(const void* grad, FloatFormat format, size_t n);
void adam8bit_update_scalar(const AdamConstants& c, const AdamFormats& f, const Adam8bitSpan& s);
void stream_ceiling_scalar(const AdamFormats& f, bool eight_bit_states, const CeilingSpan& s);

void adam_update_avx2(const AdamConstants& c, const AdamFormats& f, const AdamSpan& s);
bool grad_all_finite_avx2(const void* grad, FloatFormat format, size_t n);
void adam8bit_update_avx2(const AdamConstants& c, const AdamFormats& f, const Adam8bitSpan& s);
void stream_ceiling_avx2(const AdamFormats& f, bool eight_bit_states, const CeilingSpan& s);

void adam_update_avx512(const AdamConstants& c, const AdamFormats& f, const AdamSpan& s);
bool grad_all_finite_avx512(const void* grad, FloatFormat format, size_t n);
void adam8bit_update_avx512(const AdamConstants& c, const AdamFormats& f, const Adam8bitSpan& s);
void stream_ceiling_avx512(const AdamFormats& f, bool eight_bit_states, const CeilingSpan& s);

}  // namespace strata::kernels::detail
