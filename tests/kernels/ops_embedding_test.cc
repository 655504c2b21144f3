// Tests for kernels/cpu/ops_embedding.h (GPT-2 encoder, token embedding) against plain float64
// references: forward, backward scatter with repeated tokens (and its float64 finite-difference
// check), accumulation, untouched table rows, guard bytes, odd sizes, determinism; and the table
// tiles (TableRows): every tiling of the vocabulary gives the untiled bits, rows of other tiles
// are never written, ids outside the table touch nothing.
#include "kernels/cpu/ops_embedding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "tests/kernels/ops_test_support.h"

namespace strata::kernels {
namespace {

using testing::Doubles;
using testing::OpSpec;

// n ids in [0, V), drawn from the first few ids so that repeats are common.
std::vector<int32_t> repeating_tokens(int64_t n, int64_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(V < 5 ? V - 1 : V / 2));
  std::vector<int32_t> t(n);
  for (auto& x : t) x = dist(rng);
  return t;
}

// Inputs: wte (V, C) and, for the encoder, wpe (maxT, C) with maxT = T + 2 (rows T.. stay unused).
OpSpec embedding_spec(int64_t B, int64_t T, int64_t C, int64_t V, bool with_positions) {
  const int64_t maxT = T + 2, N = B * T;
  const std::vector<int32_t> tokens = repeating_tokens(N, V, 41);
  OpSpec spec;
  spec.name = std::string(with_positions ? "encoder" : "token embedding") + " B=" + std::to_string(B) +
              " T=" + std::to_string(T) + " C=" + std::to_string(C) + " V=" + std::to_string(V);
  spec.inputs = {testing::random_floats(V * C, 42)};
  if (with_positions) spec.inputs.push_back(testing::random_floats(maxT * C, 43));
  spec.output_sizes = {static_cast<size_t>(N * C)};
  spec.forward = [=](const testing::ConstFloatPtrs& in, const testing::FloatPtrs& out) {
    if (with_positions) {
      encoder_forward(out[0], tokens.data(), in[0], in[1], B, T, C);
    } else {
      token_embedding_forward(out[0], tokens.data(), in[0], N, C);
    }
  };
  spec.backward = [=](const testing::ConstFloatPtrs& in, const testing::ConstFloatPtrs& dout,
                      const testing::FloatPtrs& grads) {
    if (with_positions) {
      encoder_backward(grads[0], grads[1], dout[0], tokens.data(), B, T, C);
    } else {
      token_embedding_backward(grads[0], dout[0], tokens.data(), N, C);
    }
  };
  spec.reference_forward = [=](const Doubles& in) {
    std::vector<double> out(N * C);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t c = 0; c < C; ++c) {
        out[n * C + c] = in[0][tokens[n] * C + c] + (with_positions ? in[1][(n % T) * C + c] : 0.0);
      }
    }
    return Doubles{out};
  };
  spec.reference_backward = [=](const Doubles& in, const Doubles& dout) {
    Doubles g{std::vector<double>(V * C)};
    if (with_positions) g.emplace_back(maxT * C);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t c = 0; c < C; ++c) {
        g[0][tokens[n] * C + c] += dout[0][n * C + c];
        if (with_positions) g[1][(n % T) * C + c] += dout[0][n * C + c];
      }
    }
    return g;
  };
  // Forward: one fp32 add (~6e-8). Backward: fp32 sums of up to N terms of O(1).
  spec.forward_atol = 1e-6;
  spec.backward_atol = 1e-5;
  return spec;
}

TEST(OpsEmbedding, EncoderConforms) { testing::expect_op_conforms(embedding_spec(3, 5, 4, 7, true)); }

TEST(OpsEmbedding, TokenEmbeddingConforms) { testing::expect_op_conforms(embedding_spec(2, 6, 5, 9, false)); }

TEST(OpsEmbedding, ConformAtOddSizes) {
  for (bool positions : {true, false}) {
    testing::expect_op_conforms(embedding_spec(4, 1, 3, 5, positions));   // T = 1
    testing::expect_op_conforms(embedding_spec(1, 17, 1, 3, positions));  // C = 1, V = 3: many repeats
  }
}

TEST(OpsEmbedding, DeterministicAtLargerShape) {
  for (bool positions : {true, false}) {
    const OpSpec spec = embedding_spec(4, 64, 96, 300, positions);
    testing::expect_backward_matches_reference(spec);
    testing::expect_deterministic_across_thread_counts(spec);
  }
}

