// Causal scaled-dot-product attention on the CPU with multi-head and grouped-query heads
// (query head h reads kv head h / (NH / NKV)), forward and backward, fp32. Pure compute: no
// globals, no I/O; scratch is small (per task T + HS floats; the backward also one (B, NH, T)).
// Not a KV-cache decoder: queries and keys cover the same T positions.
// Saved for the backward: the log-sum-exp of each query row's scores, lse (B, NH, T), not the
// probabilities (B, NH, T, T): the backward recomputes q.k from q and k (about one extra
// QK^T of compute) and memory stays O(T) per head instead of O(T^2) (at T = 4096, NH = 32 that
// is 2 MiB per sequence instead of 2 GiB).
// Every output element is owned by one task that sums in a fixed order: bit-identical results
// whatever the thread count. The backward ACCUMULATES (+=) into dq, dk, dv.
// qkv_stride (both functions): the row stride in elements between consecutive positions (b, t) of
// q, k, v, dq, dk and dv, so that they may be column blocks of one (B * T, qkv_stride) tensor (the
// fused projection's output); 0 means packed (NH * HS for q and dq, NKV * HS for the others), else
// >= NH * HS. out, dout and lse are always packed. The values never depend on the stride.
#pragma once

#include <cstdint>

namespace strata::kernels {

// The row strides qkv_stride gives (0: packed): q's and dq's, and k's, v's, dk's and dv's.
struct QkvRowStrides {
  int64_t q, kv;
};
constexpr QkvRowStrides qkv_row_strides(int64_t NH, int64_t NKV, int64_t HS, int64_t qkv_stride) {
  return qkv_stride != 0 ? QkvRowStrides{qkv_stride, qkv_stride} : QkvRowStrides{NH * HS, NKV * HS};
}

// q (B, T, NH, HS), k and v (B, T, NKV, HS), NH % NKV == 0; out (B, T, NH, HS);
// lse (B, NH, T) = log sum_{j <= t} exp(scale * q_t . k_j), scale = 1 / sqrt(HS).
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int64_t B,
                       int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t qkv_stride = 0);

// Given dout (B, T, NH, HS), the forward's out and lse: dq (B, T, NH, HS) +=, dk and dv
// (B, T, NKV, HS) += (summed over the query heads that share each kv head). None may be null.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, int64_t B, int64_t T, int64_t NH,
                        int64_t NKV, int64_t HS, int64_t qkv_stride = 0);

}  // namespace strata::kernels
