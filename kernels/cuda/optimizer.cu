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

// adam_kernel.h's adam_element for one element: the new weight from p and the gradient g (before
// grad_scale), m and v updated in place.
__device__ __forceinline__ float adam_element(const AdamConstants& c, float p, float g, float& m, float& v) {
  g = __fmul_rn(g, c.grad_scale);
  if (c.decoupled) {
    p = __fsub_rn(p, __fmul_rn(c.lr_decay, p));
  } else {
    g = __fadd_rn(g, __fmul_rn(c.l2, p));
  }
  m = __fadd_rn(__fmul_rn(c.beta1, m), __fmul_rn(c.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(c.beta2, v), __fmul_rn(c.one_minus_beta2, __fmul_rn(g, g)));
  const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(v), c.inv_sqrt_bias2), c.eps);
  return __fsub_rn(p, __fmul_rn(c.step_size, __fdiv_rn(m, denom)));
}

template <FloatFormat G, CopyOut O>
__global__ void adam_kernel(AdamConstants c, AdamSpan s) {
  for (size_t i = thread_index(); i < s.n; i += thread_count()) {
    float m = s.m[i], v = s.v[i];
    const float p = adam_element(c, s.param[i], load_grad<G>(s.grad, i), m, v);
    s.m[i] = m;
    s.v[i] = v;
    s.param[i] = p;
    if constexpr (O == CopyOut::bf16) detail::store(static_cast<__nv_bfloat16*>(s.copy_out) + i, p);
    if constexpr (O == CopyOut::f16) detail::store(static_cast<__half*>(s.copy_out) + i, p);
  }
}

// One pass's launch for the gradient and copy-out formats given at run time: Launch<G, O>::run.
template <template <FloatFormat, CopyOut> class Launch, class Span>
cudaError_t launch_for_formats(const AdamConstants& c, const AdamFormats& formats, const Span& s,
                               cudaStream_t stream) {
  if (s.n == 0) return cudaSuccess;
  if (formats.copy != CopyOut::none && s.copy_out == nullptr) return cudaErrorInvalidValue;
  const auto with_copy = [&]<FloatFormat G>() -> cudaError_t {
    switch (formats.copy) {
      case CopyOut::none: return Launch<G, CopyOut::none>::run(c, s, stream);
      case CopyOut::bf16: return Launch<G, CopyOut::bf16>::run(c, s, stream);
      case CopyOut::f16: return Launch<G, CopyOut::f16>::run(c, s, stream);
    }
    return cudaErrorInvalidValue;
  };
  switch (formats.grad) {
    case FloatFormat::f32: return with_copy.template operator()<FloatFormat::f32>();
    case FloatFormat::bf16: return with_copy.template operator()<FloatFormat::bf16>();
    case FloatFormat::f16: return with_copy.template operator()<FloatFormat::f16>();
  }
  return cudaErrorInvalidValue;
}

template <FloatFormat G, CopyOut O>
struct LaunchAdam {
  static cudaError_t run(const AdamConstants& c, const AdamSpan& s, cudaStream_t stream) {
    adam_kernel<G, O><<<detail::grid_for(static_cast<int64_t>(s.n)), kBlock, 0, stream>>>(c, s);
    return cudaGetLastError();
  }
};

// ---- 8-bit moments (kernels/cpu/adam8bit_kernel.h's arithmetic) -------------------------------
static_assert(kAdam8bitBlock == 256 && kBlock == 256, "a thread block per quantization block");

// The integer q with (q - 0.5)^2 <= z < (q + 0.5)^2 for 0 <= z < 255.5^2: sqrt(z) correctly rounded
// is within half an ulp of the root, so floor of it is q or q - 1 and the exact comparison (the
// threshold is exact in fp32) settles it -- the CPU's nearest_root reaches the same q from its
// estimate.
__device__ __forceinline__ float nearest_root(float z) {
  const float low = floorf(__fsqrt_rn(z));
  const float half_up = __fadd_rn(low, 0.5f);
  return z >= __fmul_rn(half_up, half_up) ? __fadd_rn(low, 1.0f) : low;
}

