// LayerNorm and RMSNorm kernels (contract in norm.cuh). A warp per row, its lanes over the row's
// 16-byte groups (device_common.cuh: one access per group when the rows are aligned), warp-wide
// fp32 sums. Forward: three passes over the row (mean, variance, write; RMSNorm two). Backward,
// fused: a block of rows writes each row's dinp (two passes over the row) and forms the block's
// fp32 partial sums of dweight and dbias over its rows: for rows of up to 4 groups a lane (C <=
// 1024 in 16 bits) in each lane's registers as it writes dinp, then across the warps in warp order
// (norm_backward_rows_kernel); for longer rows in a second walk over the block's rows (re-reading
// them, mostly from L2). The blocks' partials are added in a fixed order by the one-pass column
// sums of device_common.cuh. Without scratch for the partials the same dinp pass, then those
// column sums over all N rows (correct, slow for small C: C / 32 blocks).
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/norm.cuh"

namespace strata::kernels::cuda {
namespace {

using detail::kGroup;
using detail::load;
using detail::load_group;
using detail::store_group;
using detail::warp_sum;

inline constexpr int kNormWarps = 8;          // rows per block in the forward, warps per block
inline constexpr int64_t kNormRowBlocks = 512;  // row blocks of the fused backward, at most

bool valid_shape(int64_t N, int64_t C) { return detail::valid_rows(N) && C >= 0; }

// out row = (x - mean) * rstd * weight + bias; kRms: mean 0, no bias, only rstd saved.
template <typename T, bool kVector, bool kRms>
__global__ void __launch_bounds__(32 * kNormWarps) norm_forward_kernel(T* out, float* mean, float* rstd,
                                                                       const T* inp, const T* weight, const T* bias,
                                                                       int64_t N, int64_t C, float eps) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kNormWarps + threadIdx.x / 32;
  if (n >= N) return;  // the whole warp
  const int lane = threadIdx.x % 32;
  const T* x = inp + n * C;
  const int64_t groups = detail::groups_of<T>(C);
  const float inv_c = 1.0f / static_cast<float>(C);
  float m = 0.0f;
  if constexpr (!kRms) {
    float sum = 0.0f;
    for (int64_t g = lane; g < groups; g += 32) {
      float v[kGroup<T>];
      load_group<T, kVector>(v, x, g, C);
#pragma unroll
      for (int i = 0; i < kGroup<T>; ++i) sum += v[i];  // elements past C read as 0
    }
    m = warp_sum(sum) * inv_c;
  }
  float sq = 0.0f;
  for (int64_t g = lane; g < groups; g += 32) {
    float v[kGroup<T>];
    load_group<T, kVector>(v, x, g, C);
#pragma unroll
    for (int i = 0; i < kGroup<T>; ++i) {
      const float d = v[i] - m;
      if (g * kGroup<T> + i < C) sq += d * d;
    }
  }
  const float s = 1.0f / sqrtf(warp_sum(sq) * inv_c + eps);
  T* y = out + n * C;
  for (int64_t g = lane; g < groups; g += 32) {
    float v[kGroup<T>], w[kGroup<T>], b[kGroup<T>];
    load_group<T, kVector>(v, x, g, C);
    load_group<T, kVector>(w, weight, g, C);
    if (!kRms && bias != nullptr) load_group<T, kVector>(b, bias, g, C);
#pragma unroll
    for (int i = 0; i < kGroup<T>; ++i) {
      v[i] = (v[i] - m) * s * w[i];
      if (!kRms && bias != nullptr) v[i] += b[i];
    }
    store_group<T, kVector>(y, v, g, C);
  }
  if (lane == 0) {
    if constexpr (!kRms) mean[n] = m;
    rstd[n] = s;
  }
}

// Rows [blockIdx.x * rows_per, +rows_per): dinp += for each row (dinp not null; warp w takes rows
// w, w + kNormWarps, ...), then (partials not null) this block's fp32 column sums over its rows in
// row order: partials[block][c] of (x - mean) rstd dout (dweight's terms), partials[block][C + c]
// of dout (dbias's). kRms: RMSNorm (mean unused).
template <typename T, bool kVector, bool kRms>
__global__ void __launch_bounds__(32 * kNormWarps) norm_backward_kernel(T* dinp, float* partials, const T* dout,
                                                                        const T* inp, const T* weight,
                                                                        const float* mean, const float* rstd,
                                                                        int64_t N, int64_t C, int64_t rows_per) {
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * rows_per;
  const int64_t n1 = n0 + rows_per < N ? n0 + rows_per : N;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t groups = detail::groups_of<T>(C);
  const float inv_c = 1.0f / static_cast<float>(C);
  if (dinp != nullptr) {
    for (int64_t n = n0 + warp; n < n1; n += kNormWarps) {
      const T* x = inp + n * C;
      const T* dy = dout + n * C;
      const float m = kRms ? 0.0f : mean[n], s = rstd[n];
      float sum_dnorm = 0.0f, sum_dnorm_norm = 0.0f;
      for (int64_t g = lane; g < groups; g += 32) {
        float xv[kGroup<T>], dv[kGroup<T>], wv[kGroup<T>];
        load_group<T, kVector>(xv, x, g, C);
        load_group<T, kVector>(dv, dy, g, C);
        load_group<T, kVector>(wv, weight, g, C);
#pragma unroll
        for (int i = 0; i < kGroup<T>; ++i) {
          const float dnorm = wv[i] * dv[i];  // 0 past C
          sum_dnorm += dnorm;
          sum_dnorm_norm += dnorm * ((xv[i] - m) * s);
        }
      }
      const float dnorm_mean = warp_sum(sum_dnorm) * inv_c;
      const float dnorm_norm_mean = warp_sum(sum_dnorm_norm) * inv_c;
      T* dx = dinp + n * C;
      for (int64_t g = lane; g < groups; g += 32) {
        float xv[kGroup<T>], dv[kGroup<T>], wv[kGroup<T>], old[kGroup<T>];
        load_group<T, kVector>(xv, x, g, C);
        load_group<T, kVector>(dv, dy, g, C);
        load_group<T, kVector>(wv, weight, g, C);
        load_group<T, kVector>(old, dx, g, C);
#pragma unroll
        for (int i = 0; i < kGroup<T>; ++i) {
          const float norm = (xv[i] - m) * s;
          const float dnorm = wv[i] * dv[i];
          const float grad =
              kRms ? (dnorm - norm * dnorm_norm_mean) * s : (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
          old[i] = old[i] + grad;
        }
        store_group<T, kVector>(dx, old, g, C);
      }
    }
  }
  if (partials == nullptr) return;
  float* out = partials + static_cast<int64_t>(blockIdx.x) * 2 * C;
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    float dw[kGroup<T>], db[kGroup<T>];
#pragma unroll
    for (int i = 0; i < kGroup<T>; ++i) dw[i] = db[i] = 0.0f;
#pragma unroll 4
    for (int64_t n = n0; n < n1; ++n) {
      float xv[kGroup<T>], dv[kGroup<T>];
      load_group<T, kVector>(xv, inp + n * C, g, C);
      load_group<T, kVector>(dv, dout + n * C, g, C);
      const float m = kRms ? 0.0f : mean[n], s = rstd[n];
#pragma unroll
      for (int i = 0; i < kGroup<T>; ++i) {
        dw[i] += (xv[i] - m) * s * dv[i];
        db[i] += dv[i];
      }
    }
#pragma unroll
    for (int i = 0; i < kGroup<T>; ++i) {
      const int64_t c = g * kGroup<T> + i;
      if (c < C) {
        out[c] = dw[i];
        out[C + c] = db[i];
      }
    }
  }
}

// The fused backward with the row block's sums in registers, for rows of at most 32 * kSlots
// groups (kSlots <= 4: C <= 1024 in 16 bits, 512 in fp32) and aligned rows: warp w takes rows
// w, w + kNormWarps, ... of the block; each lane keeps the fp32 sums of its groups' columns (groups
// lane + 32 j) over its warp's rows, in row order, while it writes dinp; then the warps' sums are
// added in warp order through shared memory, and the last warp writes the block's partials
// (partials[block][c]: dweight's terms, partials[block][C + c]: dbias's). One read of x and dout
// from memory (the second pass over a row finds them in L1), none more for the sums. kRms: no
// dbias. dinp and partials are not null.
template <typename T, int kSlots, bool kRms>
__global__ void __launch_bounds__(32 * kNormWarps, 2) norm_backward_rows_kernel(
    T* dinp, float* partials, const T* dout, const T* inp, const T* weight, const float* mean, const float* rstd,
    int64_t N, int64_t C, int64_t rows_per) {
  constexpr int kG = kGroup<T>;
  constexpr int kMaxC = 32 * kSlots * kG;
  __shared__ __align__(16) float red[(kRms ? 1 : 2) * kMaxC];
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * rows_per;
  const int64_t n1 = n0 + rows_per < N ? n0 + rows_per : N;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t groups = C / kG;
  const float inv_c = 1.0f / static_cast<float>(C);
  float dw[kSlots][kG], db[kRms ? 1 : kSlots][kG];
#pragma unroll
  for (int j = 0; j < kSlots; ++j)
#pragma unroll
    for (int i = 0; i < kG; ++i) {
      dw[j][i] = 0.0f;
      if constexpr (!kRms) db[j][i] = 0.0f;
    }
  for (int64_t n = n0 + warp; n < n1; n += kNormWarps) {
    const T* x = inp + n * C;
    const T* dy = dout + n * C;
    const float m = kRms ? 0.0f : mean[n], s = rstd[n];
    float sum_dnorm = 0.0f, sum_dnorm_norm = 0.0f;
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      const int64_t g = lane + 32 * j;
      if (g >= groups) break;
      float xv[kG], dv[kG], wv[kG];
      load_group<T, true>(xv, x, g, C);
      load_group<T, true>(dv, dy, g, C);
      load_group<T, true>(wv, weight, g, C);
#pragma unroll
      for (int i = 0; i < kG; ++i) {
        const float dnorm = wv[i] * dv[i];
        sum_dnorm += dnorm;
        sum_dnorm_norm += dnorm * ((xv[i] - m) * s);
      }
    }
    const float dnorm_mean = warp_sum(sum_dnorm) * inv_c;
    const float dnorm_norm_mean = warp_sum(sum_dnorm_norm) * inv_c;
    T* dx = dinp + n * C;
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      const int64_t g = lane + 32 * j;
      if (g >= groups) break;
      float xv[kG], dv[kG], wv[kG], old[kG];
      load_group<T, true>(xv, x, g, C);
      load_group<T, true>(dv, dy, g, C);
      load_group<T, true>(wv, weight, g, C);
      load_group<T, true>(old, dx, g, C);
#pragma unroll
      for (int i = 0; i < kG; ++i) {
        const float norm = (xv[i] - m) * s;
        const float dnorm = wv[i] * dv[i];
        const float grad =
            kRms ? (dnorm - norm * dnorm_norm_mean) * s : (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        old[i] = old[i] + grad;
        dw[j][i] += norm * dv[i];
        if constexpr (!kRms) db[j][i] += dv[i];
      }
      store_group<T, true>(dx, old, g, C);
    }
  }
  // The warps' sums in warp order: red = w0, red += w1, ..., the last warp adds its own and writes.
  float* out = partials + static_cast<int64_t>(blockIdx.x) * 2 * C;
  for (int w = 0; w < kNormWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        const int64_t g = lane + 32 * j;
        if (g >= groups) break;
#pragma unroll
        for (int i = 0; i < kG; i += 4) {
          const int64_t c = g * kG + i;
          float4 a = make_float4(dw[j][i], dw[j][i + 1], dw[j][i + 2], dw[j][i + 3]);
          if (w > 0) {
            const float4 r = *reinterpret_cast<const float4*>(red + c);
            a = make_float4(r.x + a.x, r.y + a.y, r.z + a.z, r.w + a.w);
          }
          *reinterpret_cast<float4*>((w == kNormWarps - 1 ? out : red) + c) = a;
          if constexpr (!kRms) {
            float4 b = make_float4(db[j][i], db[j][i + 1], db[j][i + 2], db[j][i + 3]);
            if (w > 0) {
              const float4 r = *reinterpret_cast<const float4*>(red + kMaxC + c);
              b = make_float4(r.x + b.x, r.y + b.y, r.z + b.z, r.w + b.w);
            }
            *reinterpret_cast<float4*>(w == kNormWarps - 1 ? out + C + c : red + kMaxC + c) = b;
          }
        }
      }
    }
    __syncthreads();
  }
}

