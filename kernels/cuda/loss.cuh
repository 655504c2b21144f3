// Fused softmax + cross-entropy over the vocabulary on a CUDA stream, with the semantics of
// kernels/cpu/ops_loss.h: the forward saves only lse (N); the backward rebuilds each probability
// from the logit and lse; targets int32 in [0, V) or kIgnoreTarget (-1: no loss, no gradient, not
// counted). Logits and dlogits are T (float, __nv_bfloat16 or __half); lse, losses and sums fp32,
// the final loss sum over rows in double (N values), into the CPU op's CrossEntropyResult.
// Deterministic (fixed-order block reductions). Device pointers; asynchronous on `stream`.
// logits_stride (every function): the row stride of logits and dlogits in elements, 0 meaning V,
// else >= V (a padded row, see gemm.cuh); the columns past V are never read or written.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cpu/ops_loss.h"

namespace strata::kernels::cuda {

// logits (N, V), V >= 1, targets (N). Writes lse (N) for every row and losses (N) =
// -log softmax(logits[n])[targets[n]] (0 for ignored rows). If result is not null (a device
// pointer) it is overwritten with the loss sum (row order), the counted rows and their mean.
template <typename T>
cudaError_t crossentropy_forward(float* lse, float* losses, CrossEntropyResult* result, const T* logits,
                                 const int32_t* targets, int64_t N, int64_t V, cudaStream_t stream,
                                 int64_t logits_stride = 0);

// dlogits (N, V) += dloss * (softmax(logits[n]) - onehot(targets[n])) for counted rows; ignored
// rows untouched. dlogits must not alias logits.
template <typename T>
cudaError_t crossentropy_backward(T* dlogits, const T* logits, const float* lse, const int32_t* targets, float dloss,
                                  int64_t N, int64_t V, cudaStream_t stream, int64_t logits_stride = 0);

// The same gradient written over the logits in place; ignored rows become 0.
template <typename T>
cudaError_t crossentropy_backward_inplace(T* logits_to_dlogits, const float* lse, const int32_t* targets,
                                          float dloss, int64_t N, int64_t V, cudaStream_t stream,
                                          int64_t logits_stride = 0);

// crossentropy_forward, then crossentropy_backward_inplace with its lse, in one kernel: each row read
// from memory once (staged in shared memory when its groups take at most 112 KiB) and written once,
// where the two read it twice and write it once. The same bits.
template <typename T>
cudaError_t crossentropy_forward_backward_inplace(float* lse, float* losses, CrossEntropyResult* result,
                                                  T* logits_to_dlogits, const int32_t* targets, float dloss,
                                                  int64_t N, int64_t V, cudaStream_t stream,
                                                  int64_t logits_stride = 0);

}  // namespace strata::kernels::cuda
