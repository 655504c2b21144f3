// Tests of the fused CPU Adam/AdamW kernel (kernels/cpu/adam.h): every SIMD variant against the
// scalar reference element by element, the scalar kernel against a float64 Adam over 100 steps,
// 16-bit copy-out and gradient edge cases, and the gradient finite check.
//
// Bound between variants: 0 ulps (bit-identical weights, m, v and copy). Every variant performs
// the same IEEE operations (mul, add, div, sqrt -- each correctly rounded) in the same order with
// no FMA contraction (simd_ops.h), converts bf16/fp16 with the same round-to-nearest-even, and
// handles the tail with the scalar ops; so there is no rounding freedom left. Only NaN payloads are
// exempt (any NaN equals any NaN).
#include "kernels/cpu/adam.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "tests/kernels/adam_copy_guard.h"
#include "tests/kernels/optim_test_support.h"

namespace strata::kernels {
namespace {

using testing::encode_floats;
using testing::first_byte_mismatch;
using testing::first_float_mismatch;
using testing::random_floats;

// One tensor's buffers; run() applies one step at `level`.
struct AdamBuffers {
  AdamBuffers(size_t n, FloatFormat grad_format, CopyOut copy, uint32_t seed)
      : param(random_floats(n, seed, -1.0f, 1.0f)),
        m(random_floats(n, seed + 1, -0.01f, 0.01f)),
        v(random_floats(n, seed + 2, 0.0f, 1e-4f)),
        grad(encode_floats(random_floats(n, seed + 3, -0.1f, 0.1f), grad_format)),
        copy_out(n * copy_out_size(copy)),
        formats{grad_format, copy} {}
  AdamSpan span() {
    return AdamSpan{param.data(), m.data(), v.data(), grad.data(), copy_out.data(), param.size()};
  }
  SimdLevel run(const AdamHyper& hyper, SimdLevel level) {
    return adam_update(adam_constants(hyper), formats, span(), level);
  }
  std::vector<float> param, m, v;
  std::vector<uint8_t> grad, copy_out;
  AdamFormats formats;
};

void expect_same(const AdamBuffers& ref, const AdamBuffers& got, const std::string& what) {
  const size_t n = ref.param.size();
  EXPECT_EQ(first_float_mismatch(ref.param.data(), got.param.data(), n), n) << what << " param";
  EXPECT_EQ(first_float_mismatch(ref.m.data(), got.m.data(), n), n) << what << " m";
  EXPECT_EQ(first_float_mismatch(ref.v.data(), got.v.data(), n), n) << what << " v";
  EXPECT_EQ(first_byte_mismatch(ref.copy_out.data(), got.copy_out.data(), ref.copy_out.size()),
            ref.copy_out.size())
      << what << " copy";
}

class AdamVariantTest : public ::testing::TestWithParam<SimdLevel> {};

TEST_P(AdamVariantTest, MatchesScalarBitForBit) {
  const SimdLevel level = GetParam();
  STRATA_SKIP_IF_UNSUPPORTED(level);
  for (size_t n : testing::kOptimSizes) {
    for (FloatFormat g : {FloatFormat::f32, FloatFormat::bf16, FloatFormat::f16}) {
      for (CopyOut copy : {CopyOut::none, CopyOut::bf16, CopyOut::f16}) {
        for (AdamMode mode : {AdamMode::adam, AdamMode::adamw}) {
          AdamBuffers ref(n, g, copy, 7), got(n, g, copy, 7);
          AdamHyper hyper;
          hyper.mode = mode;
          hyper.weight_decay = 0.1f;
          hyper.grad_scale = 0.75f;
          for (int64_t step = 1; step <= 2; ++step) {
            hyper.step = step;
            EXPECT_EQ(ref.run(hyper, SimdLevel::scalar), SimdLevel::scalar);
            EXPECT_EQ(got.run(hyper, level), level);
          }
          expect_same(ref, got,
                      "n=" + std::to_string(n) + " grad=" + std::string(float_format_name(g)) +
                          " copy=" + std::string(copy_out_name(copy)) +
                          (mode == AdamMode::adam ? " adam" : " adamw"));
        }
      }
    }
  }
}

// The copy is written with non-temporal stores when it starts on a vector boundary and with plain
// stores otherwise (adam_kernel.h). At every 2-byte offset in a cache line both paths must match
// the scalar kernel and leave the bytes around the copy alone.
TEST_P(AdamVariantTest, CopyOutAtEveryAlignmentMatchesScalar) {
  const SimdLevel level = GetParam();
  STRATA_SKIP_IF_UNSUPPORTED(level);
  const size_t n = 1000;  // not a multiple of 16: the scalar tail too
  for (CopyOut copy : {CopyOut::bf16, CopyOut::f16}) {
    testing::expect_copy_out_at_every_offset([&] { return AdamBuffers(n, FloatFormat::f32, copy, 17); }, adam_update,
                                             level, 2 * n, std::string(copy_out_name(copy)));
  }
}

INSTANTIATE_TEST_SUITE_P(Simd, AdamVariantTest, ::testing::Values(SimdLevel::avx2, SimdLevel::avx512),
                         [](const auto& info) { return std::string(simd_level_name(info.param)); });

// The float64 Adam/AdamW of torch's formulation, step by step.
void adam_reference(const AdamHyper& h, std::vector<double>& p, std::vector<double>& m,
                    std::vector<double>& v, const std::vector<float>& g) {
  const double b1 = h.beta1, b2 = h.beta2, lr = h.lr, wd = h.weight_decay;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(h.step));
  const double bias2 = 1.0 - std::pow(b2, static_cast<double>(h.step));
  for (size_t i = 0; i < p.size(); ++i) {
    double gi = static_cast<double>(g[i]) * h.grad_scale;
    if (h.mode == AdamMode::adamw) {
      p[i] *= 1.0 - lr * wd;
    } else {
      gi += wd * p[i];
    }
    m[i] = b1 * m[i] + (1.0 - b1) * gi;
    v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
    p[i] -= lr / bias1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bias2) + h.eps);
  }
}

