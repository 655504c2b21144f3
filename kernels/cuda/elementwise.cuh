// Elementwise ops on a CUDA stream: GELU (tanh approximation), SwiGLU over the fused (N, 2H) input,
// the residual add, and rotary position embedding (RoPE, "rotate half" pairing), forward and
// backward, with the semantics of kernels/cpu/ops_elementwise.h and kernels/cpu/ops_rope.h.
// Tensors are T (float, __nv_bfloat16 or __half), math in fp32 (RoPE angles in double, as the
// CPU op). GELU in 16-bit types evaluates the same tanh approximation as a logistic function with
// the fast exponential: within a few 1e-6 of the CPU's value before the rounding to T.
// Backward ops ACCUMULATE (+=), rounding once to T per element, unless told to overwrite (=, the
// old value never read). No reductions: deterministic. GELU and the residual add move 16 bytes
// per thread access when every pointer is 16-byte aligned (the same arithmetic per element).
// Device pointers; asynchronous on `stream`; returns the launch error (cudaErrorInvalidValue for
// a negative size or, for RoPE, an odd head size).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::kernels::cuda {

// out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). out may equal inp.
template <typename T>
cudaError_t gelu_forward(T* out, const T* inp, int64_t n, cudaStream_t stream);
// dinp (n) += gelu'(inp) * dout (overwrite: =; dinp must not alias inp or dout then).
template <typename T>
cudaError_t gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t stream,
                          bool overwrite = false);

// inp (N, 2H) = [gate | up] per row; out (N, H) = silu(gate) * up.
template <typename T>
cudaError_t swiglu_forward(T* out, const T* inp, int64_t N, int64_t H, cudaStream_t stream);
// dinp (N, 2H) += [d gate | d up] given dout (N, H) (overwrite: =).
template <typename T>
cudaError_t swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int64_t H, cudaStream_t stream,
                            bool overwrite = false);

// out (n) = a (n) + b (n); out may equal a or b.
template <typename T>
cudaError_t residual_forward(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream);
// da (n) += dout, db (n) += dout; either may be null.
template <typename T>
cudaError_t residual_backward(T* da, T* db, const T* dout, int64_t n, cudaStream_t stream);

// out (B, T, NH, HS) = rotate(inp): pair (x[i], x[i + HS/2]) turned by (pos_offset + t) *
// theta^(-2i/HS), i in [0, HS/2). HS must be even. out may equal inp. cos/sin are computed in
// double and rounded to float, the rotation's products and sums are single fp32 operations (no
// FMA contraction), as in kernels/cpu/ops_rope.cc. One thread per rotated pair. stride (both): the
// row stride in elements between consecutive positions (b, t) of both tensors (q or k as a column
// block of the fused projection's output); 0 means NH * HS, else >= NH * HS (cudaErrorInvalidValue).
template <typename T>
cudaError_t rope_forward(T* out, const T* inp, int64_t B, int64_t T_len, int64_t NH, int64_t HS, float theta,
                         int64_t pos_offset, cudaStream_t stream, int64_t stride = 0);
// dinp (B, T, NH, HS) = the inverse rotation of dout, overwritten; dinp may equal dout.
template <typename T>
cudaError_t rope_backward(T* dinp, const T* dout, int64_t B, int64_t T_len, int64_t NH, int64_t HS, float theta,
                          int64_t pos_offset, cudaStream_t stream, int64_t stride = 0);

}  // namespace strata::kernels::cuda
