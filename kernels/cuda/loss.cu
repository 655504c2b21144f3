// Cross-entropy kernels (contract in loss.cuh): one block per row, one pass over the row in which
// each thread keeps a running (max, sum of exp) pair, the pairs combined by block-wide fp32
// reductions (max, then the rescaled sums); a single-block pass summing the row losses in row
// order (double); a per-row gradient writer shared by the accumulating and in-place backward; and
// both per row in one kernel, the gradient written over the logits.
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

// log sum exp of a row of V logits, returned to every thread of the block (which all call it).
// Each thread takes the row's 16-byte groups g = threadIdx.x, + blockDim.x, ..., each group's
// elements in order (kVector: a group is one access); the order, and so every bit, is the same for
// any row stride or alignment. scratch: 32 floats of shared memory. kStage: the row is also copied
// to `stage` (shared memory, 16-byte aligned, whole groups).
template <typename T, bool kVector, bool kStage = false>
__device__ __forceinline__ float row_lse(const T* row, int64_t V, float* scratch, T* stage = nullptr) {
  RunningSoftmax run;
  const int64_t groups = detail::groups_of<T>(V);
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    float x[kGroup<T>];
    load_group<T, kVector>(x, row, g, V);
    if constexpr (kStage) store_group<T, true>(stage, x, g, V);  // exact: x came from T
#pragma unroll
    for (int i = 0; i < kGroup<T>; ++i) {
      if (g * kGroup<T> + i < V) run.add(x[i]);
    }
  }
  const float max_logit = detail::block_max(run.max, scratch);
  const float mine = run.sum == 0.0f ? 0.0f : run.sum * expf(run.max - max_logit);
  const float sum = detail::block_sum(mine, scratch);
  return max_logit + logf(sum);
}

// Row n's lse and loss, by thread 0.
template <typename T>
__device__ __forceinline__ void write_row_loss(float* lse, float* losses, const T* row, float l, int32_t target,
                                               int64_t n) {
  if (threadIdx.x != 0) return;
  lse[n] = l;
  losses[n] = target == kIgnoreTarget ? 0.0f : l - load(row + target);
}

template <typename T, bool kVector>
__global__ void lse_kernel(float* lse, float* losses, const T* logits, const int32_t* targets, int64_t V,
                           int64_t ld) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const T* row = logits + n * ld;
  write_row_loss(lse, losses, row, row_lse<T, kVector>(row, V, scratch), targets[n], n);
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

// out row = (or +=) dloss * (exp(logit - l) - onehot) of the logits in `row`; an ignored row: left
// alone when accumulating, zeroed in place. out may equal row when !kAccumulate. A thread takes
// 16-byte groups as row_lse (kVectorIn: row's are whole accesses, kVectorOut: out's). All the
// block's threads.
template <typename T, bool kAccumulate, bool kVectorIn, bool kVectorOut>
__device__ __forceinline__ void write_row_gradient(T* out, const T* row, float l, int32_t target, float dloss,
                                                   int64_t V) {
  const int64_t groups = detail::groups_of<T>(V);
  if (target == kIgnoreTarget) {
    if (!kAccumulate) {
      float zeros[kGroup<T>] = {};
      for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) store_group<T, kVectorOut>(out, zeros, g, V);
    }
    return;
  }
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    float x[kGroup<T>];
    load_group<T, kVectorIn>(x, row, g, V);
    float old[kGroup<T>];
    if constexpr (kAccumulate) load_group<T, kVectorOut>(old, out, g, V);
#pragma unroll
    for (int i = 0; i < kGroup<T>; ++i) {
      const float grad = dloss * (expf(x[i] - l) - (g * kGroup<T> + i == target ? 1.0f : 0.0f));
      x[i] = kAccumulate ? old[i] + grad : grad;
    }
    store_group<T, kVectorOut>(out, x, g, V);
  }
}

// Rows start ld apart in dst and logits.
template <typename T, bool kAccumulate, bool kVector>
__global__ void gradient_kernel(T* dst, const T* logits, const float* lse, const int32_t* targets, float dloss,
                                int64_t V, int64_t ld) {
  const int64_t n = blockIdx.x;
  write_row_gradient<T, kAccumulate, kVector, kVector>(dst + n * ld, logits + n * ld, lse[n], targets[n], dloss, V);
}

// A row staged in shared memory by loss_and_gradient_kernel: at most this many bytes, so two blocks
// fit a Hopper multiprocessor (228 KiB): GPT-2's 50257 bf16 logits are 98 KiB.
constexpr size_t kMaxStagedRowBytes = 112 * 1024;