double relative_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff / norm);
}

// 100 steps against float64 on the same gradient sequence. Bound: relative error (2-norm over
// the tensor) <= 1e-6 for the weights. Each step rounds the weight once more to fp32 (half an ulp,
// 6e-8 relative, random sign), so 100 steps walk about sqrt(100) * 3.5e-8 = 3.5e-7; the moments'
// rounding enters only through the update, which is lr = 1e-3 small against the weights.
TEST(Adam, HundredStepsStayWithinOneMillionthOfFloat64) {
  for (AdamMode mode : {AdamMode::adam, AdamMode::adamw}) {
    const size_t n = 4096;
    std::vector<float> p = random_floats(n, 11, -1.0f, 1.0f), m(n, 0.0f), v(n, 0.0f);
    std::vector<double> pd(p.begin(), p.end()), md(n, 0.0), vd(n, 0.0);
    AdamHyper hyper;
    hyper.mode = mode;
    hyper.weight_decay = 0.01f;
    hyper.grad_scale = 0.5f;
    for (int64_t step = 1; step <= 100; ++step) {
      hyper.step = step;
      const std::vector<float> g = random_floats(n, 1000 + static_cast<uint32_t>(step), -1.0f, 1.0f);
      adam_update(adam_constants(hyper), AdamFormats{FloatFormat::f32, CopyOut::none},
                  AdamSpan{p.data(), m.data(), v.data(), g.data(), nullptr, n}, SimdLevel::scalar);
      adam_reference(hyper, pd, md, vd, g);
    }
    EXPECT_LE(relative_error(p, pd), 1e-6) << (mode == AdamMode::adam ? "adam" : "adamw");
    EXPECT_LE(relative_error(m, md), 1e-5);  // m, v: a few fp32 roundings per step, averaged out
    EXPECT_LE(relative_error(v, vd), 1e-5);
    // The weights really moved (the comparison is not vacuous): far more than fp32 rounding.
    double moved = 0.0;
    const std::vector<float> p0 = random_floats(n, 11, -1.0f, 1.0f);
    for (size_t i = 0; i < n; ++i) moved += std::fabs(p[i] - p0[i]);
    EXPECT_GT(moved / n, 0.002);  // random-sign gradients: Adam moves less than lr per step
  }
}

TEST(Adam, ConstantsFollowTorchFormulation) {
  AdamHyper hyper;
  hyper.lr = 0.01f;
  hyper.step = 3;
  hyper.weight_decay = 0.5f;
  const AdamConstants c = adam_constants(hyper);
  // Computed in double from the fp32 hyper-parameters, rounded once.
  const double b1 = 0.9f, b2 = 0.999f, lr = 0.01f;
  EXPECT_EQ(c.step_size, static_cast<float>(lr / (1.0 - b1 * b1 * b1)));
  EXPECT_EQ(c.inv_sqrt_bias2, static_cast<float>(1.0 / std::sqrt(1.0 - b2 * b2 * b2)));
  EXPECT_EQ(c.one_minus_beta2, static_cast<float>(1.0 - b2));
  EXPECT_EQ(c.lr_decay, static_cast<float>(lr * 0.5));
  EXPECT_EQ(c.l2, 0.0f);
  EXPECT_TRUE(c.decoupled);
  hyper.mode = AdamMode::adam;
  EXPECT_EQ(adam_constants(hyper).l2, 0.5f);
  EXPECT_EQ(adam_constants(hyper).lr_decay, 0.0f);
}

