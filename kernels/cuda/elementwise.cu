// GELU, SwiGLU, residual and RoPE kernels (contract in elementwise.cuh): grid-stride loops, one
// thread per element (per pair for RoPE), the same fp32 formulas as kernels/cpu/ops_elementwise.cc
// (GELU for 16-bit types: the same function on the special-function unit, see gelu_of).
#include <type_traits>

#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace strata::kernels::cuda {
namespace {

using detail::add_to;
using detail::grid_for;
using detail::kBlock;
using detail::load;
using detail::store;

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ int64_t first_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x)));
}

__device__ __forceinline__ float gelu_grad(float x, float dy) {
  const float t = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
  const float sech2 = 1.0f - t * t;
  const float local_grad = 0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return local_grad * dy;
}

// For 16-bit T the same tanh approximation through the logistic function, 0.5 (1 + tanh(u)) =
// 1 / (1 + e^(-2u)), on the special-function unit (__expf, __fdividef): a few 1e-6 relative from
// the tanhf form, far below a 16-bit rounding, in a quarter of the instructions (tanhf left both
// kernels compute-bound: 2.3 ms of gpt2-124m's step on an H200 against ~1.4 ms for their bytes). fp32
// keeps tanhf, the CPU's formula. Limits: -0 for x -> -inf's finite side, x for large x, NaN for
// +-inf * 0 as the tanhf form gives.
template <typename T>
__device__ __forceinline__ float gelu_of(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return gelu(x);
  } else {
    const float two_u = 2.0f * kGeluScale * (x + kGeluCubic * x * x * x);
    return x * __fdividef(1.0f, 1.0f + __expf(-two_u));
  }
}

template <typename T>
__device__ __forceinline__ float gelu_grad_of(float x, float dy) {
  if constexpr (std::is_same_v<T, float>) {
    return gelu_grad(x, dy);
  } else {
    const float two_u = 2.0f * kGeluScale * (x + kGeluCubic * x * x * x);
    const float s = __fdividef(1.0f, 1.0f + __expf(-two_u));  // 0.5 (1 + tanh(u)); sech^2(u) = 4 s (1 - s)
    const float local_grad = s + 2.0f * x * s * (1.0f - s) * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    return local_grad * dy;
  }
}

using detail::kGroup;
using detail::load_group;
using detail::store_group;

// Elementwise maps over n elements, a 16-byte group of them per thread step (device_common.cuh):
// kVector when every pointer is 16-byte aligned and n a whole number of groups.
template <typename T, bool kVector>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  const int64_t groups = detail::groups_of<T>(n);
  for (int64_t g = first_index(); g < groups; g += grid_stride()) {
    float x[kGroup<T>];
    load_group<T, kVector>(x, inp, g, n);
#pragma unroll
    for (int i = 0; i < kGroup<T>; ++i) x[i] = gelu_of<T>(x[i]);
    store_group<T, kVector>(out, x, g, n);
  }
}

template <typename T, bool kVector>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n, bool overwrite) {
  const int64_t groups = detail::groups_of<T>(n);
  for (int64_t g = first_index(); g < groups; g += grid_stride()) {
    float x[kGroup<T>], dy[kGroup<T>], d[kGroup<T>];
    load_group<T, kVector>(x, inp, g, n);
    load_group<T, kVector>(dy, dout, g, n);
    if (overwrite) {
#pragma unroll
      for (int i = 0; i < kGroup<T>; ++i) d[i] = gelu_grad_of<T>(x[i], dy[i]);
    } else {
      load_group<T, kVector>(d, dinp, g, n);
#pragma unroll
      for (int i = 0; i < kGroup<T>; ++i) d[i] = d[i] + gelu_grad_of<T>(x[i], dy[i]);
    }
    store_group<T, kVector>(dinp, d, g, n);
  }
}

// Blocks for n elements taken a group at a time (n > 0).
template <typename T>
unsigned group_grid_for(int64_t n) {
  return grid_for(detail::groups_of<T>(n));
}

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* inp, int64_t N, int64_t H) {
  for (int64_t i = first_index(); i < N * H; i += grid_stride()) {
    const int64_t n = i / H, h = i % H;
    const float g = load(inp + n * 2 * H + h);
    store(out + i, g / (1.0f + expf(-g)) * load(inp + n * 2 * H + H + h));
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t N, int64_t H, bool overwrite) {
  for (int64_t i = first_index(); i < N * H; i += grid_stride()) {
    const int64_t n = i / H, h = i % H;
    const int64_t gate_at = n * 2 * H + h, up_at = gate_at + H;
    const float g = load(inp + gate_at), up = load(inp + up_at), dy = load(dout + i);
    const float sig = 1.0f / (1.0f + expf(-g));
    detail::store_or_add(dinp + gate_at, dy * up * sig * (1.0f + g * (1.0f - sig)), overwrite);
    detail::store_or_add(dinp + up_at, dy * g * sig, overwrite);
  }
}

template <typename T, bool kVector>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, int64_t n) {
  const int64_t groups = detail::groups_of<T>(n);
  for (int64_t g = first_index(); g < groups; g += grid_stride()) {
    float x[kGroup<T>], y[kGroup<T>];
    load_group<T, kVector>(x, a, g, n);
    load_group<T, kVector>(y, b, g, n);
#pragma unroll
    for (int i = 0; i < kGroup<T>; ++i) x[i] = x[i] + y[i];
    store_group<T, kVector>(out, x, g, n);
  }
}

