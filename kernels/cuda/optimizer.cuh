// GPU-side optimizer passes on a CUDA stream: the fused Adam/AdamW update for states kept on the
// GPU (fp32 master/m/v; fp32, bf16 or fp16 gradient; optional bf16/fp16 copy-out), the squared
// global gradient norm, and the all-finite check. The update is kernels/cpu/adam.h's, using its
// AdamConstants (build them with kernels::adam_constants) and the same unfused IEEE operations,
// so it gives the CPU reference's bits exactly. AdamSpan holds device pointers here.
// Deterministic. Asynchronous on `stream`; returns the launch error.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/adam.h"
#include "kernels/cpu/adam8bit.h"

namespace strata::kernels::cuda {

// One fused pass over span.n elements (see kernels/cpu/adam.h for the formula and buffer rules).
cudaError_t adam_update(const AdamConstants& constants, const AdamFormats& formats, const AdamSpan& span,
                        cudaStream_t stream);

// The same pass with 8-bit moments (kernels/cpu/adam8bit.h: codes and block scales; the dequantization,
// the update, the block absmax and the requantization of kernels/cpu/adam8bit_kernel.h, each in the
// same unfused IEEE operations; the codes from sqrt rounded correctly and one exact comparison,
// which settles the same code as the CPU's estimate does). One thread block per 256-element
// quantization block. span holds device pointers.
cudaError_t adam8bit_update(const AdamConstants& constants, const AdamFormats& formats, const Adam8bitSpan& span,
                            cudaStream_t stream);

// Partial sums grad_norm_squared needs between its two kernels (device scratch the caller owns).
inline constexpr size_t kGradNormScratchFloats = 256;

// *sum_squares += sum of g^2 over grad (n elements of `format`), g^2 in fp32 summed in a fixed
// order (kGradNormScratchFloats block partials, then one block). Call once per tensor with the
// same sum_squares (zeroed by the caller at the start of a step); `scratch` holds
// kGradNormScratchFloats floats and may be reused by the next call on the same stream.
cudaError_t grad_norm_squared(float* sum_squares, float* scratch, const void* grad, FloatFormat format, size_t n,
                              cudaStream_t stream);

// Writes 0 to *all_finite (int32, device) when any of the n elements is Inf or NaN; never writes 1
// (the caller sets it to 1 before a step's first tensor, then checks it after the last).
cudaError_t grad_check_finite(int32_t* all_finite, const void* grad, FloatFormat format, size_t n,
                              cudaStream_t stream);

}  // namespace strata::kernels::cuda