// A 16-bit gradient is widened exactly; Inf and NaN gradients reach the weights as NaN (the step
// must be skipped by the caller, see grad_all_finite), and the copy keeps them NaN, not Inf.
TEST(Adam, SixteenBitGradientEdgeCases) {
  for (FloatFormat g : {FloatFormat::bf16, FloatFormat::f16}) {
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> grads = {0.0f, -0.0f, 1.0f, std::ldexp(1.0f, -24), inf, std::nanf("")};
    const auto bytes = encode_floats(grads, g);
    const size_t n = grads.size();
    std::vector<float> p(n, 0.5f), m(n, 0.0f), v(n, 0.0f);
    std::vector<uint16_t> out(n);
    AdamHyper hyper;
    hyper.lr = 0.1f;
    adam_update(adam_constants(hyper), AdamFormats{g, CopyOut::bf16},
                AdamSpan{p.data(), m.data(), v.data(), bytes.data(), out.data(), n}, SimdLevel::scalar);
    EXPECT_EQ(p[0], 0.5f);                 // zero gradient: no move
    EXPECT_EQ(p[1], 0.5f);
    EXPECT_NEAR(p[2], 0.4f, 1e-6f);        // first step moves by lr * g / (|g| + eps) = lr
    const double tiny = std::ldexp(1.0, -24);  // an fp16 subnormal, exact in bf16 too
    EXPECT_NEAR(p[3], 0.5 - 0.1 * tiny / (tiny + 1e-8), 1e-6);
    EXPECT_TRUE(std::isnan(p[4]));         // Inf / Inf in m / sqrt(v)
    EXPECT_TRUE(std::isnan(p[5]));
    EXPECT_EQ(out[4] & 0x7fc0, 0x7fc0);    // quiet NaN in the copy
    EXPECT_EQ(out[0], float_to_bf16(0.5f));
  }
}

class FiniteCheckTest : public ::testing::TestWithParam<SimdLevel> {};

TEST_P(FiniteCheckTest, FindsInfAndNanAnywhere) {
  const SimdLevel level = GetParam();
  STRATA_SKIP_IF_UNSUPPORTED(level);
  const float bad_values[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                              std::nanf("")};
  for (FloatFormat g : {FloatFormat::f32, FloatFormat::bf16, FloatFormat::f16}) {
    for (size_t n : {size_t{1}, size_t{17}, size_t{4096}}) {
      std::vector<float> x = random_floats(n, 5, -60000.0f, 60000.0f);
      EXPECT_TRUE(grad_all_finite(encode_floats(x, g).data(), g, n, level));
      for (size_t at : {size_t{0}, n / 2, n - 1}) {
        for (float bad : bad_values) {
          std::vector<float> y = x;
          y[at] = bad;
          EXPECT_FALSE(grad_all_finite(encode_floats(y, g).data(), g, n, level))
              << float_format_name(g) << " n=" << n << " at " << at;
        }
      }
    }
  }
  // 70000 is finite in fp32 but Inf once rounded to fp16: the check sees the fp16 value.
  EXPECT_FALSE(grad_all_finite(encode_floats({70000.0f}, FloatFormat::f16).data(), FloatFormat::f16, 1, level));
  EXPECT_TRUE(grad_all_finite(encode_floats({70000.0f}, FloatFormat::bf16).data(), FloatFormat::bf16, 1, level));
}

INSTANTIATE_TEST_SUITE_P(Simd, FiniteCheckTest,
                         ::testing::Values(SimdLevel::scalar, SimdLevel::avx2, SimdLevel::avx512),
                         [](const auto& info) { return std::string(simd_level_name(info.param)); });

TEST(Adam, RunnableLevelNeverExceedsTheCpu) {
  for (SimdLevel l : {SimdLevel::scalar, SimdLevel::avx2, SimdLevel::avx512}) {
    const SimdLevel run = runnable_simd_level(l);
    EXPECT_TRUE(simd_level_supported(run));
    EXPECT_LE(static_cast<int>(run), static_cast<int>(l));
    if (simd_level_supported(l)) {
      EXPECT_EQ(run, l);
    }
  }
}

}  // namespace
}  // namespace strata::kernels
