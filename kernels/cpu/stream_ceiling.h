// The optimizer's memory ceiling: a kernel with exactly Adam's streams (reads weights, gradient, m
// and v; writes weights, m, v and the bf16/fp16 copy, in place, in one pass) but trivial
// arithmetic (adds), in the same SIMD variants. Its throughput in the same run is the bound the
// Adam kernels are measured against. Not a general memory benchmark; the values it writes are
// meaningless (run it on scratch buffers).
#pragma once

#include <cstddef>

#include "kernels/cpu/adam.h"

namespace strata::kernels {

// The streams of one range. States are fp32 (m, v point at floats) or, for the 8-bit pattern,
// one byte each (m, v point at bytes; the per-block scales, 8 bytes per 256 elements, are left out).
struct CeilingSpan {
  float* param = nullptr;
  void* m = nullptr;
  void* v = nullptr;
  const void* grad = nullptr;
  void* copy_out = nullptr;
  size_t n = 0;
};

// One pass of the access pattern over `span`; runs and returns runnable_simd_level(level).
SimdLevel stream_ceiling(const AdamFormats& formats, bool eight_bit_states, const CeilingSpan& span,
                         SimdLevel level);

}  // namespace strata::kernels
