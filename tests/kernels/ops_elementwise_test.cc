// Tests for kernels/cpu/ops_elementwise.h (GELU, SwiGLU, residual add) against plain float64
// references: forward, backward (and its float64 finite-difference check), accumulation, guard
// bytes, odd sizes, in-place forward, determinism.
#include "kernels/cpu/ops_elementwise.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels/ops_test_support.h"

namespace strata::kernels {
namespace {

using testing::Doubles;
using testing::OpSpec;

double reference_gelu(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}
double reference_gelu_grad(double x) {
  const double s = std::sqrt(2.0 / M_PI), u = s * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}
double reference_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Elementwise fp32 math (tanh, exp) is within a few ulps: 1e-6 absolute on O(1) values.
void set_elementwise_tolerances(OpSpec* spec) {
  spec->forward_atol = spec->backward_atol = 1e-6;
  spec->forward_rtol = spec->backward_rtol = 1e-5;
}

OpSpec gelu_spec(int64_t n) {
  OpSpec spec;
  spec.name = "gelu n=" + std::to_string(n);
  spec.inputs = {testing::random_floats(n, 31, -4.0f, 4.0f)};
  spec.output_sizes = {static_cast<size_t>(n)};
  spec.forward = [=](const testing::ConstFloatPtrs& in, const testing::FloatPtrs& out) {
    gelu_forward(out[0], in[0], n);
  };
  spec.backward = [=](const testing::ConstFloatPtrs& in, const testing::ConstFloatPtrs& dout,
                      const testing::FloatPtrs& grads) { gelu_backward(grads[0], in[0], dout[0], n); };
  spec.reference_forward = [=](const Doubles& in) {
    std::vector<double> out(n);
    for (int64_t i = 0; i < n; ++i) out[i] = reference_gelu(in[0][i]);
    return Doubles{out};
  };
  spec.reference_backward = [=](const Doubles& in, const Doubles& dout) {
    std::vector<double> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = reference_gelu_grad(in[0][i]) * dout[0][i];
    return Doubles{g};
  };
  set_elementwise_tolerances(&spec);
  return spec;
}

// Input (N, 2H): gate = columns [0, H), up = columns [H, 2H).
OpSpec swiglu_spec(int64_t N, int64_t H) {
  OpSpec spec;
  spec.name = "swiglu N=" + std::to_string(N) + " H=" + std::to_string(H);
  spec.inputs = {testing::random_floats(N * 2 * H, 32, -4.0f, 4.0f)};
  spec.output_sizes = {static_cast<size_t>(N * H)};
  spec.forward = [=](const testing::ConstFloatPtrs& in, const testing::FloatPtrs& out) {
    swiglu_forward(out[0], in[0], N, H);
  };
  spec.backward = [=](const testing::ConstFloatPtrs& in, const testing::ConstFloatPtrs& dout,
                      const testing::FloatPtrs& grads) { swiglu_backward(grads[0], in[0], dout[0], N, H); };
  spec.reference_forward = [=](const Doubles& in) {
    std::vector<double> out(N * H);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < H; ++i) {
        const double g = in[0][n * 2 * H + i], u = in[0][n * 2 * H + H + i];
        out[n * H + i] = g * reference_sigmoid(g) * u;
      }
    }
    return Doubles{out};
  };
  spec.reference_backward = [=](const Doubles& in, const Doubles& dout) {
    std::vector<double> d(N * 2 * H);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < H; ++i) {
        const double g = in[0][n * 2 * H + i], u = in[0][n * 2 * H + H + i], dy = dout[0][n * H + i];
        const double sig = reference_sigmoid(g);
        d[n * 2 * H + i] = dy * u * (sig + g * sig * (1.0 - sig));
        d[n * 2 * H + H + i] = dy * g * sig;
      }
    }
    return Doubles{d};
  };
  set_elementwise_tolerances(&spec);
  return spec;
}

