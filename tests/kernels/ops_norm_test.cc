// Tests for kernels/cpu/ops_norm.h (LayerNorm, RMSNorm) against plain float64 references:
// forward and saved statistics, backward (and its float64 finite-difference check),
// accumulation, guard bytes, odd sizes, determinism.
#include "kernels/cpu/ops_norm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels/ops_test_support.h"

namespace strata::kernels {
namespace {

using testing::Doubles;
using testing::GuardedBuffer;
using testing::OpSpec;

constexpr float kEps = 1e-5f;

// Per-row mean and 1 / sqrt(var + eps) (LayerNorm) or 1 / sqrt(mean(x^2) + eps) (RMSNorm).
struct RowStats {
  std::vector<double> mean, rstd;
};
RowStats reference_stats(const std::vector<double>& x, int64_t N, int64_t C, bool rms) {
  RowStats s{std::vector<double>(N), std::vector<double>(N)};
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0.0, sq = 0.0;
    for (int64_t i = 0; i < C; ++i) sum += x[n * C + i];
    s.mean[n] = rms ? 0.0 : sum / C;
    for (int64_t i = 0; i < C; ++i) sq += (x[n * C + i] - s.mean[n]) * (x[n * C + i] - s.mean[n]);
    s.rstd[n] = 1.0 / std::sqrt(sq / C + kEps);
  }
  return s;
}

// LayerNorm (rms = false; inputs inp, weight, bias) or RMSNorm (rms = true; inputs inp, weight):
// y = (x - mean) * rstd * w [+ b], with mean = 0 for RMSNorm.
Doubles reference_norm_forward(const Doubles& in, int64_t N, int64_t C, bool rms) {
  const RowStats s = reference_stats(in[0], N, C, rms);
  std::vector<double> out(N * C);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < C; ++i) {
      out[n * C + i] = (in[0][n * C + i] - s.mean[n]) * s.rstd[n] * in[1][i] + (rms ? 0.0 : in[2][i]);
    }
  }
  return {out};
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = w dy (LayerNorm; RMSNorm drops mean(g)),
// dw = sum_n dy xhat, db = sum_n dy.
Doubles reference_norm_backward(const Doubles& in, const Doubles& dout, int64_t N, int64_t C, bool rms) {
  const RowStats s = reference_stats(in[0], N, C, rms);
  Doubles g{std::vector<double>(N * C), std::vector<double>(C)};
  if (!rms) g.emplace_back(C);
  for (int64_t n = 0; n < N; ++n) {
    double g_mean = 0.0, g_xhat_mean = 0.0;
    for (int64_t i = 0; i < C; ++i) {
      const double xhat = (in[0][n * C + i] - s.mean[n]) * s.rstd[n];
      const double gi = in[1][i] * dout[0][n * C + i];
      g_mean += gi / C;
      g_xhat_mean += gi * xhat / C;
      g[1][i] += dout[0][n * C + i] * xhat;
      if (!rms) g[2][i] += dout[0][n * C + i];
    }
    if (rms) g_mean = 0.0;
    for (int64_t i = 0; i < C; ++i) {
      const double xhat = (in[0][n * C + i] - s.mean[n]) * s.rstd[n];
      g[0][n * C + i] = s.rstd[n] * (in[1][i] * dout[0][n * C + i] - g_mean - xhat * g_xhat_mean);
    }
  }
  return g;
}