// Table rows of tokens that do not occur, and position rows past T, are not written.
TEST(OpsEmbedding, BackwardLeavesUnusedRowsUntouched) {
  const int64_t B = 2, T = 3, C = 4, V = 6, maxT = 5;
  const std::vector<int32_t> tokens = {1, 4, 1, 4, 4, 1};
  const auto dout = testing::random_floats(B * T * C, 44);
  testing::GuardedBuffer dwte(V * C, 0.5f), dwpe(maxT * C, 0.5f);
  encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  for (int64_t v : {0, 2, 3, 5}) {
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(dwte.data()[v * C + c], 0.5f) << "row " << v;
  }
  for (int64_t t = T; t < maxT; ++t) {
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(dwpe.data()[t * C + c], 0.5f) << "position " << t;
  }
  // Token 1 occurs at rows 0, 2, 5.
  EXPECT_FLOAT_EQ(dwte.data()[1 * C], 0.5f + dout[0 * C] + dout[2 * C] + dout[5 * C]);
  EXPECT_TRUE(dwte.guards_intact() && dwpe.guards_intact());
}

TEST(OpsEmbedding, RowsHoldingAndTableRowsUsed) {
  const std::vector<int32_t> tokens = {3, 0, 7, 2, 7, -1, 12};
  const int64_t n = static_cast<int64_t>(tokens.size());
  EXPECT_EQ(rows_holding(tokens.data(), n, TableRows{2, 6}), (std::vector<int64_t>{0, 2, 3, 4}));
  EXPECT_EQ(rows_holding(tokens.data(), n, TableRows{0, 13}), (std::vector<int64_t>{0, 1, 2, 3, 4, 6}));
  EXPECT_TRUE(rows_holding(tokens.data(), n, TableRows{8, 4}).empty());
  const auto used = [&](TableRows table, int64_t count) {
    const TableRows u = table_rows_used(tokens.data(), count, table);
    return std::vector<int64_t>{u.begin, u.count};
  };
  EXPECT_EQ(used(TableRows{0, 13}, n), (std::vector<int64_t>{0, 13})) << "0 .. 12";
  EXPECT_EQ(used(TableRows{0, 8}, n), (std::vector<int64_t>{0, 8})) << "0 .. 7; 12 and -1 are not in it";
  EXPECT_EQ(used(TableRows{1, 5}, n), (std::vector<int64_t>{2, 2})) << "2 .. 3";
  EXPECT_EQ(used(TableRows{8, 4}, n), (std::vector<int64_t>{8, 0})) << "none held";
  EXPECT_EQ(used(TableRows{0, 13}, 0), (std::vector<int64_t>{0, 0})) << "no tokens";
  EXPECT_TRUE(TableRows{}.holds(0) && TableRows{}.holds(2147483647) && !TableRows{}.holds(-1));
}

// V = 1000, C = 64, N = 3 x 100 rows: 200 tokens drawn from the vocabulary less [300, 420), 100
// from {0, 5, 777, 999} (many repeats). Tiles: one row, uneven middles, one no token falls in,
// an uneven last.
constexpr int64_t kTileB = 3, kTileT = 100, kTileN = kTileB * kTileT, kTileC = 64, kTileV = 1000;
const std::vector<int64_t> kTileBegins = {0, 1, 300, 420, 777, 1000};  // the last is the end

std::vector<int32_t> tiled_tokens() {
  std::mt19937 rng(77);
  std::uniform_int_distribution<int32_t> any(0, kTileV - 1 - 120), pick(0, 3);
  const int32_t common[4] = {0, 5, 777, 999};
  std::vector<int32_t> t(kTileN);
  for (int64_t n = 0; n < kTileN; ++n) {
    if (n % 3 == 2) {
      t[n] = common[pick(rng)];
    } else {
      const int32_t x = any(rng);
      t[n] = x < 300 ? x : x + 120;  // skips [300, 420)
    }
  }
  return t;
}

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, sizeof(float) * n) == 0; }

TEST(OpsEmbedding, TiledForwardWritesTheUntiledBitsAndOnlyItsRows) {
  const std::vector<int32_t> tokens = tiled_tokens();
  const auto wte = testing::random_floats(kTileV * kTileC, 61), wpe = testing::random_floats(kTileT * kTileC, 62);
  const int64_t N = kTileN, C = kTileC;
  for (const bool positions : {true, false}) {
    SCOPED_TRACE(positions ? "encoder" : "token embedding");
    const auto forward = [&](float* out, const float* table, TableRows rows) {
      if (positions) {
        encoder_forward(out, tokens.data(), table, wpe.data(), kTileB, kTileT, C, rows);
      } else {
        token_embedding_forward(out, tokens.data(), table, N, C, rows);
      }
    };
    std::vector<float> untiled(N * C);
    forward(untiled.data(), wte.data(), TableRows{});
    testing::GuardedBuffer all_tiles(N * C, 0.25f);
    for (size_t k = 0; k + 1 < kTileBegins.size(); ++k) {
      const TableRows tile{kTileBegins[k], kTileBegins[k + 1] - kTileBegins[k]};
      SCOPED_TRACE(::testing::Message() << "tile [" << tile.begin << ", +" << tile.count << ")");
      const std::vector<float> table(wte.begin() + tile.begin * C, wte.begin() + (tile.begin + tile.count) * C);
      testing::GuardedBuffer out(N * C, 0.25f);
      forward(out.data(), table.data(), tile);
      forward(all_tiles.data(), table.data(), tile);
      int64_t written = 0, wrong = 0;
      for (int64_t n = 0; n < N; ++n) {
        const float* got = out.data() + n * C;
        if (tile.holds(tokens[n])) {
          ++written;
          wrong += !same_bits(got, untiled.data() + n * C, C);
        } else {
          wrong += std::count(got, got + C, 0.25f) != C;
        }
      }
      EXPECT_EQ(wrong, 0) << "rows with other bits than the untiled call's, or rows of other tiles written";
      EXPECT_EQ(written > 0, tile.begin != 300) << "the tile [300, 420) holds no token, the others do";
      EXPECT_TRUE(out.guards_intact());
    }
    EXPECT_TRUE(same_bits(all_tiles.data(), untiled.data(), N * C)) << "every tile in turn";
  }
}

