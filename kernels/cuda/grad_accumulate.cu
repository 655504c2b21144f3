// Gradient accumulation and the blocked sum of squares on the GPU (contract in
// grad_accumulate.cuh). Both reproduce kernels/cpu/grad_accumulate.cc bit for bit: widening is
// exact, the fp32 add is one rounding, and in the sum of squares the product of two floats is
// exact in double (so FMA contraction cannot change it) and the additions follow the CPU's order.
#include "kernels/cpu/grad_accumulate.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/grad_accumulate.cuh"

namespace strata::kernels::cuda {
namespace {

using detail::kBlock;

template <FloatFormat F>
__device__ __forceinline__ float widen(const void* src, size_t i) {
  if constexpr (F == FloatFormat::f32) return static_cast<const float*>(src)[i];
  if constexpr (F == FloatFormat::bf16) return detail::bf16_bits_to_f32(static_cast<const uint16_t*>(src)[i]);
  if constexpr (F == FloatFormat::f16) return __half2float(static_cast<const __half*>(src)[i]);
}

template <FloatFormat F>
__global__ void accumulate_kernel(float* acc, const void* src, size_t n, bool first) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = widen<F>(src, i);
    acc[i] = first ? g : __fadd_rn(acc[i], g);
  }
}

// Eight threads per 4096-float block (lane j = thread j of its group of eight), four blocks per
// warp: at each step the eight lanes read eight consecutive floats (one 32-byte sector).
constexpr int kLanes = 8;

__global__ void sum_squares_kernel(double* partials, const float* x, size_t n, size_t blocks) {
  const size_t group = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  const int lane = static_cast<int>(threadIdx.x % kLanes);
  const bool active = group < blocks;
  double sum = 0.0;
  if (active) {
    const size_t begin = group * kSumSquaresBlock;
    const size_t end = begin + kSumSquaresBlock < n ? begin + kSumSquaresBlock : n;
    for (size_t i = begin + lane; i < end; i += kLanes) {
      const double v = static_cast<double>(x[i]);
      sum = __dadd_rn(sum, __dmul_rn(v, v));
    }
  }
  // ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)): pairs, then pairs of pairs, then the halves.
  const unsigned mask = 0xffffffffu;
  sum = __dadd_rn(sum, __shfl_down_sync(mask, sum, 1));
  sum = __dadd_rn(sum, __shfl_down_sync(mask, sum, 2));
  sum = __dadd_rn(sum, __shfl_down_sync(mask, sum, 4));
  if (active && lane == 0) partials[group] = sum;
}

}  // namespace

cudaError_t accumulate_widened(float* acc, const void* src, FloatFormat src_format, size_t n, bool first,
                               cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const unsigned grid = detail::grid_for(static_cast<int64_t>(n));
  switch (src_format) {
    case FloatFormat::f32: accumulate_kernel<FloatFormat::f32><<<grid, kBlock, 0, stream>>>(acc, src, n, first); break;
    case FloatFormat::bf16: accumulate_kernel<FloatFormat::bf16><<<grid, kBlock, 0, stream>>>(acc, src, n, first); break;
    case FloatFormat::f16: accumulate_kernel<FloatFormat::f16><<<grid, kBlock, 0, stream>>>(acc, src, n, first); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t sum_squares_blocks(double* partials, const float* x, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const size_t blocks = (n + kSumSquaresBlock - 1) / kSumSquaresBlock;
  const size_t threads = blocks * kLanes;
  const unsigned grid = static_cast<unsigned>((threads + kBlock - 1) / kBlock);
  sum_squares_kernel<<<grid, kBlock, 0, stream>>>(partials, x, n, blocks);
  return cudaGetLastError();
}

}  // namespace strata::kernels::cuda
