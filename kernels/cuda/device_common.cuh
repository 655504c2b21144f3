// Device-side helpers shared by the kernels/cuda .cu files: element loads/stores in fp32, bf16 and
// fp16 (rounding exactly as kernels/cpu/half.h), fixed-order warp/block reductions, launch sizing,
// one deterministic "column sums added into a vector" kernel (weight and bias gradients), and the
// one list of element types every activation kernel is instantiated for.
// INTERNAL: holds device code, so only .cu files include it; callers use the public *.cuh headers.
// Every reduction here has an order fixed by the launch shape alone: results are bit-reproducible.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

// The element types of activations, weights and their gradients: every templated kernel entry
// point is instantiated for each, by STRATA_FOR_EACH_ELEMENT_TYPE(INSTANTIATE_MACRO) at the end of
// its .cu file. runtime/cuda/cuda_compute_ops.cc maps each activation DType to one of these.
#define STRATA_FOR_EACH_ELEMENT_TYPE(X) X(float) X(__nv_bfloat16) X(__half)

namespace strata::kernels::cuda::detail {

inline constexpr int kBlock = 256;           // threads of a 1-D launch
inline constexpr int64_t kMaxGridX = 1 << 20;  // cap for grid-stride loops (they cover the rest)

// Blocks for n elements in grid-stride loops of kBlock threads (n > 0).
inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(blocks < kMaxGridX ? blocks : kMaxGridX);
}

// --- fp32 <-> bf16 / fp16, bit-identical to kernels/cpu/half.h (RNE; NaN stays a quiet NaN) ----
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

__device__ __forceinline__ uint16_t f32_to_f16_bits(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x03ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {
    uint32_t r = a - 0x38000000u;
    r += 0x0fffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (a < 0x33000000u) return sign;
  const uint32_t exp = a >> 23;
  const uint32_t sig = (a & 0x007fffffu) | 0x00800000u;
  const uint32_t shift = 126u - exp;
  const uint32_t kept = sig >> shift;
  const uint32_t rest = sig & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  const uint32_t up = (rest > half || (rest == half && (kept & 1u))) ? 1u : 0u;
  return static_cast<uint16_t>(sign | (kept + up));
}

__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x03ffu;
  if (exp == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (mant ? 0x00400000u | (mant << 13) : 0u));
  if (exp != 0) return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
  const float mag = __fmul_rn(static_cast<float>(mant), 5.9604644775390625e-8f);
  return __uint_as_float(sign | __float_as_uint(mag));
}

// Loads and stores of an element type as fp32.
__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const __nv_bfloat16* p) {
  return bf16_bits_to_f32(*reinterpret_cast<const uint16_t*>(p));
}
__device__ __forceinline__ float load(const __half* p) { return f16_bits_to_f32(*reinterpret_cast<const uint16_t*>(p)); }
__device__ __forceinline__ void store(float* p, float x) { *p = x; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *reinterpret_cast<uint16_t*>(p) = f32_to_bf16_bits(x); }
__device__ __forceinline__ void store(__half* p, float x) { *reinterpret_cast<uint16_t*>(p) = f32_to_f16_bits(x); }
// *p += x, the sum formed in fp32 and rounded once to the element type.
template <typename T>
__device__ __forceinline__ void add_to(T* p, float x) { store(p, load(p) + x); }
// *p = x (overwrite) or *p += x, rounded once.
template <typename T>
__device__ __forceinline__ void store_or_add(T* p, float x, bool overwrite) {
  if (overwrite) {
    store(p, x);
  } else {
    add_to(p, x);
  }
}

// --- 16-byte groups of elements ------------------------------------------------------------------
// Memory-bound kernels walk their tensors in groups of kGroup<T> consecutive elements (16 bytes),
// a group per thread step, the group's elements in order. With kVector (the base 16-byte aligned)
// a whole group is one 16-byte access; otherwise, and for the last group when n is not a whole
// number of groups, it is read element by element, the elements at or past `n` reading as 0 and
// never written (nor read). The arithmetic per element and its order are the same either way, so a
// result never depends on alignment or on a row's padding.
template <typename T>
inline constexpr int kGroup = 16 / static_cast<int>(sizeof(T));

template <typename T, bool kVector>
__device__ __forceinline__ void load_group(float (&v)[kGroup<T>], const T* p, int64_t g, int64_t n) {
  const int64_t first = g * kGroup<T>;
  if (kVector && first + kGroup<T> <= n) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p + first);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kGroup<T>; ++i) v[i] = load(e + i);
  } else {
#pragma unroll
    for (int i = 0; i < kGroup<T>; ++i) v[i] = first + i < n ? load(p + first + i) : 0.0f;
  }
}

template <typename T, bool kVector>
__device__ __forceinline__ void store_group(T* p, const float (&v)[kGroup<T>], int64_t g, int64_t n) {
  const int64_t first = g * kGroup<T>;
  if (kVector && first + kGroup<T> <= n) {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < kGroup<T>; ++i) store(e + i, v[i]);
    *reinterpret_cast<uint4*>(p + first) = raw;
  } else {
#pragma unroll
    for (int i = 0; i < kGroup<T>; ++i) {
      if (first + i < n) store(p + first + i, v[i]);
    }
  }
}

// Groups covering n elements.
template <typename T>
__host__ __device__ __forceinline__ int64_t groups_of(int64_t n) {
  return (n + kGroup<T> - 1) / kGroup<T>;
}

