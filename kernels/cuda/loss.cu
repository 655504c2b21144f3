// Cross-entropy kernels (contract in loss.cuh): one block per row, one pass over the row in which
// each thread keeps a running (max, sum of exp) pair, the pairs combined by block-wide fp32
// reductions (max, then the rescaled sums); a single-block pass summing the row losses in row
// order (double); and a per-row gradient writer shared by the accumulating and in-place backward.
// Rows whose start and stride keep 16-byte vectors are read (and written) a vector per access.
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/loss.cuh"

namespace strata::kernels::cuda {
namespace {

using detail::kBlock;
using detail::load;

using detail::kGroup;
using detail::load_group;
using detail::store_group;

// The running (max, sum of exp(x - max)) of a thread's values, one value at a time.
struct RunningSoftmax {
  float max = -INFINITY;
  float sum = 0.0f;
  __device__ __forceinline__ void add(float x) {
    if (x == -INFINITY) return;  // exp(-inf - max) adds 0 (and -inf - -inf would be NaN)
    if (x > max) {
      sum = sum * expf(max - x) + 1.0f;  // exp(-inf) = 0 on the first value
      max = x;
    } else {
      sum += expf(x - max);
    }
  }
};

// Each thread takes the row's 16-byte groups g = threadIdx.x, + blockDim.x, ..., each group's
// elements in order (kVector: a group is one access); the order, and so every bit, is the same for
// any row stride or alignment.
template <typename T, bool kVector>
__global__ void lse_kernel(float* lse, float* losses, const T* logits, const int32_t* targets, int64_t V,
                           int64_t ld) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const T* row = logits + n * ld;
  RunningSoftmax run;
  const int64_t groups = detail::groups_of<T>(V);
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    float x[kGroup<T>];
    load_group<T, kVector>(x, row, g, V);
#pragma unroll
    for (int i = 0; i < kGroup<T>; ++i) {
      if (g * kGroup<T> + i < V) run.add(x[i]);
    }
  }
  const float max_logit = detail::block_max(run.max, scratch);
  const float mine = run.sum == 0.0f ? 0.0f : run.sum * expf(run.max - max_logit);
  const float sum = detail::block_sum(mine, scratch);
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
// accumulating, zeroed in place. dst may equal logits when !kAccumulate. Rows start ld apart; a
// thread takes 16-byte groups of the row as lse_kernel (dst's rows as well).
template <typename T, bool kAccumulate, bool kVector>
__global__ void gradient_kernel(T* dst, const T* logits, const float* lse, const int32_t* targets, float dloss,
                                int64_t V, int64_t ld) {
  const int64_t n = blockIdx.x;
  const int32_t target = targets[n];
  T* out = dst + n * ld;
  const int64_t groups = detail::groups_of<T>(V);
  if (target == kIgnoreTarget) {
    if (!kAccumulate) {
      float zeros[kGroup<T>] = {};
      for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) store_group<T, kVector>(out, zeros, g, V);
    }
    return;
  }
  const T* row = logits + n * ld;
  const float l = lse[n];
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    float x[kGroup<T>];
    load_group<T, kVector>(x, row, g, V);
    float old[kGroup<T>];
    if constexpr (kAccumulate) load_group<T, kVector>(old, out, g, V);
#pragma unroll
    for (int i = 0; i < kGroup<T>; ++i) {
      const float grad = dloss * (expf(x[i] - l) - (g * kGroup<T> + i == target ? 1.0f : 0.0f));
      x[i] = kAccumulate ? old[i] + grad : grad;
    }
    store_group<T, kVector>(out, x, g, V);
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
    if (detail::vector_rows<T>(ld, {logits})) {
      lse_kernel<T, true><<<static_cast<unsigned>(N), kBlock, 0, stream>>>(lse, losses, logits, targets, V, ld);
    } else {
      lse_kernel<T, false><<<static_cast<unsigned>(N), kBlock, 0, stream>>>(lse, losses, logits, targets, V, ld);
    }
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
  if (detail::vector_rows<T>(ld, {dlogits, logits})) {
    gradient_kernel<T, true, true>
        <<<static_cast<unsigned>(N), kBlock, 0, stream>>>(dlogits, logits, lse, targets, dloss, V, ld);
  } else {
    gradient_kernel<T, true, false>
        <<<static_cast<unsigned>(N), kBlock, 0, stream>>>(dlogits, logits, lse, targets, dloss, V, ld);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t crossentropy_backward_inplace(T* logits_to_dlogits, const float* lse, const int32_t* targets,
                                          float dloss, int64_t N, int64_t V, cudaStream_t stream,
                                          int64_t logits_stride) {
  const int64_t ld = row_stride(V, logits_stride);
  if (!valid_shape(N, V, ld)) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (detail::vector_rows<T>(ld, {logits_to_dlogits})) {
    gradient_kernel<T, false, true><<<static_cast<unsigned>(N), kBlock, 0, stream>>>(
        logits_to_dlogits, logits_to_dlogits, lse, targets, dloss, V, ld);
  } else {
    gradient_kernel<T, false, false><<<static_cast<unsigned>(N), kBlock, 0, stream>>>(
        logits_to_dlogits, logits_to_dlogits, lse, targets, dloss, V, ld);
  }
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
