// Linear-layer GEMMs (contract in gemm.cuh). cuBLAS is column-major: a row-major (R, K) matrix is
// its column-major transpose (K, R) with leading dimension K, so with ^T marking that view:
//   forward  out^T (OC, N)  = weight^T^T (OC, C) . inp^T (C, N)   -> gemm(T, N, m=OC, n=N, k=C)
//   dinp     dinp^T (C, N) += weight^T (C, OC) . dout^T (OC, N)   -> gemm(N, N, m=C,  n=N, k=OC)
//   dweight  dweight^T (C, OC) += inp^T (C, N) . dout (N, OC)     -> gemm(N, T, m=C,  n=OC, k=N)
// The bias is broadcast into out first and the forward GEMM adds onto it (beta = 1), so out is
// rounded once; dbias is a fixed-order column sum.
#include <type_traits>

#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/gemm.cuh"

namespace strata::kernels::cuda {
namespace {

template <typename T>
constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return CUDA_R_16BF;
  if constexpr (std::is_same_v<T, __half>) return CUDA_R_16F;
}

template <typename T>
cublasComputeType_t compute_type(const GemmOptions& options) {
  if constexpr (std::is_same_v<T, float>) {
    if (options.allow_tf32) return CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  return CUBLAS_COMPUTE_32F;
}

// C (m, n) = alpha op(A) op(B) + beta C, all column-major.
template <typename T>
cublasStatus_t gemm(cublasHandle_t handle, cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n,
                    int64_t k, const T* A, int64_t lda, const T* B, int64_t ldb, float beta, T* Cm, int64_t ldc,
                    const GemmOptions& options) {
  const float alpha = 1.0f;
  return cublasGemmEx_64(handle, op_a, op_b, m, n, k, &alpha, A, data_type<T>(), lda, B, data_type<T>(), ldb, &beta,
                         Cm, data_type<T>(), ldc, compute_type<T>(options), CUBLAS_GEMM_DEFAULT);
}

// out (N, OC) = bias in every row: the forward GEMM then adds its product with beta = 1, so the
// biased output is formed in fp32 and rounded to T once.
template <typename T>
__global__ void broadcast_bias_kernel(T* out, const T* bias, int64_t N, int64_t OC) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N * OC; i += stride) {
    out[i] = bias[i % OC];
  }
}

template <typename T>
struct RowValue {
  const T* data;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const { return detail::load(data + n * C + c); }
};

// TF32 only when asked for an fp32 GEMM; reductions always in the fp32 accumulator, never in a
// 16-bit output type (the contract's "fp32 inside, round once").
template <typename T>
cublasMath_t math_mode(const GemmOptions& options) {
  const bool tf32 = std::is_same_v<T, float> && options.allow_tf32;
  return static_cast<cublasMath_t>((tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                                   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
}

template <typename T>
cublasStatus_t bind(cublasHandle_t handle, const GemmOptions& options, cudaStream_t stream) {
  if (cublasStatus_t st = cublasSetStream(handle, stream); st != CUBLAS_STATUS_SUCCESS) return st;
  if (cublasStatus_t st = cublasSetMathMode(handle, math_mode<T>(options)); st != CUBLAS_STATUS_SUCCESS) return st;
  return cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST);
}

bool valid_shape(int64_t N, int64_t C, int64_t OC) { return N >= 0 && C >= 0 && OC >= 0; }

}  // namespace

template <typename T>
GemmStatus matmul_forward(cublasHandle_t handle, T* out, const T* inp, const T* weight, const T* bias, int64_t N,
                          int64_t C, int64_t OC, GemmOptions options, cudaStream_t stream) {
  GemmStatus status;
  if (!valid_shape(N, C, OC)) {
    status.cublas = CUBLAS_STATUS_INVALID_VALUE;
    return status;
  }
  if (N == 0 || OC == 0) return status;
  if (status.cublas = bind<T>(handle, options, stream); !status.ok()) return status;
  if (bias != nullptr) {
    broadcast_bias_kernel<<<detail::grid_for(N * OC), detail::kBlock, 0, stream>>>(out, bias, N, OC);
    status.cuda = cudaGetLastError();
  } else if (C == 0) {  // an empty sum without bias: out = 0
    status.cuda = cudaMemsetAsync(out, 0, sizeof(T) * N * OC, stream);
  }
  if (!status.ok() || C == 0) return status;
  const float beta = bias != nullptr ? 1.0f : 0.0f;
  status.cublas = gemm<T>(handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, beta, out, OC, options);
  return status;
}

template <typename T>
GemmStatus matmul_backward(cublasHandle_t handle, T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                           const T* weight, int64_t N, int64_t C, int64_t OC, GemmOptions options,
                           cudaStream_t stream) {
  GemmStatus status;
  if (!valid_shape(N, C, OC)) {
    status.cublas = CUBLAS_STATUS_INVALID_VALUE;
    return status;
  }
  if (N == 0 || OC == 0) return status;  // every gradient term is an empty sum
  if (status.cublas = bind<T>(handle, options, stream); !status.ok()) return status;
  if (dinp != nullptr && C > 0) {
    status.cublas = gemm<T>(handle, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, 1.0f, dinp, C, options);
    if (!status.ok()) return status;
  }
  if (dweight != nullptr && C > 0) {
    status.cublas = gemm<T>(handle, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, 1.0f, dweight, C, options);
    if (!status.ok()) return status;
  }
  if (dbias != nullptr) status.cuda = detail::add_column_sums(dbias, N, OC, RowValue<T>{dout, OC}, stream);
  return status;
}

#define STRATA_INSTANTIATE_GEMM(T)                                                                                \
  template GemmStatus matmul_forward<T>(cublasHandle_t, T*, const T*, const T*, const T*, int64_t, int64_t,        \
                                        int64_t, GemmOptions, cudaStream_t);                                      \
  template GemmStatus matmul_backward<T>(cublasHandle_t, T*, T*, T*, const T*, const T*, const T*, int64_t,        \
                                         int64_t, int64_t, GemmOptions, cudaStream_t);
STRATA_FOR_EACH_ELEMENT_TYPE(STRATA_INSTANTIATE_GEMM)
#undef STRATA_INSTANTIATE_GEMM

}  // namespace strata::kernels::cuda