// Whether the whole groups of every row can be 16-byte accesses (kVector): rows `ld` elements apart
// (ld = anything for a flat tensor of one row) from 16-byte aligned bases (null pointers ignored).
template <typename T>
inline bool vector_rows(int64_t ld, std::initializer_list<const void*> pointers) {
  if (ld % kGroup<T> != 0) return false;
  for (const void* p : pointers) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// --- reductions (fixed order: xor butterflies give every lane the same bits) --------------------
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum (or max) over the whole block, returned to every thread. blockDim.x must be a multiple of 32
// and at most 1024; `scratch` is 32 floats of shared memory, reusable right after the call returns.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
  r = kMax ? warp_max(r) : warp_sum(r);
  return r;
}
__device__ __forceinline__ float block_sum(float v, float* scratch) { return block_reduce<false>(v, scratch); }
__device__ __forceinline__ float block_max(float v, float* scratch) { return block_reduce<true>(v, scratch); }

// --- dst (C) += (or =) sum over rows n of value(n, c), rows summed in a fixed order -------------
// Block (32, kColumnRows): threadIdx.x picks a column of a 32-wide tile, threadIdx.y a residue of
// the rows mod kColumnRows; each thread sums its rows in order, then row 0 adds the kColumnRows
// partials in order. One pass (grid: column tiles): the block does the single += into dst. Two
// passes (grid: column tiles x row blocks, for few columns and many rows): each block writes its
// row block's fp32 sum to partials[row_block][c], then one thread per column adds the row blocks'
// partials in row-block order and does the single += into dst. The row-block count depends only on
// (N, C), so the order -- and every bit -- is fixed by the shape.
inline constexpr int kColumnRows = 16;
inline constexpr int64_t kColumnSumTargetBlocks = 1024;  // enough blocks to fill a large GPU
inline constexpr int64_t kColumnSumMinRows = 64;          // rows per row block, at least

// Row blocks the two-pass sum uses for an (N, C) input (1: one pass is as parallel).
inline int64_t column_sum_row_blocks(int64_t N, int64_t C) {
  const int64_t tiles = (C + 31) / 32;
  const int64_t wanted = (kColumnSumTargetBlocks + tiles - 1) / tiles;
  const int64_t most = (N + kColumnSumMinRows - 1) / kColumnSumMinRows;
  const int64_t blocks = wanted < most ? wanted : most;
  return blocks > 1 ? blocks : 1;
}

// partials == null: the one-pass form (adds into dst). Otherwise rows [blockIdx.y * rows_per,
// +rows_per) of the input, written to partials[blockIdx.y * C + c].
template <typename T, typename Value>
__global__ void add_column_sums_kernel(T* dst, float* partials, int64_t N, int64_t C, int64_t rows_per,
                                       Value value, bool overwrite) {
  __shared__ float partial[kColumnRows][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * rows_per;
  const int64_t n1 = n0 + rows_per < N ? n0 + rows_per : N;
  float acc = 0.0f;
  if (c < C) {
    for (int64_t n = n0 + threadIdx.y; n < n1; n += kColumnRows) acc += value(n, c);
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float total = 0.0f;
    for (int r = 0; r < kColumnRows; ++r) total += partial[r][threadIdx.x];
    if (partials == nullptr) {
      store_or_add(dst + c, total, overwrite);
    } else {
      partials[static_cast<int64_t>(blockIdx.y) * C + c] = total;
    }
  }
}

template <typename T>
__global__ void add_column_partials_kernel(T* dst, const float* partials, int64_t row_blocks, int64_t C,
                                           bool overwrite) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float total = 0.0f;
  for (int64_t r = 0; r < row_blocks; ++r) total += partials[r * C + c];
  store_or_add(dst + c, total, overwrite);
}

#if defined(__CUDACC__)  // a launch: nvcc only (tests/kernels/flash_emulation.h compiles the rest on the host)
// partials (partial_floats fp32, device scratch, stream-ordered) enables the two-pass form when
// it holds column_sum_row_blocks(N, C) * C floats; null or smaller: one pass. overwrite: dst = the
// sums instead of dst += (with N == 0 too: the sums are then 0).
template <typename T, typename Value>
cudaError_t add_column_sums(T* dst, int64_t N, int64_t C, Value value, cudaStream_t stream,
                            float* partials = nullptr, size_t partial_floats = 0, bool overwrite = false) {
  if (C <= 0) return cudaSuccess;
  if (N <= 0) {
    if (!overwrite) return cudaSuccess;
    N = 0;  // one pass over no rows writes zeros
  }
  const int64_t tiles = (C + 31) / 32;
  if (tiles > 0x7fffffff) return cudaErrorInvalidValue;
  const int64_t row_blocks = column_sum_row_blocks(N, C);
  const bool two_pass = partials != nullptr && row_blocks > 1 &&
                        static_cast<uint64_t>(row_blocks) * static_cast<uint64_t>(C) <= partial_floats;
  if (!two_pass) {
    add_column_sums_kernel<<<static_cast<unsigned>(tiles), dim3(32, kColumnRows), 0, stream>>>(
        dst, static_cast<float*>(nullptr), N, C, N, value, overwrite);
    return cudaGetLastError();
  }
  const int64_t rows_per = (N + row_blocks - 1) / row_blocks;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>((N + rows_per - 1) / rows_per));
  add_column_sums_kernel<<<grid, dim3(32, kColumnRows), 0, stream>>>(dst, partials, N, C, rows_per, value, false);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  add_column_partials_kernel<<<grid_for(C), kBlock, 0, stream>>>(dst, partials, static_cast<int64_t>(grid.y), C,
                                                                 overwrite);
  return cudaGetLastError();
}
#endif

// Rejects negative sizes and grids of one block per row beyond the x-dimension limit.
inline bool valid_rows(int64_t rows) { return rows >= 0 && rows <= 0x7fffffff; }

}  // namespace strata::kernels::cuda::detail
