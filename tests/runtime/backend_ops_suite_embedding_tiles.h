// The embedding ops over row tiles of the token table (row_begin, compute_ops.h), part of the
// backend conformance suite (included by backend_ops_suite.h, run on every backend in fp32, bf16
// and fp16): each tile its own device block, visited one at a time with all the rows, gives the
// untiled call's bits (forward rows and dwte rows, memcmp), writes no row whose token another tile
// holds (out starts as sentinel bytes), leaves a tile no token falls in as it was, and dwpe passed
// with one tile of row_begin != 0 is the untiled dwpe; a negative row_begin is invalid_argument.
#pragma once

#include <cstring>
#include <random>
#include <vector>

#include "tests/runtime/backend_ops_fixture.h"

namespace strata::ops_test {

// N = 3 x 100 rows over V = 1000 ids, C = 64: two rows in three drawn from the vocabulary less
// [300, 420), every third from {0, 5, 777, 999} (many repeats). Tiles: one row, uneven middles,
// [300, 420) which no token falls in, an uneven last.
struct EmbeddingTiles {
  static constexpr int64_t B = 3, T = 100, N = B * T, C = 64, V = 1000;
  std::vector<int64_t> begins = {0, 1, 300, 420, 777, V};  // the last is the end of the vocabulary
  std::vector<int32_t> tokens;