TEST(OpsEmbedding, TiledBackwardGivesTheUntiledBits) {
  const std::vector<int32_t> tokens = tiled_tokens();
  const int64_t N = kTileN, C = kTileC, T = kTileT;
  const auto dout = testing::random_floats(N * C, 63), dwte0 = testing::random_floats(kTileV * C, 64);
  const auto dwpe0 = testing::random_floats(T * C, 65);
  std::vector<float> want_te = dwte0, want_pe = dwpe0, want_tok = dwte0;
  encoder_backward(want_te.data(), want_pe.data(), dout.data(), tokens.data(), kTileB, T, C);
  token_embedding_backward(want_tok.data(), dout.data(), tokens.data(), N, C);

  // One buffer per tile, each with guards: nothing is written outside a tile's rows.
  std::vector<float> got_te, got_tok, got_pe = dwpe0;
  for (size_t k = 0; k + 1 < kTileBegins.size(); ++k) {
    const TableRows tile{kTileBegins[k], kTileBegins[k + 1] - kTileBegins[k]};
    const std::vector<float> initial(dwte0.begin() + tile.begin * C, dwte0.begin() + (tile.begin + tile.count) * C);
    testing::GuardedBuffer te(initial), tok(initial);
    // dwpe in one call only, the tile [420, 777): it sums every row whatever the tile.
    encoder_backward(te.data(), tile.begin == 420 ? got_pe.data() : nullptr, dout.data(), tokens.data(), kTileB, T,
                     C, tile);
    token_embedding_backward(tok.data(), dout.data(), tokens.data(), N, C, tile);
    EXPECT_TRUE(te.guards_intact() && tok.guards_intact()) << "tile at " << tile.begin;
    if (tile.begin == 300) {
      EXPECT_EQ(te.values(), initial) << "a tile no token falls in is not written";
    }
    const std::vector<float> te_values = te.values(), tok_values = tok.values();
    got_te.insert(got_te.end(), te_values.begin(), te_values.end());
    got_tok.insert(got_tok.end(), tok_values.begin(), tok_values.end());
  }
  ASSERT_EQ(got_te.size(), want_te.size());
  EXPECT_TRUE(same_bits(got_te.data(), want_te.data(), kTileV * C)) << "encoder dwte";
  EXPECT_TRUE(same_bits(got_tok.data(), want_tok.data(), kTileV * C)) << "token embedding dwte";
  EXPECT_TRUE(same_bits(got_pe.data(), want_pe.data(), T * C)) << "dwpe";
}

// An untiled call told its table (TableRows{0, V}) skips ids outside [0, V): nothing past the
// table is read, nothing written for those rows.
TEST(OpsEmbedding, IdsOutsideTheTableTouchNothing) {
  const int64_t N = 4, C = 3, V = 5;
  const std::vector<int32_t> tokens = {4, -1, 5, 0};
  const auto wte = testing::random_floats(V * C, 66), dout = testing::random_floats(N * C, 67);
  testing::GuardedBuffer out(N * C, 0.5f), dwte(V * C, 0.0f);
  token_embedding_forward(out.data(), tokens.data(), wte.data(), N, C, TableRows{0, V});
  token_embedding_backward(dwte.data(), dout.data(), tokens.data(), N, C, TableRows{0, V});
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(out.data()[0 * C + c], wte[4 * C + c]);
    EXPECT_EQ(out.data()[1 * C + c], 0.5f);
    EXPECT_EQ(out.data()[2 * C + c], 0.5f);
    EXPECT_EQ(out.data()[3 * C + c], wte[c]);
    EXPECT_EQ(dwte.data()[4 * C + c], dout[c]);
    EXPECT_EQ(dwte.data()[0 * C + c], dout[3 * C + c]);
  }
  EXPECT_TRUE(out.guards_intact() && dwte.guards_intact());
}

}  // namespace
}  // namespace strata::kernels