OpSpec residual_spec(int64_t n) {
  OpSpec spec;
  spec.name = "residual n=" + std::to_string(n);
  spec.inputs = {testing::random_floats(n, 33), testing::random_floats(n, 34)};
  spec.output_sizes = {static_cast<size_t>(n)};
  spec.forward = [=](const testing::ConstFloatPtrs& in, const testing::FloatPtrs& out) {
    residual_forward(out[0], in[0], in[1], n);
  };
  spec.backward = [=](const testing::ConstFloatPtrs& in, const testing::ConstFloatPtrs& dout,
                      const testing::FloatPtrs& grads) { residual_backward(grads[0], grads[1], dout[0], n); };
  spec.reference_forward = [=](const Doubles& in) {
    std::vector<double> out(n);
    for (int64_t i = 0; i < n; ++i) out[i] = in[0][i] + in[1][i];
    return Doubles{out};
  };
  spec.reference_backward = [=](const Doubles& in, const Doubles& dout) { return Doubles{dout[0], dout[0]}; };
  set_elementwise_tolerances(&spec);
  return spec;
}

TEST(OpsElementwise, GeluConforms) {
  testing::expect_op_conforms(gelu_spec(37));
  testing::expect_op_conforms(gelu_spec(1));
}

TEST(OpsElementwise, SwiGluConforms) {
  testing::expect_op_conforms(swiglu_spec(5, 7));
  testing::expect_op_conforms(swiglu_spec(17, 1));  // H = 1
}

TEST(OpsElementwise, ResidualConforms) {
  testing::expect_op_conforms(residual_spec(29));
  testing::expect_op_conforms(residual_spec(1));
}

TEST(OpsElementwise, DeterministicAtLargerShape) {
  testing::expect_deterministic_across_thread_counts(gelu_spec(100003));
  testing::expect_deterministic_across_thread_counts(swiglu_spec(301, 130));
  testing::expect_deterministic_across_thread_counts(residual_spec(100003));
}

// GELU at large |x| saturates to x (or 0) without NaN from tanh/cosh overflow.
TEST(OpsElementwise, GeluSaturatesWithoutNan) {
  const std::vector<float> x = {-60.0f, -20.0f, 20.0f, 60.0f};
  std::vector<float> y(4), dx(4, 0.0f);
  const std::vector<float> ones(4, 1.0f);
  gelu_forward(y.data(), x.data(), 4);
  gelu_backward(dx.data(), x.data(), ones.data(), 4);
  EXPECT_TRUE(testing::all_close(y, {0.0, 0.0, 20.0, 60.0}, 1e-6, 0.0));
  EXPECT_TRUE(testing::all_close(dx, {0.0, 0.0, 1.0, 1.0}, 1e-6, 0.0));
}

TEST(OpsElementwise, InPlaceForwardEqualsOutOfPlace) {
  const auto x = testing::random_floats(1000, 35, -3.0f, 3.0f), b = testing::random_floats(1000, 36);
  std::vector<float> out(1000), in_place = x;
  gelu_forward(out.data(), x.data(), 1000);
  gelu_forward(in_place.data(), in_place.data(), 1000);
  EXPECT_TRUE(testing::bit_identical(in_place, out));
  in_place = x;
  residual_forward(out.data(), x.data(), b.data(), 1000);
  residual_forward(in_place.data(), in_place.data(), b.data(), 1000);
  EXPECT_TRUE(testing::bit_identical(in_place, out));
}

TEST(OpsElementwise, ResidualBackwardSkipsNullGradient) {
  const auto dy = testing::random_floats(10, 37);
  testing::GuardedBuffer db(10, 0.25f);
  residual_backward(nullptr, db.data(), dy.data(), 10);
  std::vector<double> want(10);
  for (int i = 0; i < 10; ++i) want[i] = 0.25 + dy[i];
  EXPECT_TRUE(testing::all_close(db.data(), want, 1e-7, 0.0));
  EXPECT_TRUE(db.guards_intact());
}

}  // namespace
}  // namespace strata::kernels
