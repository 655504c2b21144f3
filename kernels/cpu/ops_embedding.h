// Embedding lookups on the CPU: GPT-2's encoder (token + learned position embedding) and LLaMA's
// plain token embedding, forward and backward (a scatter-add into the tables), fp32. Pure compute:
// no I/O, no globals. The table may be a tile of the vocabulary (TableRows): rows whose token the
// tile does not hold are skipped at the cost of one compare, so visiting every tile with all rows
// writes each row once. Backward ACCUMULATES (+=): each table row gets one += of its summed
// gradient (the rows of one token summed in row order), so results are bit-identical whatever the
// thread count and however the vocabulary is tiled. The backward allocates O(N) scratch.
#pragma once

#include <cstdint>
#include <vector>

namespace strata::kernels {

// The token ids an embedding table holds: [begin, begin + count), table row r being id begin + r.
// The default holds every non-negative int32 id: the whole table of an untiled call, whose tokens
// the caller keeps in [0, V). Rows whose token is outside the range are skipped by every op.
struct TableRows {
  int64_t begin = 0;
  int64_t count = int64_t{1} << 31;
  bool holds(int32_t token) const { return token >= begin && token - begin < count; }
};

// Rows n (increasing) of tokens (N) whose id `table` holds.
std::vector<int64_t> rows_holding(const int32_t* tokens, int64_t N, TableRows table);
// The smallest part of `table` holding every id of tokens (N) that `table` holds: the table rows
// an op reads or writes ({table.begin, 0} when it holds none of them).
TableRows table_rows_used(const int32_t* tokens, int64_t N, TableRows table);

// out (B, T, C) = wte[tokens[b, t]] + wpe[t] for the rows whose token `table` holds (the others
// are not written); tokens (B, T), wte (table.count, C), wpe (maxT >= T, C).
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                     int64_t T, int64_t C, TableRows table = {});
// dwte (table.count, C) += scatter of dout (B, T, C) by token, over the rows whose token `table`
// holds; dwpe (maxT, C) rows 0..T-1 += sum over b of EVERY row, whatever `table`. Either gradient
// may be null.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                      int64_t T, int64_t C, TableRows table = {});

// out (N, C) = wte[tokens[n]] for the rows whose token `table` holds; tokens (N), wte (table.count, C).
void token_embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t N, int64_t C,
                             TableRows table = {});
// dwte (table.count, C) += scatter of dout (N, C) by token, over the rows whose token `table` holds.
void token_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t N, int64_t C,
                              TableRows table = {});

}  // namespace strata::kernels
