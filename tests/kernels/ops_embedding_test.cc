// Tests for kernels/cpu/ops_embedding.h (GPT-2 encoder, token embedding) against plain float64
// references: forward, backward scatter with repeated tokens (and its float64 finite-difference
// check), accumulation, untouched table rows, guard bytes, odd sizes, determinism.
#include "kernels/cpu/ops_embedding.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace strata::kernels
