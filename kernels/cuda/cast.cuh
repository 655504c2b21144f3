// Element format conversions on a CUDA stream between fp32, bf16 and IEEE fp16, rounding to
// nearest even with NaN kept a quiet NaN: bit-identical to kernels/cpu/half.h (the reference).
// bf16 <-> fp16 goes through fp32 (exact widening, one rounding). Device pointers; asynchronous.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cpu/half.h"

namespace strata::kernels::cuda {

// dst (n elements of `to`) = src (n elements of `from`) converted. Same format: a device copy.
// dst and src must not overlap.
cudaError_t convert(void* dst, FloatFormat to, const void* src, FloatFormat from, size_t n, cudaStream_t stream);

}  // namespace strata::kernels::cuda
