// Encoder (token + position) and token embedding forward/backward (see ops_embedding.h). The
// forward copies rows in parallel; the backward groups rows by token (a stable sort), sums each
// group in row order and adds it to its table row once: one task owns each row of dwte.
#include "kernels/cpu/ops_embedding.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cpu/ops_parallel.h"

namespace strata::kernels {
namespace {

constexpr int64_t kRowGrain = 32;
constexpr int64_t kTokenGrain = 8;

}  // namespace

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                     int64_t T, int64_t C) {
  parallel_ranges(B * T, kRowGrain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* te = wte + static_cast<int64_t>(tokens[r]) * C;
      const float* pe = wpe + (r % T) * C;
      float* y = out + r * C;
      for (int64_t i = 0; i < C; ++i) y[i] = te[i] + pe[i];
    }
  });
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                      int64_t T, int64_t C) {
  if (dwte != nullptr) token_embedding_backward(dwte, dout, tokens, B * T, C);
  if (dwpe != nullptr) {
    parallel_ranges(T, kRowGrain, [&](int64_t t0, int64_t t1) {
      std::vector<float> acc(C);
      for (int64_t t = t0; t < t1; ++t) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t b = 0; b < B; ++b) {
          const float* dy = dout + (b * T + t) * C;
          for (int64_t i = 0; i < C; ++i) acc[i] += dy[i];
        }
        float* dpe = dwpe + t * C;
        for (int64_t i = 0; i < C; ++i) dpe[i] += acc[i];
      }
    });
  }
}

void token_embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t N, int64_t C) {
  parallel_ranges(N, kRowGrain, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      std::memcpy(out + n * C, wte + static_cast<int64_t>(tokens[n]) * C, sizeof(float) * C);
    }
  });
}

void token_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t N, int64_t C) {
  // Rows grouped by token, row order kept within a group; one task per distinct token.
  std::vector<int64_t> order(N);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return tokens[a] < tokens[b]; });
  std::vector<int64_t> group_begin;
  for (int64_t i = 0; i < N; ++i) {
    if (i == 0 || tokens[order[i]] != tokens[order[i - 1]]) group_begin.push_back(i);
  }
  const int64_t groups = static_cast<int64_t>(group_begin.size());
  group_begin.push_back(N);
  parallel_ranges(groups, kTokenGrain, [&](int64_t g0, int64_t g1) {
    std::vector<float> acc(C);
    for (int64_t g = g0; g < g1; ++g) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t i = group_begin[g]; i < group_begin[g + 1]; ++i) {
        const float* dy = dout + order[i] * C;
        for (int64_t c = 0; c < C; ++c) acc[c] += dy[c];
      }
      float* dte = dwte + static_cast<int64_t>(tokens[order[group_begin[g]]]) * C;
      for (int64_t c = 0; c < C; ++c) dte[c] += acc[c];
    }
  });
}

}  // namespace strata::kernels