template <typename T>
__global__ void residual_backward_kernel(T* da, T* db, const T* dout, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float g = load(dout + i);
    if (da != nullptr) add_to(da + i, g);
    if (db != nullptr) add_to(db + i, g);
  }
}

// RoPE: block (t = blockIdx.x, row slice blockIdx.y) over the B * NH rows at position t. The
// block first builds cos/sin of its position's half angles in shared memory (double, as the CPU op,
// rounded to float), when they fit; then one thread per rotated pair (i fastest, so the x1 and x2
// loads of a warp are coalesced runs of a row). Products are explicit round-to-nearest operations
// (no FMA contraction), the same operations as the CPU loop. Forward: (x1 c - x2 s, x2 c + x1 s);
// inverse: (x1 c + x2 s, x2 c - x1 s). Rows (b, t) start `ld` elements apart; dst may equal src (a
// thread reads its pair before writing it).
inline constexpr int64_t kRopeTableMax = 1024;  // half head sizes with a shared cos/sin table
inline constexpr int64_t kRopePairsPerThread = 4;

__device__ __forceinline__ void rope_angle(int64_t t, int64_t i, int64_t HS, float theta, int64_t pos_offset,
                                           float* c, float* s) {
  const double freq = pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / static_cast<double>(HS));
  const double angle = static_cast<double>(pos_offset + t) * freq;
  *c = static_cast<float>(cos(angle));
  *s = static_cast<float>(sin(angle));
}

