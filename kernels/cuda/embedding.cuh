// Embedding lookups on a CUDA stream: GPT-2's encoder (token + learned position embedding) and the
// plain token embedding, forward and backward, with the semantics of kernels/cpu/ops_embedding.h.
// Tables and activations are T (float, __nv_bfloat16 or __half); token ids int32 in [0, V) (the
// caller validates data: an id out of range reads out of bounds). Backward ACCUMULATES (+=) and is
// deterministic without atomics or sorting: the block of a token's FIRST row owns that token's table
// row and sums the token's rows in row order (fp32), then adds once. Its cost is O(N^2) token-id
// compares (cheap up to ~64K rows per call). Device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::kernels::cuda {

// out (B, T, C) = wte[tokens[b, t]] + wpe[t]; tokens (B, T), wte (V, C), wpe (maxT >= T, C).
template <typename T>
cudaError_t encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B, int64_t T_len,
                            int64_t C, cudaStream_t stream);
// dwte (V, C) += scatter of dout (B, T, C) by token; dwpe rows 0..T-1 += sum over b. Either may be null.
template <typename T>
cudaError_t encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t T_len,
                             int64_t C, cudaStream_t stream);

// out (N, C) = wte[tokens[n]].
template <typename T>
cudaError_t token_embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int64_t C,
                                    cudaStream_t stream);
// dwte (V, C) += scatter of dout (N, C) by token.
template <typename T>
cudaError_t token_embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int64_t N, int64_t C,
                                     cudaStream_t stream);

}  // namespace strata::kernels::cuda
