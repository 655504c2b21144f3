// GPU twins of kernels/cpu/grad_accumulate.h, so gradients kept on the device follow the one
// definition of accumulation and of the global norm's sum of squares that gradients streamed to
// the host follow (DESIGN.md, "Exactness contract"): the same bits on either side.
// Asynchronous on `stream`; return the launch error.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cpu/half.h"

namespace strata::kernels::cuda {

// acc[i] = float(src[i]) when `first`, else acc[i] + float(src[i]) (one fp32 add), i in [0, n).
cudaError_t accumulate_widened(float* acc, const void* src, FloatFormat src_format, size_t n, bool first,
                               cudaStream_t stream);

// partials[k] = kernels::sum_squares_block(x + k * 4096, min(4096, n - k * 4096)) for every block
// k of x (ceil(n / 4096) doubles): 8 double lanes per block, each summing its strided elements in
// increasing order, combined ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)). x holds n `format` elements, each
// widened exactly to fp32 first: a 16-bit x gives the bits its widened copy would.
cudaError_t sum_squares_blocks(double* partials, const void* x, FloatFormat format, size_t n, cudaStream_t stream);

}  // namespace strata::kernels::cuda
