// Row normalisations on a CUDA stream: LayerNorm (GPT-2) and RMSNorm (LLaMA), forward and backward,
// with the semantics of kernels/cpu/ops_norm.h (same layouts, saved statistics, += backward).
// Activations, weights and gradients are T (float, __nv_bfloat16 or __half); statistics (mean,
// rstd) and every sum are fp32. All pointers are device pointers; launches are asynchronous on `stream`.
// Deterministic: every reduction has a fixed order, so repeated calls give identical bits.
// Returns the launch error (cudaErrorInvalidValue for a negative size); never synchronizes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::kernels::cuda {

// out (N, C) = (inp - mean) * rstd * weight (C) + bias (C) per row; bias may be null (no bias).
// Saves mean (N) and rstd (N) = 1 / sqrt(var + eps) (biased variance).
template <typename T>
cudaError_t layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                              int64_t N, int64_t C, float eps, cudaStream_t stream);

// dinp (N, C) +=, dweight (C) +=, dbias (C) += given dout (N, C); any gradient may be null.
// One fused pass when `scratch` (stream-ordered device scratch, scratch_floats fp32) holds the
// weight and bias partials of at least one row block (2 C floats): blocks of norm_row_block_rows
// rows each write their rows' dinp (a warp per row) and their fp32 partial column sums of dweight
// and dbias, then one small kernel adds the blocks' partials in block order and rounds once into
// dweight and dbias. The row blocks depend on (N, C, scratch_floats) only: fixed-order sums, the
// same bits every run. Without scratch: dinp, then one-pass column sums (slow for small C).
template <typename T>
cudaError_t layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                               const float* mean, const float* rstd, int64_t N, int64_t C, cudaStream_t stream,
                               float* scratch = nullptr, size_t scratch_floats = 0);

// out (N, C) = inp * rstd * weight (C), rstd (N) = 1 / sqrt(mean(inp^2) + eps), saved.
template <typename T>
cudaError_t rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C, float eps,
                            cudaStream_t stream);

// dinp (N, C) +=, dweight (C) += given dout (N, C); either may be null. Fused with `scratch` as
// layernorm_backward.
template <typename T>
cudaError_t rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const float* rstd,
                             int64_t N, int64_t C, cudaStream_t stream, float* scratch = nullptr,
                             size_t scratch_floats = 0);

// Rows per block of the fused norm backward for (N, C) and a scratch of scratch_floats, or 0 when
// the scratch cannot hold one block's partials (2 C floats): the unfused path.
int64_t norm_row_block_rows(int64_t N, int64_t C, size_t scratch_floats);

}  // namespace strata::kernels::cuda
