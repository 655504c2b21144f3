// Attention kernels (contract in attention.cuh). 16-bit activations with head size 64 or 128 go to
// the tiled tensor-core kernels (flash_attention.cuh); everything else runs here. A warp owns one row; lane l holds the elements
// i = l + 32 e (e < kSlots) of each HS-vector in registers, so a dot product is a per-lane partial
// plus a butterfly warp sum (the same bits in every lane). Three kernels:
//   forward : per query row, online softmax over j <= t (running max, sum, weighted v), lse saved
//   dq      : per query row, D = dout . out, then dq += scale sum_j p (dout . v_j - D) k_j
//   dk, dv  : per key row (b, kv head, j), over the group's heads h and t >= j (D recomputed)
#include "kernels/cuda/attention.cuh"
#include "kernels/cpu/ops_attention.h"  // qkv_row_strides
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/flash_attention.cuh"

namespace strata::kernels::cuda {
namespace {

using detail::load;
using detail::warp_sum;

constexpr int kSlots = static_cast<int>(kAttentionMaxHeadSize / 32);
constexpr int kWarpsPerBlock = 4;

// q_ld, kv_ld: the row strides of q and dq, and of k, v, dk and dv (qkv_stride resolved); out and
// dout are packed.
struct Shape {
  int64_t B, T, NH, NKV, HS, q_ld, kv_ld;
  __device__ int64_t group() const { return NH / NKV; }
  __device__ int64_t out_offset(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * NH + h) * HS; }
  __device__ int64_t q_offset(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * q_ld + h * HS; }
  __device__ int64_t kv_offset(int64_t b, int64_t t, int64_t kh) const { return (b * T + t) * kv_ld + kh * HS; }
};

// One HS-vector spread over the lanes of a warp; slots past HS hold 0.
struct Lanes {
  float x[kSlots];
};

template <typename T>
__device__ __forceinline__ Lanes load_lanes(const T* p, int64_t HS) {
  Lanes r;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int e = 0; e < kSlots; ++e) {
    const int64_t i = lane + 32 * e;
    r.x[e] = i < HS ? load(p + i) : 0.0f;
  }
  return r;
}

__device__ __forceinline__ float dot(const Lanes& a, const Lanes& b) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < kSlots; ++e) s += a.x[e] * b.x[e];
  return warp_sum(s);
}

// p += scale * a (lanes past HS are skipped on store).
template <typename T>
__device__ __forceinline__ void add_lanes(T* p, const Lanes& a, float scale, int64_t HS) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int e = 0; e < kSlots; ++e) {
    const int64_t i = lane + 32 * e;
    if (i < HS) detail::add_to(p + i, scale * a.x[e]);
  }
}

__device__ __forceinline__ int64_t warp_row() {
  return static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
}

// Row r = (b * NH + h) * T + t, the order of lse.
template <typename T>
__global__ void forward_kernel(T* out, float* lse, const T* q, const T* k, const T* v, Shape s, float scale) {
  const int64_t r = warp_row();
  if (r >= s.B * s.NH * s.T) return;
  const int64_t t = r % s.T, h = (r / s.T) % s.NH, b = r / (s.T * s.NH), kh = h / s.group();
  const Lanes qt = load_lanes(q + s.q_offset(b, t, h), s.HS);
  float max_score = -INFINITY, sum = 0.0f;
  Lanes acc = {};
  for (int64_t j = 0; j <= t; ++j) {
    const float score = scale * dot(qt, load_lanes(k + s.kv_offset(b, j, kh), s.HS));
    const float new_max = fmaxf(max_score, score);
    const float correction = expf(max_score - new_max);  // 0 on the first key (max was -inf)
    const float p = expf(score - new_max);
    const Lanes vj = load_lanes(v + s.kv_offset(b, j, kh), s.HS);
    sum = sum * correction + p;
#pragma unroll
    for (int e = 0; e < kSlots; ++e) acc.x[e] = acc.x[e] * correction + p * vj.x[e];
    max_score = new_max;
  }
  const float inv_sum = 1.0f / sum;
  T* ot = out + s.out_offset(b, t, h);
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int e = 0; e < kSlots; ++e) {
    const int64_t i = lane + 32 * e;
    if (i < s.HS) detail::store(ot + i, acc.x[e] * inv_sum);
  }
  if (lane == 0) lse[r] = max_score + logf(sum);
}

template <typename T>
__global__ void dq_kernel(T* dq, const T* dout, const T* q, const T* k, const T* v, const T* out, const float* lse,
                          Shape s, float scale) {
  const int64_t r = warp_row();
  if (r >= s.B * s.NH * s.T) return;
  const int64_t t = r % s.T, h = (r / s.T) % s.NH, b = r / (s.T * s.NH), kh = h / s.group();
  const int64_t off = s.q_offset(b, t, h), out_off = s.out_offset(b, t, h);
  const Lanes qt = load_lanes(q + off, s.HS);
  const Lanes dot_t = load_lanes(dout + out_off, s.HS);
  const float D = dot(dot_t, load_lanes(out + out_off, s.HS));
  Lanes acc = {};
  for (int64_t j = 0; j <= t; ++j) {
    const Lanes kj = load_lanes(k + s.kv_offset(b, j, kh), s.HS);
    const float p = expf(scale * dot(qt, kj) - lse[r]);
    const float ds = p * (dot(dot_t, load_lanes(v + s.kv_offset(b, j, kh), s.HS)) - D);
#pragma unroll
    for (int e = 0; e < kSlots; ++e) acc.x[e] += ds * kj.x[e];
  }
  add_lanes(dq + off, acc, scale, s.HS);
}