// lse_kernel, then gradient_kernel in place, by one block a row: the row is read from memory once
// and written once (the two kernels read it twice). kStaged: the first pass copies it into the
// block's dynamic shared memory (groups_of(V) x 16 bytes) and the second reads it there; else the
// second reads it again, from L2 if it is still there. The same bits as the two kernels: the same
// row_lse, the same gradient of the same l.
template <typename T, bool kVector, bool kStaged>
__global__ void loss_and_gradient_kernel(float* lse, float* losses, T* logits_to_dlogits, const int32_t* targets,
                                         float dloss, int64_t V, int64_t ld) {
  __shared__ float scratch[32];
  extern __shared__ __align__(16) unsigned char staged_bytes[];
  T* const staged = reinterpret_cast<T*>(staged_bytes);
  const int64_t n = blockIdx.x;
  T* row = logits_to_dlogits + n * ld;
  const int32_t target = targets[n];
  const float l = row_lse<T, kVector, kStaged>(row, V, scratch, staged);
  write_row_loss(lse, losses, row, l, target, n);
  __syncthreads();  // thread 0 has read the target's logit before any thread overwrites it (and
                    // every staged group is in)
  if constexpr (kStaged) {
    write_row_gradient<T, false, true, kVector>(row, staged, l, target, dloss, V);
  } else {
    write_row_gradient<T, false, kVector, kVector>(row, row, l, target, dloss, V);
  }
}

// Launches loss_and_gradient_kernel<T, kVector, staged or not> over N rows.
template <typename T, bool kVector>
cudaError_t launch_loss_and_gradient(float* lse, float* losses, T* logits_to_dlogits, const int32_t* targets,
                                     float dloss, int64_t N, int64_t V, int64_t ld, cudaStream_t stream) {
  const size_t staged = static_cast<size_t>(detail::groups_of<T>(V)) * 16;
  if (staged <= kMaxStagedRowBytes) {
    const auto kernel = loss_and_gradient_kernel<T, kVector, true>;
    bool fits = staged <= 48 * 1024;
    if (!fits) {
      fits = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(staged)) ==
             cudaSuccess;
      if (!fits) (void)cudaGetLastError();  // a device with less shared memory: the unstaged kernel
    }
    if (fits) {
      kernel<<<static_cast<unsigned>(N), kBlock, staged, stream>>>(lse, losses, logits_to_dlogits, targets, dloss, V,
                                                                   ld);
      return cudaGetLastError();
    }
  }
  loss_and_gradient_kernel<T, kVector, false>
      <<<static_cast<unsigned>(N), kBlock, 0, stream>>>(lse, losses, logits_to_dlogits, targets, dloss, V, ld);
  return cudaGetLastError();
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

template <typename T>
cudaError_t crossentropy_forward_backward_inplace(float* lse, float* losses, CrossEntropyResult* result,
                                                  T* logits_to_dlogits, const int32_t* targets, float dloss,
                                                  int64_t N, int64_t V, cudaStream_t stream, int64_t logits_stride) {
  const int64_t ld = row_stride(V, logits_stride);
  if (!valid_shape(N, V, ld) || losses == nullptr) return cudaErrorInvalidValue;
  if (N > 0) {
    const cudaError_t e =
        detail::vector_rows<T>(ld, {logits_to_dlogits})
            ? launch_loss_and_gradient<T, true>(lse, losses, logits_to_dlogits, targets, dloss, N, V, ld, stream)
            : launch_loss_and_gradient<T, false>(lse, losses, logits_to_dlogits, targets, dloss, N, V, ld, stream);
    if (e != cudaSuccess) return e;
  }
  if (result == nullptr) return cudaSuccess;
  loss_sum_kernel<<<1, kBlock, 0, stream>>>(result, losses, targets, N);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE_LOSS(T)                                                                                \
  template cudaError_t crossentropy_forward<T>(float*, float*, CrossEntropyResult*, const T*, const int32_t*,     \
                                               int64_t, int64_t, cudaStream_t, int64_t);                          \
  template cudaError_t crossentropy_backward<T>(T*, const T*, const float*, const int32_t*, float, int64_t,       \
                                                int64_t, cudaStream_t, int64_t);                                  \
  template cudaError_t crossentropy_backward_inplace<T>(T*, const float*, const int32_t*, float, int64_t, int64_t, \
                                                        cudaStream_t, int64_t);                                   \
  template cudaError_t crossentropy_forward_backward_inplace<T>(float*, float*, CrossEntropyResult*, T*,         \
                                                                const int32_t*, float, int64_t, int64_t,         \
                                                                cudaStream_t, int64_t);
STRATA_FOR_EACH_ELEMENT_TYPE(STRATA_INSTANTIATE_LOSS)
#undef STRATA_INSTANTIATE_LOSS

}  // namespace strata::kernels::cuda
