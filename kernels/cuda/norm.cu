// LayerNorm and RMSNorm kernels (contract in norm.cuh). One block per row for the forward and for
// dinp (block-wide fp32 sums, two passes over the row as kernels/cpu/ops_norm.cc); dweight and
// dbias through the fixed-order column sums of device_common.cuh.
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/norm.cuh"

namespace strata::kernels::cuda {
namespace {

using detail::block_sum;
using detail::kBlock;
using detail::load;
using detail::store;

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                                         const T* bias, int64_t C, float eps) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const T* x = inp + n * C;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) sum += load(x + i);
  const float m = block_sum(sum, scratch) / static_cast<float>(C);
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float d = load(x + i) - m;
    sq += d * d;
  }
  const float s = 1.0f / sqrtf(block_sum(sq, scratch) / static_cast<float>(C) + eps);
  T* y = out + n * C;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float b = bias != nullptr ? load(bias + i) : 0.0f;
    store(y + i, (load(x + i) - m) * s * load(weight + i) + b);
  }
  if (threadIdx.x == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename T>
__global__ void layernorm_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight, const float* mean,
                                      const float* rstd, int64_t C) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const T* x = inp + n * C;
  const T* dy = dout + n * C;
  const float m = mean[n], s = rstd[n];
  float sum_dnorm = 0.0f, sum_dnorm_norm = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float norm = (load(x + i) - m) * s;
    const float dnorm = load(weight + i) * load(dy + i);
    sum_dnorm += dnorm;
    sum_dnorm_norm += dnorm * norm;
  }
  const float dnorm_mean = block_sum(sum_dnorm, scratch) / static_cast<float>(C);
  const float dnorm_norm_mean = block_sum(sum_dnorm_norm, scratch) / static_cast<float>(C);
  T* dx = dinp + n * C;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float norm = (load(x + i) - m) * s;
    const float dnorm = load(weight + i) * load(dy + i);
    detail::add_to(dx + i, (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
  }
}

// (inp - mean) * rstd * dout at (n, c): LayerNorm's dweight term. RMSNorm passes mean == null.
template <typename T>
struct NormWeightGrad {
  const T* inp;
  const T* dout;
  const float* mean;
  const float* rstd;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const {
    const float m = mean != nullptr ? mean[n] : 0.0f;
    return (load(inp + n * C + c) - m) * rstd[n] * load(dout + n * C + c);
  }
};

template <typename T>
struct RowValue {
  const T* data;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const { return load(data + n * C + c); }
};

template <typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, const T* weight, int64_t C, float eps) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const T* x = inp + n * C;
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float v = load(x + i);
    sq += v * v;
  }
  const float s = 1.0f / sqrtf(block_sum(sq, scratch) / static_cast<float>(C) + eps);
  T* y = out + n * C;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) store(y + i, load(x + i) * s * load(weight + i));
  if (threadIdx.x == 0) rstd[n] = s;
}

template <typename T>
__global__ void rmsnorm_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight, const float* rstd,
                                    int64_t C) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const T* x = inp + n * C;
  const T* dy = dout + n * C;
  const float s = rstd[n];
  float sum_dnorm_norm = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    sum_dnorm_norm += load(weight + i) * load(dy + i) * (load(x + i) * s);
  }
  const float dnorm_norm_mean = block_sum(sum_dnorm_norm, scratch) / static_cast<float>(C);
  T* dx = dinp + n * C;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    detail::add_to(dx + i, (load(weight + i) * load(dy + i) - load(x + i) * s * dnorm_norm_mean) * s);
  }
}

bool valid_shape(int64_t N, int64_t C) { return detail::valid_rows(N) && C >= 0; }

}  // namespace

template <typename T>
cudaError_t layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                              int64_t N, int64_t C, float eps, cudaStream_t stream) {
  if (!valid_shape(N, C)) return cudaErrorInvalidValue;
  if (N == 0 || C == 0) return cudaSuccess;
  layernorm_forward_kernel<<<static_cast<unsigned>(N), kBlock, 0, stream>>>(out, mean, rstd, inp, weight, bias, C,
                                                                            eps);
  return cudaGetLastError();
}

template <typename T>
cudaError_t layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                               const float* mean, const float* rstd, int64_t N, int64_t C, cudaStream_t stream) {
  if (!valid_shape(N, C)) return cudaErrorInvalidValue;
  if (N == 0 || C == 0) return cudaSuccess;
  if (dinp != nullptr) {
    layernorm_dinp_kernel<<<static_cast<unsigned>(N), kBlock, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, C);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (dweight != nullptr) {
    const cudaError_t e = detail::add_column_sums(dweight, N, C, NormWeightGrad<T>{inp, dout, mean, rstd, C}, stream);
    if (e != cudaSuccess) return e;
  }
  if (dbias != nullptr) return detail::add_column_sums(dbias, N, C, RowValue<T>{dout, C}, stream);
  return cudaSuccess;
}

template <typename T>
cudaError_t rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C, float eps,
                            cudaStream_t stream) {
  if (!valid_shape(N, C)) return cudaErrorInvalidValue;
  if (N == 0 || C == 0) return cudaSuccess;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(N), kBlock, 0, stream>>>(out, rstd, inp, weight, C, eps);
  return cudaGetLastError();
}

template <typename T>
cudaError_t rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const float* rstd,
                             int64_t N, int64_t C, cudaStream_t stream) {
  if (!valid_shape(N, C)) return cudaErrorInvalidValue;
  if (N == 0 || C == 0) return cudaSuccess;
  if (dinp != nullptr) {
    rmsnorm_dinp_kernel<<<static_cast<unsigned>(N), kBlock, 0, stream>>>(dinp, dout, inp, weight, rstd, C);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (dweight != nullptr) {
    return detail::add_column_sums(dweight, N, C, NormWeightGrad<T>{inp, dout, nullptr, rstd, C}, stream);
  }
  return cudaSuccess;
}

#define STRATA_INSTANTIATE_NORM(T)                                                                               \
  template cudaError_t layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t, int64_t,  \
                                            float, cudaStream_t);                                                \
  template cudaError_t layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const float*, const float*, \
                                             int64_t, int64_t, cudaStream_t);                                    \
  template cudaError_t rmsnorm_forward<T>(T*, float*, const T*, const T*, int64_t, int64_t, float, cudaStream_t); \
  template cudaError_t rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const float*, int64_t, int64_t,  \
                                           cudaStream_t);
STRATA_FOR_EACH_ELEMENT_TYPE(STRATA_INSTANTIATE_NORM)
#undef STRATA_INSTANTIATE_NORM

}  // namespace strata::kernels::cuda