// Row r = (b * NKV + kh) * T + j.
template <typename T>
__global__ void dkv_kernel(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                           const float* lse, Shape s, float scale) {
  const int64_t r = warp_row();
  if (r >= s.B * s.NKV * s.T) return;
  const int64_t j = r % s.T, kh = (r / s.T) % s.NKV, b = r / (s.T * s.NKV);
  const int64_t kv_off = s.kv_offset(b, j, kh);
  const Lanes kj = load_lanes(k + kv_off, s.HS);
  const Lanes vj = load_lanes(v + kv_off, s.HS);
  Lanes dk_acc = {}, dv_acc = {};
  for (int64_t h = kh * s.group(); h < (kh + 1) * s.group(); ++h) {
    const int64_t row0 = (b * s.NH + h) * s.T;
    for (int64_t t = j; t < s.T; ++t) {
      const int64_t out_off = s.out_offset(b, t, h);
      const Lanes qt = load_lanes(q + s.q_offset(b, t, h), s.HS);
      const Lanes dot_t = load_lanes(dout + out_off, s.HS);
      const float D = dot(dot_t, load_lanes(out + out_off, s.HS));
      const float p = expf(scale * dot(qt, kj) - lse[row0 + t]);
      const float ds = p * (dot(dot_t, vj) - D);
#pragma unroll
      for (int e = 0; e < kSlots; ++e) {
        dv_acc.x[e] += p * dot_t.x[e];
        dk_acc.x[e] += ds * qt.x[e];
      }
    }
  }
  add_lanes(dk + kv_off, dk_acc, scale, s.HS);
  add_lanes(dv + kv_off, dv_acc, 1.0f, s.HS);
}

bool valid(int64_t B, int64_t T_len, int64_t NH, int64_t NKV, int64_t HS, int64_t qkv_stride) {
  return B >= 0 && T_len >= 0 && NH > 0 && NKV > 0 && NH % NKV == 0 && HS >= 1 && HS <= kAttentionMaxHeadSize &&
         (qkv_stride == 0 || qkv_stride >= NH * HS);
}

Shape shape_of(int64_t B, int64_t T_len, int64_t NH, int64_t NKV, int64_t HS, int64_t qkv_stride) {
  const QkvRowStrides ld = qkv_row_strides(NH, NKV, HS, qkv_stride);
  return {B, T_len, NH, NKV, HS, ld.q, ld.kv};
}

unsigned blocks_for_rows(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

bool rows_fit(int64_t rows) { return (rows + kWarpsPerBlock - 1) / kWarpsPerBlock <= 0x7fffffff; }

}  // namespace

template <typename T>
cudaError_t attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B, int64_t T_len,
                              int64_t NH, int64_t NKV, int64_t HS, cudaStream_t stream, int64_t qkv_stride) {
  if (!valid(B, T_len, NH, NKV, HS, qkv_stride)) return cudaErrorInvalidValue;
  const int64_t rows = B * NH * T_len;
  if (!rows_fit(rows)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (flash::supported<T>(HS, qkv_stride, {out, q, k, v})) {
    return flash::forward(out, lse, q, k, v, B, T_len, NH, NKV, HS, stream, qkv_stride);
  }
  const Shape s = shape_of(B, T_len, NH, NKV, HS, qkv_stride);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  forward_kernel<<<blocks_for_rows(rows), 32 * kWarpsPerBlock, 0, stream>>>(out, lse, q, k, v, s, scale);
  return cudaGetLastError();
}

template <typename T>
cudaError_t attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                               const float* lse, int64_t B, int64_t T_len, int64_t NH, int64_t NKV, int64_t HS,
                               cudaStream_t stream, float* scratch, size_t scratch_floats, int64_t qkv_stride) {
  if (!valid(B, T_len, NH, NKV, HS, qkv_stride)) return cudaErrorInvalidValue;
  if (dq == nullptr || dk == nullptr || dv == nullptr) return cudaErrorInvalidValue;
  const int64_t q_rows = B * NH * T_len, kv_rows = B * NKV * T_len;
  if (!rows_fit(q_rows)) return cudaErrorInvalidValue;
  if (q_rows == 0) return cudaSuccess;
  if (flash::supported<T>(HS, qkv_stride, {dq, dk, dv, dout, q, k, v, out})) {
    return flash::backward(dq, dk, dv, dout, q, k, v, out, lse, B, T_len, NH, NKV, HS, stream, scratch,
                           scratch_floats, qkv_stride);
  }
  const Shape s = shape_of(B, T_len, NH, NKV, HS, qkv_stride);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  dq_kernel<<<blocks_for_rows(q_rows), 32 * kWarpsPerBlock, 0, stream>>>(dq, dout, q, k, v, out, lse, s, scale);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  dkv_kernel<<<blocks_for_rows(kv_rows), 32 * kWarpsPerBlock, 0, stream>>>(dk, dv, dout, q, k, v, out, lse, s, scale);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE_ATTENTION(T)                                                                           \
  template cudaError_t attention_forward<T>(T*, float*, const T*, const T*, const T*, int64_t, int64_t, int64_t,  \
                                            int64_t, int64_t, cudaStream_t, int64_t);                             \
  template cudaError_t attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*,        \
                                             const float*, int64_t, int64_t, int64_t, int64_t, int64_t,           \
                                             cudaStream_t, float*, size_t, int64_t);
STRATA_FOR_EACH_ELEMENT_TYPE(STRATA_INSTANTIATE_ATTENTION)
#undef STRATA_INSTANTIATE_ATTENTION

}  // namespace strata::kernels::cuda
