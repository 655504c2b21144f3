// Causal scaled-dot-product attention on a CUDA stream with multi-head and grouped-query heads
// (query head h reads kv head h / (NH / NKV)), forward and backward, with the semantics of
// kernels/cpu/ops_attention.h: same layouts, lse (B, NH, T) saved instead of probabilities,
// backward recomputing them from q, k and lse, and ACCUMULATING (+=) into dq, dk, dv.
// Tensors are T (float, __nv_bfloat16 or __half); scores, softmax and sums are fp32.
// bf16/fp16 with HS 64 or 128 (and 16-byte aligned pointers) run tiled on the tensor cores
// (flash_attention.cuh: P and dS rounded to the element type before their products, as
// FlashAttention does); everything else one warp per query row (forward, dq) or key row (dk, dv),
// online softmax, k/v read through the cache. Both deterministic (each output element has one
// owner that sums in a fixed order); O(T^2 HS) work per head as any exact attention.
// Limits: 1 <= HS <= kAttentionMaxHeadSize, NH % NKV == 0 (else cudaErrorInvalidValue).
// qkv_stride (both functions): the row stride in elements between consecutive positions (b, t) of
// q, k, v, dq, dk and dv, so that they may be column blocks of one (B * T, qkv_stride) tensor (the
// fused projection's output); 0 means packed (NH * HS for q and dq, NKV * HS for the others), else
// >= NH * HS (cudaErrorInvalidValue otherwise). out, dout and lse are always packed. The values
// never depend on the stride; the tiled kernels need it a multiple of 8 elements (16 bytes).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::kernels::cuda {

inline constexpr int64_t kAttentionMaxHeadSize = 256;

// q (B, T, NH, HS), k and v (B, T, NKV, HS); out (B, T, NH, HS);
// lse (B, NH, T) = log sum_{j <= t} exp(scale q_t . k_j), scale = 1 / sqrt(HS).
template <typename T>
cudaError_t attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B, int64_t T_len,
                              int64_t NH, int64_t NKV, int64_t HS, cudaStream_t stream, int64_t qkv_stride = 0);

// Given dout (B, T, NH, HS), the forward's out and lse: dq +=, dk and dv (B, T, NKV, HS) += (summed
// over the query heads sharing each kv head). None may be null. scratch (stream-ordered device
// scratch, may be null): the tiled kernels keep per-row terms there (flash_attention.cuh).
template <typename T>
cudaError_t attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                               const float* lse, int64_t B, int64_t T_len, int64_t NH, int64_t NKV, int64_t HS,
                               cudaStream_t stream, float* scratch = nullptr, size_t scratch_floats = 0,
                               int64_t qkv_stride = 0);

}  // namespace strata::kernels::cuda
