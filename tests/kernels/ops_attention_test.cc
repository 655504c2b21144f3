// Tests for kernels/cpu/ops_attention.h against a plain float64 causal attention (scores,
// softmax, weighted sum, and the textbook softmax backward): forward and lse, backward (and its
// float64 finite-difference check), accumulation, guard bytes, grouped-query heads (NKV < NH,
// including one kv head), T = 1, determinism.
#include "kernels/cpu/ops_attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels/ops_test_support.h"

namespace strata::kernels {
namespace {

using testing::Doubles;
using testing::GuardedBuffer;
using testing::OpSpec;

struct Shape {
  int64_t B, T, NH, NKV, HS;
  int64_t q(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * NH + h) * HS; }
  int64_t kv(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * NKV + h / (NH / NKV)) * HS; }
};

// P (B, NH, T, T): softmax over j <= t of q_t . k_j / sqrt(HS); zero above the diagonal.
std::vector<double> reference_probabilities(const Doubles& in, const Shape& s) {
  std::vector<double> p(s.B * s.NH * s.T * s.T, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.HS));
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.NH; ++h) {
      for (int64_t t = 0; t < s.T; ++t) {
        double* row = &p[((b * s.NH + h) * s.T + t) * s.T];
        double max_score = -1e300, sum = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0.0;
          for (int64_t i = 0; i < s.HS; ++i) dot += in[0][s.q(b, t, h) + i] * in[1][s.kv(b, j, h) + i];
          row[j] = dot * scale;
          max_score = std::max(max_score, row[j]);
        }
        for (int64_t j = 0; j <= t; ++j) sum += (row[j] = std::exp(row[j] - max_score));
        for (int64_t j = 0; j <= t; ++j) row[j] /= sum;
      }
    }
  }
  return p;
}

// Inputs q (B, T, NH, HS), k, v (B, T, NKV, HS); output (B, T, NH, HS).
Doubles reference_attention_forward(const Doubles& in, const Shape& s) {
  const std::vector<double> p = reference_probabilities(in, s);
  std::vector<double> out(s.B * s.T * s.NH * s.HS, 0.0);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.NH; ++h) {
      for (int64_t t = 0; t < s.T; ++t) {
        for (int64_t j = 0; j <= t; ++j) {
          const double pj = p[((b * s.NH + h) * s.T + t) * s.T + j];
          for (int64_t i = 0; i < s.HS; ++i) out[s.q(b, t, h) + i] += pj * in[2][s.kv(b, j, h) + i];
        }
      }
    }
  }
  return {out};
}

// dP = dout v^T, dS = P (dP - rowsum(P dP)), dq = scale dS k, dk = scale dS^T q, dv = P^T dout.
Doubles reference_attention_backward(const Doubles& in, const Doubles& dout, const Shape& s) {
  const std::vector<double> p = reference_probabilities(in, s);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.HS));
  Doubles g{std::vector<double>(in[0].size()), std::vector<double>(in[1].size()), std::vector<double>(in[2].size())};
  std::vector<double> dp(s.T);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.NH; ++h) {
      for (int64_t t = 0; t < s.T; ++t) {
        const double* prow = &p[((b * s.NH + h) * s.T + t) * s.T];
        double p_dp = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          dp[j] = 0.0;
          for (int64_t i = 0; i < s.HS; ++i) dp[j] += dout[0][s.q(b, t, h) + i] * in[2][s.kv(b, j, h) + i];
          p_dp += prow[j] * dp[j];
        }
        for (int64_t j = 0; j <= t; ++j) {
          const double ds = prow[j] * (dp[j] - p_dp);
          for (int64_t i = 0; i < s.HS; ++i) {
            g[0][s.q(b, t, h) + i] += scale * ds * in[1][s.kv(b, j, h) + i];
            g[1][s.kv(b, j, h) + i] += scale * ds * in[0][s.q(b, t, h) + i];
            g[2][s.kv(b, j, h) + i] += prow[j] * dout[0][s.q(b, t, h) + i];
          }
        }
      }
    }
  }
  return g;
}

// The kernel forward into `out`, with lse into a guarded buffer checked here.
void run_forward(const Shape& s, const testing::ConstFloatPtrs& in, float* out, GuardedBuffer& lse) {
  attention_forward(out, lse.data(), in[0], in[1], in[2], s.B, s.T, s.NH, s.NKV, s.HS);
  EXPECT_TRUE(lse.guards_intact()) << "lse guard bytes";
}

