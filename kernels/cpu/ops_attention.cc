// Causal multi-head / grouped-query attention forward/backward (see ops_attention.h).
// Forward: one task per query row (b, h, t): scores, softmax, weighted sum of v, lse saved.
// Backward, flash-attention style from lse (no stored probabilities), in three passes so every
// output element has one owner and a fixed summation order:
//   D (B, NH, T)   = dout_t . out_t                                   (per query row)
//   dq_t          += scale * sum_{j <= t} p_tj (dout_t . v_j - D_t) k_j  (per query row)
//   dk_j, dv_j    += sums over the group's heads h and t >= j          (per key row (b, kv head, j))
// p_tj = exp(scale q_t . k_j - lse_t) is recomputed in both of the last two passes.
#include "kernels/cpu/ops_attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/ops_parallel.h"

namespace strata::kernels {
namespace {

constexpr int64_t kRowGrain = 8;

// a . b in eight fixed lanes (element i goes to lane i % 8), lanes summed in order: the compiler
// can vectorise it, and the result never depends on anything but a and b.
float dot(const float* a, const float* b, int64_t n) {
  constexpr int64_t kLanes = 8;
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += a[i + l] * b[i + l];
  }
  for (; i < n; ++i) lanes[i % kLanes] += a[i] * b[i];
  float sum = 0.0f;
  for (int64_t l = 0; l < kLanes; ++l) sum += lanes[l];
  return sum;
}

// The shapes of one call and the offsets into its tensors.
struct AttentionShape {
  int64_t B, T, NH, NKV, HS;
  QkvRowStrides ld;
  int64_t group() const { return NH / NKV; }
  // Offset of head h at position (b, t) in a packed (B, T, NH, HS) tensor: out, dout.
  int64_t out_offset(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * NH + h) * HS; }
  // Offset of query head h at position (b, t) in q or dq.
  int64_t q_offset(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * ld.q + h * HS; }
  // Offset of kv head kh at position (b, t) in k, v, dk or dv.
  int64_t kv_offset(int64_t b, int64_t t, int64_t kh) const { return (b * T + t) * ld.kv + kh * HS; }
};

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int64_t B,
                       int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t qkv_stride) {
  const AttentionShape s{B, T, NH, NKV, HS, qkv_row_strides(NH, NKV, HS, qkv_stride)};
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  // Row r = (b * NH + h) * T + t, the same order as lse.
  parallel_ranges(B * NH * T, kRowGrain, [&](int64_t r0, int64_t r1) {
    std::vector<float> scores(T), acc(HS);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH), kh = h / s.group();
      const float* qt = q + s.q_offset(b, t, h);
      float max_score = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j <= t; ++j) {
        scores[j] = scale * dot(qt, k + s.kv_offset(b, j, kh), HS);
        if (scores[j] > max_score) max_score = scores[j];
      }
      double sum = 0.0;
      for (int64_t i = 0; i < HS; ++i) acc[i] = 0.0f;
      for (int64_t j = 0; j <= t; ++j) {
        const float p = std::exp(scores[j] - max_score);
        sum += p;
        const float* vj = v + s.kv_offset(b, j, kh);
        for (int64_t i = 0; i < HS; ++i) acc[i] += p * vj[i];
      }
      const float inv_sum = static_cast<float>(1.0 / sum);
      float* ot = out + s.out_offset(b, t, h);
      for (int64_t i = 0; i < HS; ++i) ot[i] = acc[i] * inv_sum;
      lse[r] = max_score + static_cast<float>(std::log(sum));
    }
  });
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, int64_t B, int64_t T, int64_t NH,
                        int64_t NKV, int64_t HS, int64_t qkv_stride) {
  const AttentionShape s{B, T, NH, NKV, HS, qkv_row_strides(NH, NKV, HS, qkv_stride)};
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));

  // D (B, NH, T): row r = (b * NH + h) * T + t, as lse.
  std::vector<float> dout_dot_out(B * NH * T);
  parallel_ranges(B * NH * T, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
      const int64_t off = s.out_offset(b, t, h);
      dout_dot_out[r] = dot(dout + off, out + off, HS);
    }
  });

  // dq, one task per query row.
  parallel_ranges(B * NH * T, kRowGrain, [&](int64_t r0, int64_t r1) {
    std::vector<float> acc(HS);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH), kh = h / s.group();
      const int64_t off = s.q_offset(b, t, h);
      const float* qt = q + off;
      const float* dot_t = dout + s.out_offset(b, t, h);
      for (int64_t i = 0; i < HS; ++i) acc[i] = 0.0f;
      for (int64_t j = 0; j <= t; ++j) {
        const float* kj = k + s.kv_offset(b, j, kh);
        const float p = std::exp(scale * dot(qt, kj, HS) - lse[r]);
        const float ds = p * (dot(dot_t, v + s.kv_offset(b, j, kh), HS) - dout_dot_out[r]);
        for (int64_t i = 0; i < HS; ++i) acc[i] += ds * kj[i];
      }
      float* dqt = dq + off;
      for (int64_t i = 0; i < HS; ++i) dqt[i] += scale * acc[i];
    }
  });

  // dk and dv, one task per key row; row r = (b * NKV + kh) * T + j.
  parallel_ranges(B * NKV * T, kRowGrain, [&](int64_t r0, int64_t r1) {
    std::vector<float> dk_acc(HS), dv_acc(HS);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t j = r % T, kh = (r / T) % NKV, b = r / (T * NKV);
      const int64_t kv_off = s.kv_offset(b, j, kh);
      const float* kj = k + kv_off;
      const float* vj = v + kv_off;
      for (int64_t i = 0; i < HS; ++i) dk_acc[i] = dv_acc[i] = 0.0f;
      for (int64_t h = kh * s.group(); h < (kh + 1) * s.group(); ++h) {
        const int64_t row0 = (b * NH + h) * T;  // lse / D row of (b, h, t = 0)
        for (int64_t t = j; t < T; ++t) {
          const float* qt = q + s.q_offset(b, t, h);
          const float* dot_t = dout + s.out_offset(b, t, h);
          const float p = std::exp(scale * dot(qt, kj, HS) - lse[row0 + t]);
          const float ds = p * (dot(dot_t, vj, HS) - dout_dot_out[row0 + t]);
          for (int64_t i = 0; i < HS; ++i) {
            dv_acc[i] += p * dot_t[i];
            dk_acc[i] += ds * qt[i];
          }
        }
      }
      float* dkj = dk + kv_off;
      float* dvj = dv + kv_off;
      for (int64_t i = 0; i < HS; ++i) {
        dkj[i] += scale * dk_acc[i];
        dvj[i] += dv_acc[i];
      }
    }
  });
}

}  // namespace strata::kernels
