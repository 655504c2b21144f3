// Tests for kernels/cpu/ops_matmul.h against a plain float64 matmul: forward, backward (and its
// float64 finite-difference check), accumulation, nullable gradients, guard bytes, determinism.
#include "kernels/cpu/ops_matmul.h"

#include <gtest/gtest.h>

#include "tests/kernels/ops_test_support.h"

namespace strata::kernels {
namespace {

using testing::Doubles;
using testing::OpSpec;

// Inputs: inp (N, C), weight (OC, C), and bias (OC) when with_bias.
OpSpec matmul_spec(int64_t N, int64_t C, int64_t OC, bool with_bias) {
  OpSpec spec;
  spec.name = "matmul N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC) +
              (with_bias ? " bias" : " no bias");
  spec.inputs = {testing::random_floats(N * C, 1), testing::random_floats(OC * C, 2)};
  if (with_bias) spec.inputs.push_back(testing::random_floats(OC, 3));
  spec.output_sizes = {static_cast<size_t>(N * OC)};
  spec.forward = [=](const testing::ConstFloatPtrs& in, const testing::FloatPtrs& out) {
    matmul_forward(out[0], in[0], in[1], with_bias ? in[2] : nullptr, N, C, OC);
  };
  spec.backward = [=](const testing::ConstFloatPtrs& in, const testing::ConstFloatPtrs& dout,
                      const testing::FloatPtrs& grads) {
    matmul_backward(grads[0], grads[1], with_bias ? grads[2] : nullptr, dout[0], in[0], in[1], N, C, OC);
  };
  spec.reference_forward = [=](const Doubles& in) {
    std::vector<double> out(N * OC);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t o = 0; o < OC; ++o) {
        double sum = with_bias ? in[2][o] : 0.0;
        for (int64_t c = 0; c < C; ++c) sum += in[0][n * C + c] * in[1][o * C + c];
        out[n * OC + o] = sum;
      }
    }
    return Doubles{out};
  };
  spec.reference_backward = [=](const Doubles& in, const Doubles& dout) {
    Doubles g{std::vector<double>(N * C), std::vector<double>(OC * C)};
    if (with_bias) g.emplace_back(OC);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t o = 0; o < OC; ++o) {
        const double d = dout[0][n * OC + o];
        for (int64_t c = 0; c < C; ++c) {
          g[0][n * C + c] += d * in[1][o * C + c];
          g[1][o * C + c] += d * in[0][n * C + c];
        }
        if (with_bias) g[2][o] += d;
      }
    }
    return g;
  };
  // fp32 sums of K <= ~70 products of values in [-1, 1]: rounding error grows like
  // sqrt(K) * 2^-24 * |terms| (~1e-6); 1e-5 leaves a tenfold margin.
  spec.forward_atol = spec.backward_atol = 1e-5;
  spec.forward_rtol = spec.backward_rtol = 1e-5;
  return spec;
}

TEST(OpsMatmul, ConformsWithBias) { testing::expect_op_conforms(matmul_spec(5, 7, 3, true)); }

TEST(OpsMatmul, ConformsWithoutBias) { testing::expect_op_conforms(matmul_spec(4, 6, 5, false)); }

TEST(OpsMatmul, ConformsAtOddSizes) {
  testing::expect_op_conforms(matmul_spec(17, 1, 1, true));   // C = 1, OC = 1
  testing::expect_op_conforms(matmul_spec(1, 13, 11, true));  // one row
}

TEST(OpsMatmul, DeterministicAtLargerShape) {
  const OpSpec spec = matmul_spec(257, 70, 129, true);
  testing::expect_forward_matches_reference(spec);
  testing::expect_backward_matches_reference(spec);
  testing::expect_deterministic_across_thread_counts(spec);
}

// Each gradient alone (the others null) equals the one computed with all three.
TEST(OpsMatmul, NullGradientsAreSkippedAndOthersUnchanged) {
  const int64_t N = 9, C = 5, OC = 4;
  const auto inp = testing::random_floats(N * C, 11), weight = testing::random_floats(OC * C, 12);
  const auto dout = testing::random_floats(N * OC, 13);
  testing::GuardedBuffer dinp(N * C), dweight(OC * C), dbias(OC);
  matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), N, C, OC);

  testing::GuardedBuffer only_dinp(N * C), only_dweight(OC * C), only_dbias(OC);
  matmul_backward(only_dinp.data(), nullptr, nullptr, dout.data(), inp.data(), weight.data(), N, C, OC);
  matmul_backward(nullptr, only_dweight.data(), nullptr, dout.data(), inp.data(), weight.data(), N, C, OC);
  matmul_backward(nullptr, nullptr, only_dbias.data(), dout.data(), inp.data(), weight.data(), N, C, OC);
  EXPECT_TRUE(testing::bit_identical(only_dinp.values(), dinp.values()));
  EXPECT_TRUE(testing::bit_identical(only_dweight.values(), dweight.values()));
  EXPECT_TRUE(testing::bit_identical(only_dbias.values(), dbias.values()));
  for (const auto* b : {&only_dinp, &only_dweight, &only_dbias}) EXPECT_TRUE(b->guards_intact());
}

TEST(OpsMatmul, ZeroRowsWritesNothing) {
  const auto weight = testing::random_floats(6, 1), bias = testing::random_floats(3, 2);
  testing::GuardedBuffer out(0), dweight(6, 0.5f);
  matmul_forward(out.data(), nullptr, weight.data(), bias.data(), 0, 2, 3);
  matmul_backward(nullptr, dweight.data(), nullptr, nullptr, nullptr, weight.data(), 0, 2, 3);
  EXPECT_TRUE(out.guards_intact());
  EXPECT_TRUE(testing::bit_identical(dweight.values(), std::vector<float>(6, 0.5f)));
}

}  // namespace
}  // namespace strata::kernels
