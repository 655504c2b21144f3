// Cross-entropy kernels (contract in loss.cuh): one block per row (max, then sum of exp, both
// block-wide fp32 reductions), a single-block pass summing the row losses in row order (double),
// and a per-row gradient writer shared by the accumulating and in-place backward.
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/loss.cuh"

namespace strata::kernels::cuda {
namespace {

using detail::kBlock;
using detail::load;

template <typename T>
__global__ void lse_kernel(float* lse, float* losses, const T* logits, const int32_t* targets, int64_t V,
                           int64_t ld) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const T* row = logits + n * ld;
  float max_logit = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) max_logit = fmaxf(max_logit, load(row + v));
  max_logit = detail::block_max(max_logit, scratch);
  float sum = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += expf(load(row + v) - max_logit);
  sum = detail::block_sum(sum, scratch);
  if (threadIdx.x == 0) {
    const float l = max_logit + logf(sum);
    lse[n] = l;
    const int32_t target = targets[n];
    losses[n] = target == kIgnoreTarget ? 0.0f : l - load(row + target);
  }
}

// One block: each thread sums rows tid, tid + kBlock, ... in double, then thread 0 adds the
// partials in thread order.
__global__ void loss_sum_kernel(CrossEntropyResult* result, const float* losses, const int32_t* targets, int64_t N) {
  __shared__ double partial_sum[kBlock];
  __shared__ int64_t partial_count[kBlock];
  double sum = 0.0;
  int64_t count = 0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) {
    if (targets[n] != kIgnoreTarget) {
      sum += losses[n];
      ++count;
    }
  }
  partial_sum[threadIdx.x] = sum;
  partial_count[threadIdx.x] = count;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0.0;
  int64_t valid = 0;
  for (int i = 0; i < kBlock; ++i) {
    total += partial_sum[i];
    valid += partial_count[i];
  }
  result->loss_sum = total;
  result->valid_count = valid;
  result->mean_loss = valid > 0 ? static_cast<float>(total / static_cast<double>(valid)) : 0.0f;
}

// dst row = (or +=) dloss * (exp(logit - lse) - onehot); ignored rows: left alone when
// accumulating, zeroed in place. dst may equal logits when !kAccumulate. Rows start ld apart.
template <typename T, bool kAccumulate>
__global__ void gradient_kernel(T* dst, const T* logits, const float* lse, const int32_t* targets, float dloss,
                                int64_t V, int64_t ld) {
  const int64_t n = blockIdx.x;
  const int32_t target = targets[n];
  T* out = dst + n * ld;
  if (target == kIgnoreTarget) {
    if (!kAccumulate) {
      for (int64_t v = threadIdx.x; v < V; v += blockDim.x) detail::store(out + v, 0.0f);
    }
    return;
  }
  const T* row = logits + n * ld;
  const float l = lse[n];
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    const float p = expf(load(row + v) - l);
    const float g = dloss * (p - (v == target ? 1.0f : 0.0f));
    if constexpr (kAccumulate) {
      detail::add_to(out + v, g);
    } else {
      detail::store(out + v, g);
    }
  }
}

bool valid_shape(int64_t N, int64_t V, int64_t ld) { return detail::valid_rows(N) && V >= 1 && ld >= V; }

int64_t row_stride(int64_t V, int64_t logits_stride) { return logits_stride == 0 ? V : logits_stride; }

}  // namespace

template <typename T>
cudaError_t crossentropy_forward(float* lse, float* losses, CrossEntropyResult* result, const T* logits,
                                 const int32_t* targets, int64_t N, int64_t V, cudaStream_t stream,
                                 int64_t logits_stride) {
  const int64_t ld = row_stride(V, logits_stride);
  if (!valid_shape(N, V, ld) || losses == nullptr) return cudaErrorInvalidValue;
  if (N > 0) {
    lse_kernel<<<static_cast<unsigned>(N), kBlock, 0, stream>>>(lse, losses, logits, targets, V, ld);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (result == nullptr) return cudaSuccess;
  loss_sum_kernel<<<1, kBlock, 0, stream>>>(result, losses, targets, N);
  return cudaGetLastError();
}

template <typename T>
cudaError_t crossentropy_backward(T* dlogits, const T* logits, const float* lse, const int32_t* targets, float dloss,
                                  int64_t N, int64_t V, cudaStream_t stream, int64_t logits_stride) {
  const int64_t ld = row_stride(V, logits_stride);
  if (!valid_shape(N, V, ld)) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  gradient_kernel<T, true>
      <<<static_cast<unsigned>(N), kBlock, 0, stream>>>(dlogits, logits, lse, targets, dloss, V, ld);
  return cudaGetLastError();
}

template <typename T>
cudaError_t crossentropy_backward_inplace(T* logits_to_dlogits, const float* lse, const int32_t* targets,
                                          float dloss, int64_t N, int64_t V, cudaStream_t stream,
                                          int64_t logits_stride) {
  const int64_t ld = row_stride(V, logits_stride);
  if (!valid_shape(N, V, ld)) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  gradient_kernel<T, false><<<static_cast<unsigned>(N), kBlock, 0, stream>>>(logits_to_dlogits, logits_to_dlogits,
                                                                              lse, targets, dloss, V, ld);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE_LOSS(T)                                                                                \
  template cudaError_t crossentropy_forward<T>(float*, float*, CrossEntropyResult*, const T*, const int32_t*,     \
                                               int64_t, int64_t, cudaStream_t, int64_t);                          \
  template cudaError_t crossentropy_backward<T>(T*, const T*, const float*, const int32_t*, float, int64_t,       \
                                                int64_t, cudaStream_t, int64_t);                                  \
  template cudaError_t crossentropy_backward_inplace<T>(T*, const float*, const int32_t*, float, int64_t, int64_t, \
                                                        cudaStream_t, int64_t);
STRATA_FOR_EACH_ELEMENT_TYPE(STRATA_INSTANTIATE_LOSS)
#undef STRATA_INSTANTIATE_LOSS

}  // namespace strata::kernels::cuda