template <FloatFormat G, CopyOut O>
__global__ void adam8bit_kernel(AdamConstants c, Adam8bitSpan s) {
  __shared__ float m_max[kBlock / 32], v_max[kBlock / 32];
  __shared__ float m_to_code, v_to_code;
  const size_t block = blockIdx.x;
  const size_t i = block * kAdam8bitBlock + threadIdx.x;
  const bool in = i < s.n;
  float m = 0.0f, v = 0.0f;
  if (in) {
    const float m_factor = __fmul_rn(s.m_scale[block], kMDequant);
    const float v_factor = __fmul_rn(s.v_scale[block], kVDequant);
    const float q = static_cast<float>(s.m_code[i]);
    const float u = static_cast<float>(s.v_code[i]);
    const float u2 = __fmul_rn(u, u);
    m = __fmul_rn(__fmul_rn(q, fabsf(q)), m_factor);
    v = __fmul_rn(__fmul_rn(u2, u2), v_factor);
    const float p = adam_element(c, s.param[i], load_grad<G>(s.grad, i), m, v);
    s.param[i] = p;
    if constexpr (O == CopyOut::bf16) detail::store(static_cast<__nv_bfloat16*>(s.copy_out) + i, p);
    if constexpr (O == CopyOut::f16) detail::store(static_cast<__half*>(s.copy_out) + i, p);
  }
  // The block's absmax of m and of v (max is exact in any order).
  float mm = fabsf(m), vm = v;
  for (int offset = 16; offset > 0; offset /= 2) {
    mm = fmaxf(mm, __shfl_down_sync(0xffffffffu, mm, offset));
    vm = fmaxf(vm, __shfl_down_sync(0xffffffffu, vm, offset));
  }
  if (threadIdx.x % 32 == 0) {
    m_max[threadIdx.x / 32] = mm;
    v_max[threadIdx.x / 32] = vm;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float m_absmax = 0.0f, v_absmax = 0.0f;
    for (int w = 0; w < kBlock / 32; ++w) {
      m_absmax = fmaxf(m_absmax, m_max[w]);
      v_absmax = fmaxf(v_absmax, v_max[w]);
    }
    const float m_s = m_absmax >= kMinMScale ? m_absmax : 0.0f;
    const float v_root = __fsqrt_rn(v_absmax);
    s.m_scale[block] = m_s;
    s.v_scale[block] = v_absmax;
    m_to_code = m_s > 0.0f ? __fdiv_rn(kMCodeMax * kMCodeMax, m_s) : 0.0f;
    v_to_code = v_root > 0.0f ? __fdiv_rn(kVCodeMax * kVCodeMax, v_root) : 0.0f;
  }
  __syncthreads();
  if (!in) return;
  const float q = nearest_root(__fmul_rn(fabsf(m), m_to_code));
  s.m_code[i] = static_cast<int8_t>(copysignf(q, m));
  s.v_code[i] = static_cast<uint8_t>(nearest_root(__fmul_rn(__fsqrt_rn(v), v_to_code)));
}

template <FloatFormat G, CopyOut O>
struct LaunchAdam8bit {
  static cudaError_t run(const AdamConstants& c, const Adam8bitSpan& s, cudaStream_t stream) {
    const size_t blocks = adam8bit_blocks(s.n);
    if (blocks > 0x7fffffffu) return cudaErrorInvalidValue;
    adam8bit_kernel<G, O><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(c, s);
    return cudaGetLastError();
  }
};

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
  return launch_for_formats<LaunchAdam>(constants, formats, span, stream);
}

cudaError_t adam8bit_update(const AdamConstants& constants, const AdamFormats& formats, const Adam8bitSpan& span,
                            cudaStream_t stream) {
  return launch_for_formats<LaunchAdam8bit>(constants, formats, span, stream);
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