// The lane slots norm_backward_rows_kernel needs for rows of C elements (2 or 4), or 0 where it
// does not apply: C not a whole number of groups, or past 4 slots (C > 1024 in 16 bits). Measured on
// an H200: at C = 768 (4 slots, 128 registers, 16 warps a multiprocessor) 61 us a call against the
// two-walk kernel's 66; at C = 1600 with 8 slots (212 registers, 8 warps) 150 us against ~65 --
// a row at a time per warp is latency-bound, and 8 warps cannot hide it.
template <typename T>
int norm_row_slots(int64_t C) {
  if (C % kGroup<T> != 0) return 0;
  const int64_t per_lane = (C / kGroup<T> + 31) / 32;
  return per_lane <= 2 ? 2 : per_lane <= 4 ? 4 : 0;
}

// Element (b, c) of the blocks' partials: partials[b * 2 C + offset + c] (offset 0: dweight's, C:
// dbias's).
struct BlockPartial {
  const float* partials;
  int64_t C, offset;
  __device__ float operator()(int64_t b, int64_t c) const { return partials[b * 2 * C + offset + c]; }
};

// (x - mean) * rstd * dout at (n, c): the norm's dweight term. RMSNorm passes mean == null.
template <typename T>
struct NormWeightGrad {
  const T* inp;
  const T* dout;
  const float* mean;
  const float* rstd;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const {
    const float m = mean != nullptr ? mean[n] : 0.0f;
    return (load(inp + n * C + c) - m) * rstd[n] * load(dout + n * C + c);
  }
};

