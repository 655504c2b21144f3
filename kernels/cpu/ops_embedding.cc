// Encoder (token + position) and token embedding forward/backward (see ops_embedding.h). The
// forward copies the rows the table holds in parallel; the backward picks those rows (in row
// order), groups them by token (a stable sort), sums each group in row order and adds it to its
// table row once: one task owns each row of dwte. A tile's backward sorts only its own rows.
#include "kernels/cpu/ops_embedding.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/ops_parallel.h"

namespace strata::kernels {
namespace {

constexpr int64_t kRowGrain = 32;
constexpr int64_t kTokenGrain = 8;

}  // namespace

std::vector<int64_t> rows_holding(const int32_t* tokens, int64_t N, TableRows table) {
  std::vector<int64_t> rows;
  for (int64_t n = 0; n < N; ++n) {
    if (table.holds(tokens[n])) rows.push_back(n);
  }
  return rows;
}

TableRows table_rows_used(const int32_t* tokens, int64_t N, TableRows table) {
  int64_t lo = table.begin + table.count, hi = table.begin - 1;
  for (int64_t n = 0; n < N; ++n) {
    if (!table.holds(tokens[n])) continue;
    lo = std::min<int64_t>(lo, tokens[n]);
    hi = std::max<int64_t>(hi, tokens[n]);
  }
  return hi < lo ? TableRows{table.begin, 0} : TableRows{lo, hi - lo + 1};
}

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                     int64_t T, int64_t C, TableRows table) {
  parallel_ranges(B * T, kRowGrain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (!table.holds(tokens[r])) continue;
      const float* te = wte + (tokens[r] - table.begin) * C;
      const float* pe = wpe + (r % T) * C;
      float* y = out + r * C;
      for (int64_t i = 0; i < C; ++i) y[i] = te[i] + pe[i];
    }
  });
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                      int64_t T, int64_t C, TableRows table) {
  if (dwte != nullptr) token_embedding_backward(dwte, dout, tokens, B * T, C, table);
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

void token_embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t N, int64_t C,
                             TableRows table) {
  parallel_ranges(N, kRowGrain, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      if (!table.holds(tokens[n])) continue;
      std::memcpy(out + n * C, wte + (tokens[n] - table.begin) * C, sizeof(float) * C);
    }
  });
}

void token_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t N, int64_t C,
                              TableRows table) {
  // The rows the table holds, grouped by token, row order kept within a group (the same groups
  // and order as an untiled call's); one task per distinct token.
  std::vector<int64_t> order = rows_holding(tokens, N, table);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return tokens[a] < tokens[b]; });
  const auto held = static_cast<int64_t>(order.size());
  std::vector<int64_t> group_begin;
  for (int64_t i = 0; i < held; ++i) {
    if (i == 0 || tokens[order[i]] != tokens[order[i - 1]]) group_begin.push_back(i);
  }
  const int64_t groups = static_cast<int64_t>(group_begin.size());
  group_begin.push_back(held);
  parallel_ranges(groups, kTokenGrain, [&](int64_t g0, int64_t g1) {
    std::vector<float> acc(C);
    for (int64_t g = g0; g < g1; ++g) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t i = group_begin[g]; i < group_begin[g + 1]; ++i) {
        const float* dy = dout + order[i] * C;
        for (int64_t c = 0; c < C; ++c) acc[c] += dy[c];
      }
      float* dte = dwte + (tokens[order[group_begin[g]]] - table.begin) * C;
      for (int64_t c = 0; c < C; ++c) dte[c] += acc[c];
    }
  });
}

}  // namespace strata::kernels
