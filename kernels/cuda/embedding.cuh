// Embedding lookups on a CUDA stream: GPT-2's encoder (token + learned position embedding) and the
// plain token embedding, forward and backward, with the semantics of kernels/cpu/ops_embedding.h,
// a table tile (TableRows) included: rows whose token the table does not hold are skipped (never
// read or written, so an id outside [0, vocab) touches nothing). Tables and activations are T
// (float, __nv_bfloat16 or __half); token ids int32. Backward ACCUMULATES (+=) and is
// deterministic without float atomics, bit for bit as kernels/cpu: each distinct token's rows are
// summed in row order (fp32) and added to its table row once, so every tiling of the vocabulary
// gives the same bits. With a workspace of token_embedding_backward_workspace_bytes(N) it sorts
// (token, row) pairs (CUB's stable radix sort) and one block per token and column chunk sums that
// token's rows: O(N C). Without one (null or too small) it takes the slow path: the block of a
// token's FIRST row scans all later rows, O(N^2) token-id compares -- same bits, only slower.
// Device pointers; asynchronous on `stream`; the workspace is stream-ordered scratch, free again
// when the call's work has run. A TableRows with a negative begin or count is cudaErrorInvalidValue.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/ops_embedding.h"  // TableRows

namespace strata::kernels::cuda {

// out (B, T, C) = wte[tokens[b, t] - table.begin] + wpe[t] for the rows whose token `table` holds
// (the others are not written); tokens (B, T), wte (table.count, C), wpe (maxT >= T, C).
template <typename T>
cudaError_t encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B, int64_t T_len,
                            int64_t C, cudaStream_t stream, TableRows table = {});
// dwte (table.count, C) += scatter of dout (B, T, C) by token over the rows `table` holds; dwpe
// rows 0..T-1 += sum over b of every row, whatever `table`. Either may be null. `workspace` as
// token_embedding_backward's, for N = B * T rows.
template <typename T>
cudaError_t encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t T_len,
                             int64_t C, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                             TableRows table = {});

// out (N, C) = wte[tokens[n] - table.begin] for the rows whose token `table` holds.
template <typename T>
cudaError_t token_embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int64_t C,
                                    cudaStream_t stream, TableRows table = {});
// Bytes of workspace (256-byte aligned) the sorted backward needs for N rows (0 for N <= 0).
size_t token_embedding_backward_workspace_bytes(int64_t N);

// dwte (table.count, C) += scatter of dout (N, C) by token over the rows `table` holds. workspace:
// device scratch, at least token_embedding_backward_workspace_bytes(N) for the sorted path (see the
// top of this file); the sort takes all N rows, the blocks of tokens outside `table` return.
template <typename T>
cudaError_t token_embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int64_t N, int64_t C,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream,
                                     TableRows table = {});

}  // namespace strata::kernels::cuda