template <typename T>
struct RowValue {
  const T* data;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const { return load(data + n * C + c); }
};

// The one backward for both norms (kRms: RMSNorm, no mean, no dbias).
template <typename T, bool kRms>
cudaError_t norm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                          const float* mean, const float* rstd, int64_t N, int64_t C, float* scratch,
                          size_t scratch_floats, cudaStream_t stream) {
  if (!valid_shape(N, C)) return cudaErrorInvalidValue;
  if (N == 0 || C == 0) return cudaSuccess;
  const bool vector = detail::vector_rows<T>(C, {dinp, dout, inp, weight});
  const bool sums = dweight != nullptr || dbias != nullptr;
  const int64_t fused_rows = norm_row_block_rows(N, C, scratch != nullptr ? scratch_floats : 0);
  const int64_t rows_per = sums && fused_rows > 0 ? fused_rows : kNormWarps;
  const int64_t blocks = (N + rows_per - 1) / rows_per;
  float* partials = sums && fused_rows > 0 ? scratch : nullptr;
  const int slots = norm_row_slots<T>(C);
  if (dinp != nullptr && partials != nullptr && vector && slots > 0 &&
      reinterpret_cast<uintptr_t>(partials) % 16 == 0) {
    const auto kernel = slots == 2 ? norm_backward_rows_kernel<T, 2, kRms> : norm_backward_rows_kernel<T, 4, kRms>;
    kernel<<<static_cast<unsigned>(blocks), 32 * kNormWarps, 0, stream>>>(dinp, partials, dout, inp, weight, mean,
                                                                          rstd, N, C, rows_per);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  } else if (dinp != nullptr || partials != nullptr) {
    const auto kernel = vector ? norm_backward_kernel<T, true, kRms> : norm_backward_kernel<T, false, kRms>;
    kernel<<<static_cast<unsigned>(blocks), 32 * kNormWarps, 0, stream>>>(dinp, partials, dout, inp, weight, mean,
                                                                          rstd, N, C, rows_per);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (partials != nullptr) {  // the blocks' partials, added in a fixed order
    if (dweight != nullptr) {
      if (cudaError_t e = detail::add_column_sums(dweight, blocks, C, BlockPartial{partials, C, 0}, stream);
          e != cudaSuccess)
        return e;
    }
    if (dbias != nullptr) return detail::add_column_sums(dbias, blocks, C, BlockPartial{partials, C, C}, stream);
    return cudaSuccess;
  }
  if (dweight != nullptr) {
    if (cudaError_t e = detail::add_column_sums(dweight, N, C, NormWeightGrad<T>{inp, dout, mean, rstd, C}, stream);
        e != cudaSuccess)
      return e;
  }
  if (dbias != nullptr) return detail::add_column_sums(dbias, N, C, RowValue<T>{dout, C}, stream);
  return cudaSuccess;
}

template <typename T, bool kRms>
cudaError_t norm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int64_t N,
                         int64_t C, float eps, cudaStream_t stream) {
  if (!valid_shape(N, C)) return cudaErrorInvalidValue;
  if (N == 0 || C == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((N + kNormWarps - 1) / kNormWarps);
  if (detail::vector_rows<T>(C, {out, inp, weight, bias})) {
    norm_forward_kernel<T, true, kRms><<<blocks, 32 * kNormWarps, 0, stream>>>(out, mean, rstd, inp, weight, bias, N,
                                                                                C, eps);
  } else {
    norm_forward_kernel<T, false, kRms><<<blocks, 32 * kNormWarps, 0, stream>>>(out, mean, rstd, inp, weight, bias,
                                                                                 N, C, eps);
  }
  return cudaGetLastError();
}

}  // namespace