template <typename T, bool kInverse>
__global__ void rope_kernel(T* dst, const T* src, int64_t T_len, int64_t NH, int64_t HS, int64_t ld, int64_t rows,
                            int64_t rows_per_block, float theta, int64_t pos_offset) {
  __shared__ float cos_table[kRopeTableMax], sin_table[kRopeTableMax];
  const int64_t half = HS / 2, t = blockIdx.x;
  const bool table = half <= kRopeTableMax;
  if (table) {
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
      rope_angle(t, i, HS, theta, pos_offset, &cos_table[i], &sin_table[i]);
    }
    __syncthreads();
  }
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_block;
  const int64_t r1 = r0 + rows_per_block < rows ? r0 + rows_per_block : rows;
  // 32-bit index math (launch_rope checks the ranges): the divisions are per pair.
  const uint32_t pairs = static_cast<uint32_t>((r1 - r0) * half), half32 = static_cast<uint32_t>(half);
  for (uint32_t idx = threadIdx.x; idx < pairs; idx += blockDim.x) {
    const uint32_t r = static_cast<uint32_t>(r0) + idx / half32, i = idx % half32;
    const int64_t b = r / static_cast<uint32_t>(NH), h = r % static_cast<uint32_t>(NH);
    const int64_t offset = (b * T_len + t) * ld + h * HS;
    float c, s;
    if (table) {
      c = cos_table[i];
      s = sin_table[i];
    } else {
      rope_angle(t, i, HS, theta, pos_offset, &c, &s);
    }
    const float x1 = load(src + offset + i), x2 = load(src + offset + i + half);
    if constexpr (kInverse) {
      store(dst + offset + i, __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
      store(dst + offset + i + half, __fsub_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
    } else {
      store(dst + offset + i, __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
      store(dst + offset + i + half, __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
    }
  }
}

template <bool kInverse, typename T>
cudaError_t launch_rope(T* dst, const T* src, int64_t B, int64_t T_len, int64_t NH, int64_t HS, float theta,
                        int64_t pos_offset, int64_t stride, cudaStream_t stream) {
  if (B < 0 || T_len < 0 || NH < 0 || HS < 0 || HS % 2 != 0 || T_len > 0x7fffffff) return cudaErrorInvalidValue;
  if (stride != 0 && stride < NH * HS) return cudaErrorInvalidValue;
  const int64_t rows = B * NH, half = HS / 2;
  if (rows == 0 || T_len == 0 || half == 0) return cudaSuccess;
  // Row slices so that each thread rotates about kRopePairsPerThread pairs (at most 65535 slices).
  int64_t slices = (rows * half + kBlock * kRopePairsPerThread - 1) / (kBlock * kRopePairsPerThread);
  slices = slices < 1 ? 1 : (slices > 65535 ? 65535 : slices);
  const int64_t rows_per_block = (rows + slices - 1) / slices;
  if (rows > 0x7fffffffll || rows_per_block * half > 0x7fffffffll) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(T_len), static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block));
  const int64_t ld = stride != 0 ? stride : NH * HS;
  rope_kernel<T, kInverse><<<grid, kBlock, 0, stream>>>(dst, src, T_len, NH, HS, ld, rows, rows_per_block, theta,
                                                        pos_offset);
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t gelu_forward(T* out, const T* inp, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (detail::vector_rows<T>(0, {out, inp})) {
    gelu_forward_kernel<T, true><<<group_grid_for<T>(n), kBlock, 0, stream>>>(out, inp, n);
  } else {
    gelu_forward_kernel<T, false><<<group_grid_for<T>(n), kBlock, 0, stream>>>(out, inp, n);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t stream, bool overwrite) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (detail::vector_rows<T>(0, {dinp, inp, dout})) {
    gelu_backward_kernel<T, true><<<group_grid_for<T>(n), kBlock, 0, stream>>>(dinp, inp, dout, n, overwrite);
  } else {
    gelu_backward_kernel<T, false><<<group_grid_for<T>(n), kBlock, 0, stream>>>(dinp, inp, dout, n, overwrite);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t swiglu_forward(T* out, const T* inp, int64_t N, int64_t H, cudaStream_t stream) {
  if (N < 0 || H < 0) return cudaErrorInvalidValue;
  if (N * H == 0) return cudaSuccess;
  swiglu_forward_kernel<<<grid_for(N * H), kBlock, 0, stream>>>(out, inp, N, H);
  return cudaGetLastError();
}

template <typename T>
cudaError_t swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int64_t H, cudaStream_t stream,
                            bool overwrite) {
  if (N < 0 || H < 0) return cudaErrorInvalidValue;
  if (N * H == 0) return cudaSuccess;
  swiglu_backward_kernel<<<grid_for(N * H), kBlock, 0, stream>>>(dinp, inp, dout, N, H, overwrite);
  return cudaGetLastError();
}

template <typename T>
cudaError_t residual_forward(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (detail::vector_rows<T>(0, {out, a, b})) {
    residual_forward_kernel<T, true><<<group_grid_for<T>(n), kBlock, 0, stream>>>(out, a, b, n);
  } else {
    residual_forward_kernel<T, false><<<group_grid_for<T>(n), kBlock, 0, stream>>>(out, a, b, n);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t residual_backward(T* da, T* db, const T* dout, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0 || (da == nullptr && db == nullptr)) return cudaSuccess;
  residual_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(da, db, dout, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t rope_forward(T* out, const T* inp, int64_t B, int64_t T_len, int64_t NH, int64_t HS, float theta,
                         int64_t pos_offset, cudaStream_t stream, int64_t stride) {
  return launch_rope<false>(out, inp, B, T_len, NH, HS, theta, pos_offset, stride, stream);
}

template <typename T>
cudaError_t rope_backward(T* dinp, const T* dout, int64_t B, int64_t T_len, int64_t NH, int64_t HS, float theta,
                          int64_t pos_offset, cudaStream_t stream, int64_t stride) {
  return launch_rope<true>(dinp, dout, B, T_len, NH, HS, theta, pos_offset, stride, stream);
}

#define STRATA_INSTANTIATE_ELEMENTWISE(T)                                                                         \
  template cudaError_t gelu_forward<T>(T*, const T*, int64_t, cudaStream_t);                                      \
  template cudaError_t gelu_backward<T>(T*, const T*, const T*, int64_t, cudaStream_t, bool);                     \
  template cudaError_t swiglu_forward<T>(T*, const T*, int64_t, int64_t, cudaStream_t);                           \
  template cudaError_t swiglu_backward<T>(T*, const T*, const T*, int64_t, int64_t, cudaStream_t, bool);          \
  template cudaError_t residual_forward<T>(T*, const T*, const T*, int64_t, cudaStream_t);                        \
  template cudaError_t residual_backward<T>(T*, T*, const T*, int64_t, cudaStream_t);                             \
  template cudaError_t rope_forward<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, float, int64_t,          \
                                       cudaStream_t, int64_t);                                                    \
  template cudaError_t rope_backward<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, float, int64_t,         \
                                        cudaStream_t, int64_t);
STRATA_FOR_EACH_ELEMENT_TYPE(STRATA_INSTANTIATE_ELEMENTWISE)
#undef STRATA_INSTANTIATE_ELEMENTWISE

}  // namespace strata::kernels::cuda
