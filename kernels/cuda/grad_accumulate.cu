// Gradient accumulation and the blocked sum of squares on the GPU (contract in
// grad_accumulate.cuh). Both reproduce kernels/cpu/grad_accumulate.cc bit for bit: widening is
// exact, the fp32 add is one rounding, and in the sum of squares the product of two floats is
// exact in double (so FMA contraction cannot change it) and the additions follow the CPU's order.
#include <type_traits>

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

// One 16-bit element's bits, widened (exact).
template <FloatFormat F>
__device__ __forceinline__ float widen_bits(uint16_t bits) {
  if constexpr (F == FloatFormat::bf16) return detail::bf16_bits_to_f32(bits);
  else return __half2float(__ushort_as_half(bits));
}

template <FloatFormat F>
__global__ void accumulate_kernel(float* acc, const void* src, size_t n, bool first) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = widen<F>(src, i);
    acc[i] = first ? g : __fadd_rn(acc[i], g);
  }
}

// The same sums eight elements a thread: one 16-byte read of a 16-bit src (two of an fp32 one)
// and two of acc, for src and acc 16-byte aligned; elements [8 * (n / 8), n) are left to
// accumulate_kernel. kFirst: acc is written, not read.
template <FloatFormat F, bool kFirst>
__global__ void accumulate_vector_kernel(float* acc, const void* src, size_t groups) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t k = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < groups; k += stride) {
    float g[8];
    if constexpr (F == FloatFormat::f32) {
      const float4 a = static_cast<const float4*>(src)[2 * k], b = static_cast<const float4*>(src)[2 * k + 1];
      g[0] = a.x, g[1] = a.y, g[2] = a.z, g[3] = a.w, g[4] = b.x, g[5] = b.y, g[6] = b.z, g[7] = b.w;
    } else {
      const uint4 raw = static_cast<const uint4*>(src)[k];
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        g[2 * w] = widen_bits<F>(static_cast<uint16_t>(words[w] & 0xffffu));
        g[2 * w + 1] = widen_bits<F>(static_cast<uint16_t>(words[w] >> 16));
      }
    }
    float4* out = reinterpret_cast<float4*>(acc) + 2 * k;
    float4 lo = make_float4(g[0], g[1], g[2], g[3]), hi = make_float4(g[4], g[5], g[6], g[7]);
    if constexpr (!kFirst) {
      const float4 a = out[0], b = out[1];
      lo = make_float4(__fadd_rn(a.x, lo.x), __fadd_rn(a.y, lo.y), __fadd_rn(a.z, lo.z), __fadd_rn(a.w, lo.w));
      hi = make_float4(__fadd_rn(b.x, hi.x), __fadd_rn(b.y, hi.y), __fadd_rn(b.z, hi.z), __fadd_rn(b.w, hi.w));
    }
    out[0] = lo;
    out[1] = hi;
  }
}

