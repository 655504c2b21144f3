// Tiled ("flash") causal attention on the tensor cores for 16-bit activations: the fast path behind
// attention_forward / attention_backward (attention.cuh) when the element type is bf16 or fp16, the
// head size is 64 or 128 and every pointer is 16-byte aligned. Same contract and layouts as
// attention.cuh: q, out, dout (B, T, NH, HS); k, v (B, T, NKV, HS); lse (B, NH, T) fp32;
// dq, dk, dv accumulated (+=, formed in fp32 and rounded once).
// INTERNAL: called by attention.cu (and its gpu tests, for WarpRows). Deterministic: every output element has one owner that
// sums in a fixed order (no atomics), so results are bit-identical run to run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

namespace strata::kernels::cuda::flash {

// Rows each warp owns: query rows in the forward and dq kernels, keys in the dk, dv kernel; 16 (one
// m16 tile) or 32 (two, each fragment read from shared memory once for both). Every row goes
// through the same operations in the same order either way, so the results are the same bits;
// `automatic` is 32 at head size 64 and 16 at 128 (two tiles' accumulators do not fit in the
// registers there: m32 at 128 is not built and returns cudaErrorInvalidValue). A choice for the
// tests, which hold the two equal.
enum class WarpRows { automatic, m16, m32 };

// True when the tiled kernels handle this element type, head size, row stride of q, k, v (and
// their gradients; attention.cuh's qkv_stride, a multiple of 8 elements) and these pointers.
template <typename T>
bool supported(int64_t HS, int64_t qkv_stride, std::initializer_list<const void*> pointers);

template <typename T>
cudaError_t forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B, int64_t T_len, int64_t NH,
                    int64_t NKV, int64_t HS, cudaStream_t stream, int64_t qkv_stride = 0,
                    WarpRows rows = WarpRows::automatic);

// scratch (stream-ordered device scratch; may be null): when it holds 2 B NH T floats, the dq
// kernel leaves each query row's D = rowsum(dout * out) and lse there for the dk, dv kernel, which
// otherwise forms them again for every key tile.
template <typename T>
cudaError_t backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                     const float* lse, int64_t B, int64_t T_len, int64_t NH, int64_t NKV, int64_t HS,
                     cudaStream_t stream, float* scratch = nullptr, size_t scratch_floats = 0,
                     int64_t qkv_stride = 0, WarpRows rows = WarpRows::automatic);

}  // namespace strata::kernels::cuda::flash
