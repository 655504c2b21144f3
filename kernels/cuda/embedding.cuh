// Embedding lookups on a CUDA stream: GPT-2's encoder (token + learned position embedding) and the
// plain token embedding, forward and backward, with the semantics of kernels/cpu/ops_embedding.h.
// Tables and activations are T (float, __nv_bfloat16 or __half); token ids int32 in [0, V) (the
// caller validates data: an id out of range reads out of bounds). Backward ACCUMULATES (+=) and is
// deterministic without float atomics, bit for bit as kernels/cpu: each distinct token's rows are
// summed in row order (fp32) and added to its table row once. With a workspace of
// token_embedding_backward_workspace_bytes(N) it sorts (token, row) pairs (CUB's stable radix sort)
// and one block per token and column chunk sums that token's rows: O(N C). Without one (null or
// too small) it takes the slow path: the block of a token's FIRST row scans all later rows, O(N^2)
// token-id compares -- same bits, only slower. Device pointers; asynchronous on `stream`; the
// workspace is stream-ordered scratch, free again when the call's work has run.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace strata::kernels::cuda {

// out (B, T, C) = wte[tokens[b, t]] + wpe[t]; tokens (B, T), wte (V, C), wpe (maxT >= T, C).
template <typename T>
cudaError_t encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B, int64_t T_len,
                            int64_t C, cudaStream_t stream);
// dwte (V, C) += scatter of dout (B, T, C) by token; dwpe rows 0..T-1 += sum over b. Either may be
// null. `workspace` as token_embedding_backward's, for N = B * T rows.
template <typename T>
cudaError_t encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t T_len,
                             int64_t C, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// out (N, C) = wte[tokens[n]].
template <typename T>
cudaError_t token_embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int64_t C,
                                    cudaStream_t stream);
// Bytes of workspace (256-byte aligned) the sorted backward needs for N rows (0 for N <= 0).
size_t token_embedding_backward_workspace_bytes(int64_t N);

// dwte (V, C) += scatter of dout (N, C) by token. workspace: device scratch, at least
// token_embedding_backward_workspace_bytes(N) for the sorted path (see the top of this file).
template <typename T>
cudaError_t token_embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int64_t N, int64_t C,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace strata::kernels::cuda
