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
// warp: at each step the eight lanes read eight consecutive floats (one 32-byte sector). This
// kernel serves an x that is not 16-byte aligned; sum_squares_staged_kernel the rest.
constexpr int kLanes = 8;

// Lane 0 of each group of eight gets ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)): pairs,
// then pairs of pairs, then the halves. The whole warp calls it.
__device__ __forceinline__ double combine_lanes(double sum) {
  const unsigned mask = 0xffffffffu;
  sum = __dadd_rn(sum, __shfl_down_sync(mask, sum, 1));
  sum = __dadd_rn(sum, __shfl_down_sync(mask, sum, 2));
  return __dadd_rn(sum, __shfl_down_sync(mask, sum, 4));
}

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
  sum = combine_lanes(sum);
  if (active && lane == 0) partials[group] = sum;
}

// The same sums with x's bytes moved as 16-byte loads: a warp's four groups of eight lanes own one
// block each, as above. Each group copies its block to shared memory in stages of kStage floats
// (each lane 16 float4 loads, coalesced, the next stage's in flight while this one is summed) and
// its eight lanes then sum their strided elements from there in the same order. Elements past n
// load as zeros, which add nothing (the sums start at +0 and squares are >= +0). x 16-byte aligned.
constexpr int kStage = 512;                          // floats of a block per stage
constexpr int kStageLoads = kStage / 4 / kLanes;     // float4 loads per lane per stage (16)
constexpr int kStagedWarps = 4;                      // warps per thread block
constexpr int kStagedThreads = 32 * kStagedWarps;
static_assert(kSumSquaresBlock % kStage == 0, "whole stages per block");

__device__ __forceinline__ float4 load4_or_zero(const float* x, size_t at, size_t n) {
  if (at + 4 <= n) return *reinterpret_cast<const float4*>(x + at);
  float4 v{0.0f, 0.0f, 0.0f, 0.0f};
  if (at < n) v.x = x[at];
  if (at + 1 < n) v.y = x[at + 1];
  if (at + 2 < n) v.z = x[at + 2];
  return v;
}

__global__ void __launch_bounds__(kStagedThreads) sum_squares_staged_kernel(double* partials, const float* x,
                                                                            size_t n, size_t blocks) {
  // A group's row is padded by 8 floats: the four groups of a warp read different banks.
  __shared__ __align__(16) float staged[kStagedThreads / kLanes][kStage + 8];
  const int group_in_block = threadIdx.x / kLanes;
  const size_t group = static_cast<size_t>(blockIdx.x) * (kStagedThreads / kLanes) + group_in_block;
  const int lane = static_cast<int>(threadIdx.x % kLanes);
  const bool active = group < blocks;
  const size_t begin = group * kSumSquaresBlock;
  float* const mine = staged[group_in_block];
  float4 next[kStageLoads];
  const auto load_stage = [&](int stage) {
#pragma unroll
    for (int r = 0; r < kStageLoads; ++r) {
      const size_t at = begin + static_cast<size_t>(stage) * kStage + 4 * (lane + kLanes * r);
      next[r] = active ? load4_or_zero(x, at, n) : float4{0.0f, 0.0f, 0.0f, 0.0f};
    }
  };
  double sum = 0.0;
  load_stage(0);
  for (int stage = 0; stage < static_cast<int>(kSumSquaresBlock / kStage); ++stage) {
    __syncwarp();  // the group's lanes are done reading the last stage
#pragma unroll
    for (int r = 0; r < kStageLoads; ++r) reinterpret_cast<float4*>(mine)[lane + kLanes * r] = next[r];
    __syncwarp();
    if (stage + 1 < static_cast<int>(kSumSquaresBlock / kStage)) load_stage(stage + 1);
#pragma unroll 8
    for (int k = 0; k < kStage / kLanes; ++k) {
      const double v = static_cast<double>(mine[lane + kLanes * k]);
      sum = __dadd_rn(sum, __dmul_rn(v, v));
    }
  }
  sum = combine_lanes(sum);
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
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    const size_t groups_per_block = kStagedThreads / kLanes;
    const unsigned grid = static_cast<unsigned>((blocks + groups_per_block - 1) / groups_per_block);
    sum_squares_staged_kernel<<<grid, kStagedThreads, 0, stream>>>(partials, x, n, blocks);
    return cudaGetLastError();
  }
  const size_t threads = blocks * kLanes;
  const unsigned grid = static_cast<unsigned>((threads + kBlock - 1) / kBlock);
  sum_squares_kernel<<<grid, kBlock, 0, stream>>>(partials, x, n, blocks);
  return cudaGetLastError();
}

}  // namespace strata::kernels::cuda