  EmbeddingTiles() {
    std::mt19937 rng(91);
    std::uniform_int_distribution<int32_t> any(0, V - 1 - 120), pick(0, 3);
    const int32_t common[4] = {0, 5, 777, 999};
    for (int64_t n = 0; n < N; ++n) {
      const int32_t x = any(rng);
      tokens.push_back(n % 3 == 2 ? common[pick(rng)] : x < 300 ? x : x + 120);
    }
  }
  size_t tiles() const { return begins.size() - 1; }
  int64_t rows(size_t k) const { return begins[k + 1] - begins[k]; }
  bool holds(size_t k, int64_t n) const { return tokens[n] >= begins[k] && tokens[n] < begins[k + 1]; }
};

// Table rows [begin, begin + rows) of a (V, C) table's host values.
inline std::vector<double> table_rows(const std::vector<double>& host, int64_t begin, int64_t rows, int64_t C) {
  return std::vector<double>(host.begin() + begin * C, host.begin() + (begin + rows) * C);
}

TEST_P(BackendOpsTest, EmbeddingTilesGiveTheUntiledBitsAndWriteOnlyTheirRows) {
  const EmbeddingTiles e;
  const int64_t B = e.B, T = e.T, N = e.N, C = e.C, V = e.V;
  const size_t row_bytes = static_cast<size_t>(C) * dtype_size(dt());
  Tensor tokens = ints(e.tokens), wte = act(V * C, random(V * C)), wpe = act(T * C, random(T * C));
  Tensor enc = act(N * C), tok = act(N * C);
  ASSERT_TRUE(ops().encoder_forward(dt(), enc.data, tokens.i(), wte.data, wpe.data, B, T, C, V).is_ok());
  ASSERT_TRUE(ops().token_embedding_forward(dt(), tok.data, tokens.i(), wte.data, N, C, V).is_ok());
  const std::vector<uint8_t> want_enc = read_bytes(enc), want_tok = read_bytes(tok);

  for (size_t k = 0; k < e.tiles(); ++k) {
    const int64_t begin = e.begins[k], rows = e.rows(k);
    SCOPED_TRACE(::testing::Message() << "tile [" << begin << ", " << begin + rows << ")");
    Tensor table = act(rows * C, table_rows(wte.host, begin, rows, C)), tile_enc = act(N * C), tile_tok = act(N * C);
    ASSERT_TRUE(
        ops().encoder_forward(dt(), tile_enc.data, tokens.i(), table.data, wpe.data, B, T, C, rows, begin).is_ok());
    ASSERT_TRUE(ops().token_embedding_forward(dt(), tile_tok.data, tokens.i(), table.data, N, C, rows, begin).is_ok());
    const std::vector<uint8_t> got_enc = read_bytes(tile_enc), got_tok = read_bytes(tile_tok);
    const std::vector<uint8_t> sentinel_row(row_bytes, kSentinel);
    int64_t held = 0, wrong = 0;
    for (int64_t n = 0; n < N; ++n) {
      const size_t at = static_cast<size_t>(n) * row_bytes;
      const bool h = e.holds(k, n);
      held += h;
      wrong += std::memcmp(&got_enc[at], h ? &want_enc[at] : sentinel_row.data(), row_bytes) != 0;
      wrong += std::memcmp(&got_tok[at], h ? &want_tok[at] : sentinel_row.data(), row_bytes) != 0;
    }
    EXPECT_EQ(wrong, 0) << "rows with other bits than the untiled call's, or rows of other tiles written";
    EXPECT_EQ(held > 0, begin != 300) << "the tile [300, 420) holds no token, every other tile some";
  }

  Tensor dout = act(N * C, random(N * C)), dwte = act(V * C, random(V * C)), dwpe = act(T * C, random(T * C));
  Tensor dwte_tok = act(V * C, dwte.host);
  ASSERT_TRUE(ops().encoder_backward(dt(), dwte.data, dwpe.data, dout.data, tokens.i(), B, T, C, V).is_ok());
  ASSERT_TRUE(ops().token_embedding_backward(dt(), dwte_tok.data, dout.data, tokens.i(), N, C, V).is_ok());
  std::vector<uint8_t> got_te, got_tok;
  Tensor tile_dwpe = act(T * C, dwpe.host);
  for (size_t k = 0; k < e.tiles(); ++k) {
    const int64_t begin = e.begins[k], rows = e.rows(k);
    SCOPED_TRACE(::testing::Message() << "tile [" << begin << ", " << begin + rows << ")");
    const std::vector<double> initial = table_rows(dwte.host, begin, rows, C);
    Tensor te = act(rows * C, initial), te_tok = act(rows * C, initial);
    void* pe = begin == 420 ? tile_dwpe.data : nullptr;  // dwpe with one tile only, not the first
    ASSERT_TRUE(ops().encoder_backward(dt(), te.data, pe, dout.data, tokens.i(), B, T, C, rows, begin).is_ok());
    ASSERT_TRUE(ops().token_embedding_backward(dt(), te_tok.data, dout.data, tokens.i(), N, C, rows, begin).is_ok());
    const std::vector<uint8_t> te_bytes = read_bytes(te), tok_bytes = read_bytes(te_tok);
    if (begin == 300) {
      EXPECT_EQ(read(te), initial) << "a tile no token falls in is not written";
    }
    got_te.insert(got_te.end(), te_bytes.begin(), te_bytes.end());
    got_tok.insert(got_tok.end(), tok_bytes.begin(), tok_bytes.end());
  }
  EXPECT_TRUE(got_te == read_bytes(dwte)) << "encoder dwte over the tiles differs from the untiled call's";
  EXPECT_TRUE(got_tok == read_bytes(dwte_tok)) << "token embedding dwte over the tiles differs";
  EXPECT_TRUE(read_bytes(tile_dwpe) == read_bytes(dwpe)) << "dwpe passed with the tile at 420";
}

TEST_P(BackendOpsTest, EmbeddingRowBeginMustNotBeNegative) {
  const int64_t N = 4, C = 8, V = 6;
  Tensor tokens = ints({0, 1, 2, 3}), wte = act(V * C, random(V * C)), out = act(N * C), dout = act(N * C);
  const Status statuses[] = {
      ops().encoder_forward(dt(), out.data, tokens.i(), wte.data, wte.data, 1, N, C, V, -1),
      ops().encoder_backward(dt(), wte.data, nullptr, dout.data, tokens.i(), 1, N, C, V, -1),
      ops().token_embedding_forward(dt(), out.data, tokens.i(), wte.data, N, C, V, -1),
      ops().token_embedding_backward(dt(), wte.data, dout.data, tokens.i(), N, C, V, -1),
  };
  for (const Status& s : statuses) {
    EXPECT_EQ(s.code(), Code::invalid_argument) << s.to_string();
    EXPECT_NE(s.message().find("row_begin = -1"), std::string::npos) << s.to_string();
  }
  EXPECT_EQ(read_bytes(out), std::vector<uint8_t>(out.bytes(), kSentinel)) << "nothing was queued";
}

}  // namespace strata::ops_test
