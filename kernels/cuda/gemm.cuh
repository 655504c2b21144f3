// Linear layer GEMMs on the GPU through cuBLAS (cublasGemmEx_64, fp32 accumulation), with the
// semantics of kernels/cpu/ops_matmul.h: out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias, and a
// backward that ACCUMULATES (+=) into dinp, dweight and dbias. T is float, __nv_bfloat16 or __half
// (inputs and outputs in T, CUBLAS_COMPUTE_32F: a 16-bit result is formed in fp32, including any
// split-K partial sums, and rounded to T once; fp32 may opt into TF32 tensor cores).
// The caller owns the cuBLAS handle; each call binds it to `stream`, to host pointer mode (the
// alpha/beta scalars live on the host) and to the math mode GemmOptions implies, so a mode left on
// the handle by someone else never changes the arithmetic. Not thread-safe per handle (as cuBLAS).
// dbias is a fixed-order column sum (deterministic); the GEMMs are as deterministic as cuBLAS on
// one GPU. Asynchronous; returns the first failure of either library.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::kernels::cuda {

// The outcome of a GEMM call: a cuBLAS failure, a CUDA launch failure (bias kernels), or success.
struct GemmStatus {
  cublasStatus_t cublas = CUBLAS_STATUS_SUCCESS;
  cudaError_t cuda = cudaSuccess;
  bool ok() const { return cublas == CUBLAS_STATUS_SUCCESS && cuda == cudaSuccess; }
};

// allow_tf32 (fp32 GEMMs only; 16-bit ones ignore it): true lets cuBLAS round the inputs to TF32
// (10 mantissa bits) for the tensor cores of sm_80+, still accumulating in fp32
// (CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_TF32_TENSOR_OP_MATH); about 1e-3 relative error. False is
// full fp32 (CUBLAS_COMPUTE_32F with CUBLAS_DEFAULT_MATH, which keeps at least fp32's mantissa
// bits). NVIDIA_TF32_OVERRIDE=0 in the environment makes cuBLAS ignore a TF32 request.
struct GemmOptions {
  bool allow_tf32 = false;
};

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be null. out is overwritten
// and must not alias inp or weight.
template <typename T>
GemmStatus matmul_forward(cublasHandle_t handle, T* out, const T* inp, const T* weight, const T* bias, int64_t N,
                          int64_t C, int64_t OC, GemmOptions options, cudaStream_t stream);

// Given dout (N, OC): dinp (N, C) += dout @ weight; dweight (OC, C) += dout^T @ inp;
// dbias (OC) += sum_n dout[n]. Each gradient may be null (not computed).
template <typename T>
GemmStatus matmul_backward(cublasHandle_t handle, T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                           const T* weight, int64_t N, int64_t C, int64_t OC, GemmOptions options,
                           cudaStream_t stream);

}  // namespace strata::kernels::cuda
