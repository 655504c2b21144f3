// Tests for kernels/cpu/ops_rope.h against a plain float64 rotary embedding ("rotate half"
// pairing): forward, backward (and its float64 finite-difference check), guard bytes, position
// offset, in-place forward and backward, determinism, row strides (q or k inside the fused
// projection's rows).
#include "kernels/cpu/ops_rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/kernels/ops_test_support.h"

namespace strata::kernels {
namespace {

using testing::Doubles;
using testing::OpSpec;

// Rotates each (x[i], x[i + HS/2]) pair of x (B, T, NH, HS) by +angle (or -angle when inverse).
std::vector<double> reference_rotate(const std::vector<double>& x, int64_t B, int64_t T, int64_t NH, int64_t HS,
                                     double theta, int64_t offset, bool inverse) {
  std::vector<double> y(x.size());
  const int64_t half = HS / 2;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < NH; ++h) {
        const int64_t base = ((b * T + t) * NH + h) * HS;
        for (int64_t i = 0; i < half; ++i) {
          const double angle = (offset + t) * std::pow(theta, -2.0 * i / HS) * (inverse ? -1.0 : 1.0);
          const double x1 = x[base + i], x2 = x[base + i + half];
          y[base + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
          y[base + i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
        }
      }
    }
  }
  return y;
}

OpSpec rope_spec(int64_t B, int64_t T, int64_t NH, int64_t HS, float theta, int64_t offset) {
  OpSpec spec;
  spec.name = "rope B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
              " HS=" + std::to_string(HS) + " theta=" + std::to_string(theta) + " offset=" + std::to_string(offset);
  spec.inputs = {testing::random_floats(B * T * NH * HS, 51)};
  spec.output_sizes = {static_cast<size_t>(B * T * NH * HS)};
  spec.forward = [=](const testing::ConstFloatPtrs& in, const testing::FloatPtrs& out) {
    rope_forward(out[0], in[0], B, T, NH, HS, theta, offset);
  };
  // rope_backward overwrites; the harness's contract is +=, so the spec adds its result.
  spec.backward = [=](const testing::ConstFloatPtrs& in, const testing::ConstFloatPtrs& dout,
                      const testing::FloatPtrs& grads) {
    std::vector<float> d(static_cast<size_t>(B * T * NH * HS));
    rope_backward(d.data(), dout[0], B, T, NH, HS, theta, offset);
    for (size_t i = 0; i < d.size(); ++i) grads[0][i] += d[i];
  };
  spec.reference_forward = [=](const Doubles& in) {
    return Doubles{reference_rotate(in[0], B, T, NH, HS, theta, offset, false)};
  };
  spec.reference_backward = [=](const Doubles& in, const Doubles& dout) {
    return Doubles{reference_rotate(dout[0], B, T, NH, HS, theta, offset, true)};
  };
  // cos/sin are rounded to fp32 (~6e-8 relative) before two fp32 products and a sum of O(1) terms.
  spec.forward_atol = spec.backward_atol = 1e-6;
  spec.forward_rtol = spec.backward_rtol = 1e-6;
  return spec;
}

TEST(OpsRope, Conforms) { testing::expect_op_conforms(rope_spec(2, 5, 3, 8, kRopeThetaDefault, 0)); }

TEST(OpsRope, ConformsWithOffsetAndOtherTheta) {
  testing::expect_op_conforms(rope_spec(1, 4, 2, 6, 500000.0f, 1000));
}

TEST(OpsRope, ConformsAtOddSizes) {
  testing::expect_op_conforms(rope_spec(3, 1, 1, 2, kRopeThetaDefault, 7));  // T = 1, HS = 2
  testing::expect_op_conforms(rope_spec(1, 17, 1, 4, kRopeThetaDefault, 0));
}

TEST(OpsRope, DeterministicAtLargerShape) {
  testing::expect_deterministic_across_thread_counts(rope_spec(2, 130, 4, 64, kRopeThetaDefault, 5));
}

TEST(OpsRope, PositionZeroIsIdentityAndInPlaceEqualsOutOfPlace) {
  const int64_t B = 2, T = 6, NH = 3, HS = 8, n = B * T * NH * HS;
  const auto x = testing::random_floats(n, 52);
  std::vector<float> out(n), in_place = x;
  rope_forward(out.data(), x.data(), B, T, NH, HS, kRopeThetaDefault, 0);
  rope_forward(in_place.data(), in_place.data(), B, T, NH, HS, kRopeThetaDefault, 0);
  EXPECT_TRUE(testing::bit_identical(in_place, out));
  for (int64_t b = 0; b < B; ++b) {  // t = 0 rows of every batch element are unchanged
    for (int64_t i = 0; i < NH * HS; ++i) EXPECT_EQ(out[b * T * NH * HS + i], x[b * T * NH * HS + i]);
  }
}

// The backward overwrites dinp (whatever it held) and may run in place, with the same bits.
TEST(OpsRope, BackwardOverwritesAndRunsInPlace) {
  const int64_t B = 2, T = 5, NH = 3, HS = 8, n = B * T * NH * HS;
  const auto dout = testing::random_floats(n, 54);
  std::vector<float> dinp(n, std::numeric_limits<float>::quiet_NaN()), in_place = dout;
  rope_backward(dinp.data(), dout.data(), B, T, NH, HS, kRopeThetaDefault, 2);
  rope_backward(in_place.data(), in_place.data(), B, T, NH, HS, kRopeThetaDefault, 2);
  for (float x : dinp) ASSERT_FALSE(std::isnan(x)) << "dinp's old value was read";
  EXPECT_TRUE(testing::bit_identical(in_place, dinp));
}

// With rows `stride` apart (q inside the fused projection's rows), forward and backward give the
// packed layout's bits and never touch the other columns.
TEST(OpsRope, RowStrideGivesThePackedBitsAndLeavesTheOtherColumns) {
  const int64_t B = 2, T = 6, NH = 2, HS = 8, cols = NH * HS, stride = cols + 24, rows = B * T;
  const auto x = testing::random_floats(rows * cols, 55);
  std::vector<float> packed(rows * cols), wide(rows * stride, -7.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) wide[r * stride + c] = x[r * cols + c];
  for (const bool backward : {false, true}) {
    std::vector<float> got = wide;
    if (backward) {
      rope_backward(packed.data(), x.data(), B, T, NH, HS, kRopeThetaDefault, 1);
      rope_backward(got.data(), got.data(), B, T, NH, HS, kRopeThetaDefault, 1, stride);
    } else {
      rope_forward(packed.data(), x.data(), B, T, NH, HS, kRopeThetaDefault, 1);
      rope_forward(got.data(), got.data(), B, T, NH, HS, kRopeThetaDefault, 1, stride);
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(std::memcmp(&got[r * stride + c], &packed[r * cols + c], 4), 0)
            << (backward ? "backward" : "forward") << " row " << r << " column " << c;
      }
      for (int64_t c = cols; c < stride; ++c) ASSERT_EQ(got[r * stride + c], -7.0f) << "column " << c << " written";
    }
  }
}

// Rotating by +angle and back by the backward's inverse rotation returns the input.
TEST(OpsRope, BackwardInvertsForward) {
  const int64_t B = 1, T = 9, NH = 2, HS = 16, n = B * T * NH * HS;
  const auto x = testing::random_floats(n, 53);
  std::vector<float> y(n), back(n, 0.0f);
  rope_forward(y.data(), x.data(), B, T, NH, HS, kRopeThetaDefault, 100);
  rope_backward(back.data(), y.data(), B, T, NH, HS, kRopeThetaDefault, 100);
  EXPECT_TRUE(testing::all_close(back, testing::widen(x), 1e-6, 0.0));
}

}  // namespace
}  // namespace strata::kernels