OpSpec norm_spec(int64_t N, int64_t C, bool rms) {
  OpSpec spec;
  spec.name = std::string(rms ? "rmsnorm" : "layernorm") + " N=" + std::to_string(N) + " C=" + std::to_string(C);
  // Inputs off-centre (mean ~0.5) so LayerNorm's mean subtraction matters.
  spec.inputs = {testing::random_floats(N * C, 21, -2.0f, 3.0f), testing::random_floats(C, 22)};
  if (!rms) spec.inputs.push_back(testing::random_floats(C, 23));
  spec.output_sizes = {static_cast<size_t>(N * C)};
  // Forward into `out`; the saved statistics go to guarded buffers checked here.
  const auto forward = [=](const testing::ConstFloatPtrs& in, float* out, GuardedBuffer& mean, GuardedBuffer& rstd) {
    if (rms) {
      rmsnorm_forward(out, rstd.data(), in[0], in[1], N, C, kEps);
    } else {
      layernorm_forward(out, mean.data(), rstd.data(), in[0], in[1], in[2], N, C, kEps);
    }
    EXPECT_TRUE(mean.guards_intact() && rstd.guards_intact()) << "saved statistics guard bytes";
  };
  spec.forward = [=](const testing::ConstFloatPtrs& in, const testing::FloatPtrs& out) {
    GuardedBuffer mean(N), rstd(N);
    forward(in, out[0], mean, rstd);
  };
  spec.backward = [=](const testing::ConstFloatPtrs& in, const testing::ConstFloatPtrs& dout,
                      const testing::FloatPtrs& grads) {
    GuardedBuffer out(N * C), mean(N), rstd(N);
    forward(in, out.data(), mean, rstd);
    if (rms) {
      rmsnorm_backward(grads[0], grads[1], dout[0], in[0], in[1], rstd.data(), N, C);
    } else {
      layernorm_backward(grads[0], grads[1], grads[2], dout[0], in[0], in[1], mean.data(), rstd.data(), N, C);
    }
  };
  spec.reference_forward = [=](const Doubles& in) { return reference_norm_forward(in, N, C, rms); };
  spec.reference_backward = [=](const Doubles& in, const Doubles& dout) {
    return reference_norm_backward(in, dout, N, C, rms);
  };
  // Normalised values are O(1) and each is a few fp32 operations on double-accumulated statistics:
  // ~1e-7 error; gradients add an fp32 sum of C terms.
  spec.forward_atol = 1e-5;
  spec.forward_rtol = 1e-5;
  spec.backward_atol = 1e-5;
  spec.backward_rtol = 1e-4;
  return spec;
}

TEST(OpsNorm, LayerNormConforms) { testing::expect_op_conforms(norm_spec(6, 10, false)); }

TEST(OpsNorm, RmsNormConforms) { testing::expect_op_conforms(norm_spec(6, 10, true)); }

TEST(OpsNorm, ConformAtOddSizes) {
  for (bool rms : {false, true}) {
    testing::expect_op_conforms(norm_spec(17, 1, rms));  // C = 1: LayerNorm's output is the bias
    testing::expect_op_conforms(norm_spec(1, 33, rms));
  }
}

TEST(OpsNorm, DeterministicAtLargerShape) {
  for (bool rms : {false, true}) {
    const OpSpec spec = norm_spec(300, 200, rms);
    testing::expect_backward_matches_reference(spec);
    testing::expect_deterministic_across_thread_counts(spec);
  }
}

TEST(OpsNorm, SavedStatisticsMatchReference) {
  const int64_t N = 5, C = 12;
  const auto x = testing::random_floats(N * C, 24, -2.0f, 3.0f), w = testing::random_floats(C, 25),
             b = testing::random_floats(C, 26);
  GuardedBuffer out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, kEps);
  const RowStats want = reference_stats(testing::widen(x), N, C, false);
  EXPECT_TRUE(testing::all_close(mean.data(), want.mean, 1e-6, 1e-6));
  EXPECT_TRUE(testing::all_close(rstd.data(), want.rstd, 0.0, 1e-6));
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  EXPECT_TRUE(testing::all_close(rstd.data(), reference_stats(testing::widen(x), N, C, true).rstd, 0.0, 1e-6));
  EXPECT_TRUE(out.guards_intact() && mean.guards_intact() && rstd.guards_intact());
}

TEST(OpsNorm, NullGradientsAreSkipped) {
  const int64_t N = 4, C = 8;
  const auto x = testing::random_floats(N * C, 27), w = testing::random_floats(C, 28),
             b = testing::random_floats(C, 29), dy = testing::random_floats(N * C, 30);
  GuardedBuffer out(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C), only_dw(C);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, kEps);
  layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  layernorm_backward(nullptr, only_dw.data(), nullptr, dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                     C);
  EXPECT_TRUE(testing::bit_identical(only_dw.values(), dw.values()));
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  GuardedBuffer rms_dx(N * C), rms_dw(C), rms_only_dx(N * C);
  rmsnorm_backward(rms_dx.data(), rms_dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
  rmsnorm_backward(rms_only_dx.data(), nullptr, dy.data(), x.data(), w.data(), rstd.data(), N, C);
  EXPECT_TRUE(testing::bit_identical(rms_only_dx.values(), rms_dx.values()));
}

}  // namespace
}  // namespace strata::kernels