int64_t norm_row_block_rows(int64_t N, int64_t C, size_t scratch_floats) {
  if (N <= 0 || C <= 0) return 0;
  const uint64_t per_block = 2 * static_cast<uint64_t>(C);
  const uint64_t fit = scratch_floats / per_block;
  int64_t blocks = N < kNormRowBlocks ? N : kNormRowBlocks;
  if (static_cast<uint64_t>(blocks) > fit) blocks = static_cast<int64_t>(fit);
  if (blocks < 1) return 0;
  return (N + blocks - 1) / blocks;
}

template <typename T>
cudaError_t layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                              int64_t N, int64_t C, float eps, cudaStream_t stream) {
  return norm_forward<T, false>(out, mean, rstd, inp, weight, bias, N, C, eps, stream);
}

template <typename T>
cudaError_t layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                               const float* mean, const float* rstd, int64_t N, int64_t C, cudaStream_t stream,
                               float* scratch, size_t scratch_floats) {
  return norm_backward<T, false>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, scratch, scratch_floats,
                                 stream);
}

template <typename T>
cudaError_t rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C, float eps,
                            cudaStream_t stream) {
  return norm_forward<T, true>(out, nullptr, rstd, inp, weight, static_cast<const T*>(nullptr), N, C, eps, stream);
}

template <typename T>
cudaError_t rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const float* rstd,
                             int64_t N, int64_t C, cudaStream_t stream, float* scratch, size_t scratch_floats) {
  return norm_backward<T, true>(dinp, dweight, static_cast<T*>(nullptr), dout, inp, weight, nullptr, rstd, N, C,
                                scratch, scratch_floats, stream);
}

#define STRATA_INSTANTIATE_NORM(T)                                                                               \
  template cudaError_t layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t, int64_t,  \
                                            float, cudaStream_t);                                                \
  template cudaError_t layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const float*, const float*, \
                                             int64_t, int64_t, cudaStream_t, float*, size_t);                    \
  template cudaError_t rmsnorm_forward<T>(T*, float*, const T*, const T*, int64_t, int64_t, float, cudaStream_t); \
  template cudaError_t rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const float*, int64_t, int64_t,  \
                                           cudaStream_t, float*, size_t);
STRATA_FOR_EACH_ELEMENT_TYPE(STRATA_INSTANTIATE_NORM)
#undef STRATA_INSTANTIATE_NORM

}  // namespace strata::kernels::cuda