template <FloatFormat F>
cudaError_t launch_accumulate(float* acc, const void* src, size_t n, bool first, cudaStream_t stream) {
  constexpr size_t kSrcBytes = F == FloatFormat::f32 ? 4 : 2;
  size_t done = 0;
  if (reinterpret_cast<uintptr_t>(acc) % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 && n >= 8) {
    const size_t groups = n / 8;
    const unsigned grid = detail::grid_for(static_cast<int64_t>(groups));
    if (first) {
      accumulate_vector_kernel<F, true><<<grid, kBlock, 0, stream>>>(acc, src, groups);
    } else {
      accumulate_vector_kernel<F, false><<<grid, kBlock, 0, stream>>>(acc, src, groups);
    }
    done = 8 * groups;
  }
  if (done < n) {
    accumulate_kernel<F><<<detail::grid_for(static_cast<int64_t>(n - done)), kBlock, 0, stream>>>(
        acc + done, static_cast<const char*>(src) + done * kSrcBytes, n - done, first);
  }
  return cudaGetLastError();
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

template <FloatFormat F>
__global__ void sum_squares_kernel(double* partials, const void* x, size_t n, size_t blocks) {
  const size_t group = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  const int lane = static_cast<int>(threadIdx.x % kLanes);
  const bool active = group < blocks;
  double sum = 0.0;
  if (active) {
    const size_t begin = group * kSumSquaresBlock;
    const size_t end = begin + kSumSquaresBlock < n ? begin + kSumSquaresBlock : n;
    for (size_t i = begin + lane; i < end; i += kLanes) {
      const double v = static_cast<double>(widen<F>(x, i));
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
// load as zeros, which add nothing (the sums start at +0 and squares are >= +0). A 16-bit x is
// widened as it is staged (8-byte loads of four elements). x 16-byte aligned.
constexpr int kStage = 512;                          // floats of a block per stage
constexpr int kStageLoads = kStage / 4 / kLanes;     // float4 loads per lane per stage (16)
constexpr int kStagedWarps = 4;                      // warps per thread block
constexpr int kStagedThreads = 32 * kStagedWarps;
static_assert(kSumSquaresBlock % kStage == 0, "whole stages per block");

// Four elements of x as loaded, not yet widened: a float4 of fp32, or a uint2 of four 16-bit
// elements. The stage's loads land in these and are widened only when stored to shared memory, so
// every load of a stage is in flight at once (widening at load time made each one wait: the 16-bit
// kernel ran 3x the fp32 one's time). Elements past n are zeros (+0 bits).
template <FloatFormat F>
using Raw4 = std::conditional_t<F == FloatFormat::f32, float4, uint2>;

template <FloatFormat F>
__device__ __forceinline__ Raw4<F> load4_or_zero(const void* x, size_t at, size_t n) {
  if constexpr (F == FloatFormat::f32) {
    const float* p = static_cast<const float*>(x);
    if (at + 4 <= n) return *reinterpret_cast<const float4*>(p + at);
    float4 v{0.0f, 0.0f, 0.0f, 0.0f};
    if (at < n) v.x = p[at];
    if (at + 1 < n) v.y = p[at + 1];
    if (at + 2 < n) v.z = p[at + 2];
    return v;
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(x);
    if (at + 4 <= n) return *reinterpret_cast<const uint2*>(p + at);
    const uint32_t e0 = at < n ? p[at] : 0u, e1 = at + 1 < n ? p[at + 1] : 0u, e2 = at + 2 < n ? p[at + 2] : 0u;
    return uint2{e0 | (e1 << 16), e2};
  }
}

template <FloatFormat F>
__device__ __forceinline__ float4 widen4(const Raw4<F>& raw) {
  if constexpr (F == FloatFormat::f32) {
    return raw;
  } else {
    return float4{widen_bits<F>(static_cast<uint16_t>(raw.x & 0xffffu)), widen_bits<F>(static_cast<uint16_t>(raw.x >> 16)),
                  widen_bits<F>(static_cast<uint16_t>(raw.y & 0xffffu)), widen_bits<F>(static_cast<uint16_t>(raw.y >> 16))};
  }
}

template <FloatFormat F>
__global__ void __launch_bounds__(kStagedThreads) sum_squares_staged_kernel(double* partials, const void* x,
                                                                            size_t n, size_t blocks) {
  // A group's row is padded by 8 floats: the four groups of a warp read different banks.
  __shared__ __align__(16) float staged[kStagedThreads / kLanes][kStage + 8];
  const int group_in_block = threadIdx.x / kLanes;
  const size_t group = static_cast<size_t>(blockIdx.x) * (kStagedThreads / kLanes) + group_in_block;
  const int lane = static_cast<int>(threadIdx.x % kLanes);
  const bool active = group < blocks;
  const size_t begin = group * kSumSquaresBlock;
  float* const mine = staged[group_in_block];
  Raw4<F> next[kStageLoads];
  const auto load_stage = [&](int stage) {
#pragma unroll
    for (int r = 0; r < kStageLoads; ++r) {
      const size_t at = begin + static_cast<size_t>(stage) * kStage + 4 * (lane + kLanes * r);
      next[r] = active ? load4_or_zero<F>(x, at, n) : Raw4<F>{};
    }
  };
  double sum = 0.0;
  load_stage(0);
  for (int stage = 0; stage < static_cast<int>(kSumSquaresBlock / kStage); ++stage) {
    __syncwarp();  // the group's lanes are done reading the last stage
#pragma unroll
    for (int r = 0; r < kStageLoads; ++r) reinterpret_cast<float4*>(mine)[lane + kLanes * r] = widen4<F>(next[r]);
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
  switch (src_format) {
    case FloatFormat::f32: return launch_accumulate<FloatFormat::f32>(acc, src, n, first, stream);
    case FloatFormat::bf16: return launch_accumulate<FloatFormat::bf16>(acc, src, n, first, stream);
    case FloatFormat::f16: return launch_accumulate<FloatFormat::f16>(acc, src, n, first, stream);
    default: return cudaErrorInvalidValue;
  }
}

namespace {

template <FloatFormat F>
cudaError_t launch_sum_squares(double* partials, const void* x, size_t n, cudaStream_t stream) {
  const size_t blocks = (n + kSumSquaresBlock - 1) / kSumSquaresBlock;
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    const size_t groups_per_block = kStagedThreads / kLanes;
    const unsigned grid = static_cast<unsigned>((blocks + groups_per_block - 1) / groups_per_block);
    sum_squares_staged_kernel<F><<<grid, kStagedThreads, 0, stream>>>(partials, x, n, blocks);
    return cudaGetLastError();
  }
  const size_t threads = blocks * kLanes;
  const unsigned grid = static_cast<unsigned>((threads + kBlock - 1) / kBlock);
  sum_squares_kernel<F><<<grid, kBlock, 0, stream>>>(partials, x, n, blocks);
  return cudaGetLastError();
}

}  // namespace

cudaError_t sum_squares_blocks(double* partials, const void* x, FloatFormat format, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (format) {
    case FloatFormat::f32: return launch_sum_squares<FloatFormat::f32>(partials, x, n, stream);
    case FloatFormat::bf16: return launch_sum_squares<FloatFormat::bf16>(partials, x, n, stream);
    case FloatFormat::f16: return launch_sum_squares<FloatFormat::f16>(partials, x, n, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace strata::kernels::cuda
