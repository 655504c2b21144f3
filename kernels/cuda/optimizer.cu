// Adam/AdamW update, squared gradient norm and finite check on the GPU (contract in optimizer.cuh).
// The update spells every operation as an explicitly rounded intrinsic (__fmul_rn, __fadd_rn,
// __fsub_rn, __fdiv_rn, __fsqrt_rn) so nvcc cannot contract mul+add into FMA: the same unfused
// IEEE sequence as kernels/cpu/adam_kernel.h's adam_element, hence the same bits.
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/optimizer.cuh"

namespace strata::kernels::cuda {
namespace {

using detail::kBlock;
using detail::load;

template <FloatFormat G>
__device__ __forceinline__ float load_grad(const void* grad, size_t i) {
  if constexpr (G == FloatFormat::f32) return static_cast<const float*>(grad)[i];
  if constexpr (G == FloatFormat::bf16) return load(static_cast<const __nv_bfloat16*>(grad) + i);
  if constexpr (G == FloatFormat::f16) return load(static_cast<const __half*>(grad) + i);
}

__device__ __forceinline__ size_t thread_index() { return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ size_t thread_count() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

template <FloatFormat G, CopyOut O>
__global__ void adam_kernel(AdamConstants c, AdamSpan s) {
  for (size_t i = thread_index(); i < s.n; i += thread_count()) {
    float p = s.param[i], m = s.m[i], v = s.v[i];
    float g = __fmul_rn(load_grad<G>(s.grad, i), c.grad_scale);
    if (c.decoupled) {
      p = __fsub_rn(p, __fmul_rn(c.lr_decay, p));
    } else {
      g = __fadd_rn(g, __fmul_rn(c.l2, p));
    }
    m = __fadd_rn(__fmul_rn(c.beta1, m), __fmul_rn(c.one_minus_beta1, g));
    v = __fadd_rn(__fmul_rn(c.beta2, v), __fmul_rn(c.one_minus_beta2, __fmul_rn(g, g)));
    const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(v), c.inv_sqrt_bias2), c.eps);
    p = __fsub_rn(p, __fmul_rn(c.step_size, __fdiv_rn(m, denom)));
    s.m[i] = m;
    s.v[i] = v;
    s.param[i] = p;
    if constexpr (O == CopyOut::bf16) detail::store(static_cast<__nv_bfloat16*>(s.copy_out) + i, p);
    if constexpr (O == CopyOut::f16) detail::store(static_cast<__half*>(s.copy_out) + i, p);
  }
}

template <FloatFormat G, CopyOut O>
cudaError_t launch_adam(const AdamConstants& c, const AdamSpan& s, cudaStream_t stream) {
  adam_kernel<G, O><<<detail::grid_for(static_cast<int64_t>(s.n)), kBlock, 0, stream>>>(c, s);
  return cudaGetLastError();
}

template <FloatFormat G>
cudaError_t launch_adam_copy(const AdamConstants& c, CopyOut copy, const AdamSpan& s, cudaStream_t stream) {
  switch (copy) {
    case CopyOut::none: return launch_adam<G, CopyOut::none>(c, s, stream);
    case CopyOut::bf16: return launch_adam<G, CopyOut::bf16>(c, s, stream);
    case CopyOut::f16: return launch_adam<G, CopyOut::f16>(c, s, stream);
  }
  return cudaErrorInvalidValue;
}

// Block b sums elements b * kBlock + tid + k * (kGradNormScratchFloats * kBlock), in order per
// thread, then block-wide; partial[b] is written.
template <FloatFormat G>
__global__ void norm_partials_kernel(float* partial, const void* grad, size_t n) {
  __shared__ float scratch[32];
  float sum = 0.0f;
  for (size_t i = thread_index(); i < n; i += thread_count()) {
    const float g = load_grad<G>(grad, i);
    sum += g * g;
  }
  sum = detail::block_sum(sum, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void norm_finish_kernel(float* sum_squares, const float* partial) {
  __shared__ float scratch[32];
  const float total = detail::block_sum(partial[threadIdx.x], scratch);
  if (threadIdx.x == 0) *sum_squares += total;
}

template <FloatFormat G>
__global__ void finite_kernel(int32_t* all_finite, const void* grad, size_t n) {
  for (size_t i = thread_index(); i < n; i += thread_count()) {
    if (!isfinite(load_grad<G>(grad, i))) *all_finite = 0;  // every writer stores the same value
  }
}

}  // namespace

cudaError_t adam_update(const AdamConstants& constants, const AdamFormats& formats, const AdamSpan& span,
                        cudaStream_t stream) {
  if (span.n == 0) return cudaSuccess;
  if (formats.copy != CopyOut::none && span.copy_out == nullptr) return cudaErrorInvalidValue;
  switch (formats.grad) {
    case FloatFormat::f32: return launch_adam_copy<FloatFormat::f32>(constants, formats.copy, span, stream);
    case FloatFormat::bf16: return launch_adam_copy<FloatFormat::bf16>(constants, formats.copy, span, stream);
    case FloatFormat::f16: return launch_adam_copy<FloatFormat::f16>(constants, formats.copy, span, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t grad_norm_squared(float* sum_squares, float* scratch, const void* grad, FloatFormat format, size_t n,
                              cudaStream_t stream) {
  static_assert(kGradNormScratchFloats % 32 == 0 && kGradNormScratchFloats <= 1024);
  if (n == 0) return cudaSuccess;
  constexpr unsigned blocks = kGradNormScratchFloats;
  switch (format) {
    case FloatFormat::f32: norm_partials_kernel<FloatFormat::f32><<<blocks, kBlock, 0, stream>>>(scratch, grad, n); break;
    case FloatFormat::bf16: norm_partials_kernel<FloatFormat::bf16><<<blocks, kBlock, 0, stream>>>(scratch, grad, n); break;
    case FloatFormat::f16: norm_partials_kernel<FloatFormat::f16><<<blocks, kBlock, 0, stream>>>(scratch, grad, n); break;
    default: return cudaErrorInvalidValue;
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  norm_finish_kernel<<<1, blocks, 0, stream>>>(sum_squares, scratch);
  return cudaGetLastError();
}

cudaError_t grad_check_finite(int32_t* all_finite, const void* grad, FloatFormat format, size_t n,
                              cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const unsigned blocks = detail::grid_for(static_cast<int64_t>(n));
  switch (format) {
    case FloatFormat::f32: finite_kernel<FloatFormat::f32><<<blocks, kBlock, 0, stream>>>(all_finite, grad, n); break;
    case FloatFormat::bf16: finite_kernel<FloatFormat::bf16><<<blocks, kBlock, 0, stream>>>(all_finite, grad, n); break;
    case FloatFormat::f16: finite_kernel<FloatFormat::f16><<<blocks, kBlock, 0, stream>>>(all_finite, grad, n); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace strata::kernels::cuda