OpSpec attention_spec(const Shape& s) {
  OpSpec spec;
  spec.name = "attention B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
              " NKV=" + std::to_string(s.NKV) + " HS=" + std::to_string(s.HS);
  const int64_t q_size = s.B * s.T * s.NH * s.HS, kv_size = s.B * s.T * s.NKV * s.HS;
  // Scores spread over a few units so the softmax is far from uniform.
  spec.inputs = {testing::random_floats(q_size, 61, -2.0f, 2.0f), testing::random_floats(kv_size, 62, -2.0f, 2.0f),
                 testing::random_floats(kv_size, 63)};
  spec.output_sizes = {static_cast<size_t>(q_size)};
  spec.forward = [=](const testing::ConstFloatPtrs& in, const testing::FloatPtrs& out) {
    GuardedBuffer lse(s.B * s.NH * s.T);
    run_forward(s, in, out[0], lse);
  };
  spec.backward = [=](const testing::ConstFloatPtrs& in, const testing::ConstFloatPtrs& dout,
                      const testing::FloatPtrs& grads) {
    GuardedBuffer out(q_size), lse(s.B * s.NH * s.T);
    run_forward(s, in, out.data(), lse);
    attention_backward(grads[0], grads[1], grads[2], dout[0], in[0], in[1], in[2], out.data(), lse.data(), s.B, s.T,
                       s.NH, s.NKV, s.HS);
  };
  spec.reference_forward = [=](const Doubles& in) { return reference_attention_forward(in, s); };
  spec.reference_backward = [=](const Doubles& in, const Doubles& dout) {
    return reference_attention_backward(in, dout, s);
  };
  // fp32 dot products of HS terms, exp, and sums over T keys (and over the group's heads for
  // dk/dv): relative error ~ (HS + T) * 2^-24 on O(1) values.
  spec.forward_atol = 2e-6;
  spec.forward_rtol = 1e-5;
  spec.backward_atol = 1e-5;
  spec.backward_rtol = 1e-4;
  return spec;
}

TEST(OpsAttention, MultiHeadConforms) { testing::expect_op_conforms(attention_spec({2, 5, 2, 2, 4})); }

TEST(OpsAttention, GroupedQueryConforms) {
  testing::expect_op_conforms(attention_spec({2, 4, 4, 2, 3}));  // two query heads per kv head
  testing::expect_op_conforms(attention_spec({1, 6, 3, 1, 4}));  // one kv head (multi-query)
}

TEST(OpsAttention, ConformsAtOddSizes) {
  testing::expect_op_conforms(attention_spec({3, 1, 2, 1, 5}));  // T = 1: out = v
  testing::expect_op_conforms(attention_spec({1, 7, 1, 1, 1}));  // HS = 1
}

TEST(OpsAttention, DeterministicAtLargerShape) {
  const OpSpec spec = attention_spec({2, 65, 4, 2, 16});
  testing::expect_forward_matches_reference(spec);
  testing::expect_backward_matches_reference(spec);
  testing::expect_deterministic_across_thread_counts(spec);
}

TEST(OpsAttention, LseIsLogSumExpOfScaledScores) {
  const Shape s{1, 4, 2, 1, 8};
  const auto q = testing::random_floats(s.B * s.T * s.NH * s.HS, 64, -2.0f, 2.0f);
  const auto k = testing::random_floats(s.B * s.T * s.NKV * s.HS, 65, -2.0f, 2.0f);
  const auto v = testing::random_floats(s.B * s.T * s.NKV * s.HS, 66);
  GuardedBuffer out(q.size()), lse(s.B * s.NH * s.T);
  attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s.B, s.T, s.NH, s.NKV, s.HS);
  std::vector<double> want;
  for (int64_t h = 0; h < s.NH; ++h) {
    for (int64_t t = 0; t < s.T; ++t) {
      double sum = 0.0;
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0.0;
        for (int64_t i = 0; i < s.HS; ++i) dot += double{q[s.q(0, t, h) + i]} * k[s.kv(0, j, h) + i];
        sum += std::exp(dot / std::sqrt(8.0));
      }
      want.push_back(std::log(sum));
    }
  }
  EXPECT_TRUE(testing::all_close(lse.data(), want, 1e-5, 1e-5));
  EXPECT_TRUE(lse.guards_intact() && out.guards_intact());
}

}  // namespace
}  // namespace strata::kernels
