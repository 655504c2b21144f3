// Tests of the parallel CPU Adam driver (offload/cpu_adam.h): a multi-tensor step on a thread pool
// equals the single-threaded scalar kernel tensor by tensor, bit for bit (blocks do not interact),
// for fp32 and 8-bit states; a non-finite gradient skips the step when asked; bad input is an error.
#include "offload/cpu_adam.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/thread_pool.h"

namespace strata {
namespace {

using kernels::FloatFormat;
using kernels::SimdLevel;

std::vector<float> random_floats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> out(n);
  for (float& x : out) x = d(rng);
  return out;
}

// All buffers of one tensor, in both state formats.
struct TensorData {
  TensorData(size_t n, uint32_t seed)
      : param(random_floats(n, seed, -1.0f, 1.0f)), m(random_floats(n, seed + 1, -0.01f, 0.01f)),
        v(random_floats(n, seed + 2, 0.0f, 1e-4f)), grad(random_floats(n, seed + 3, -0.1f, 0.1f)),
        m_code(n), v_code(n), m_scale(kernels::adam8bit_blocks(n)), v_scale(kernels::adam8bit_blocks(n)),
        copy(n) {
    kernels::adam8bit_quantize(m.data(), v.data(), n, q8_span());
  }
  kernels::Adam8bitSpan q8_span() {
    return {param.data(), m_code.data(), v_code.data(), m_scale.data(), v_scale.data(), grad.data(), copy.data(),
            param.size()};
  }
  CpuAdamTensor tensor() {
    return {param.data(), m.data(), v.data(), m_code.data(), v_code.data(), m_scale.data(), v_scale.data(),
            grad.data(), copy.data(), param.size()};
  }
  std::vector<float> param, m, v, grad;
  std::vector<int8_t> m_code;
  std::vector<uint8_t> v_code;
  std::vector<float> m_scale, v_scale;
  std::vector<uint16_t> copy;
};

bool same_bits(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

class CpuAdamStatesTest : public ::testing::TestWithParam<AdamStates> {};

TEST_P(CpuAdamStatesTest, ParallelMultiTensorEqualsSingleThreadedScalar) {
  const AdamStates states = GetParam();
  auto pool = ThreadPool::create(ThreadPoolOptions{.threads = 2, .numa_node = -1, .pin = false, .name = "adam-test"});
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  const std::vector<size_t> sizes = {1, 15, 17, 4096, 1000003};
  std::vector<TensorData> par, ref;
  for (size_t i = 0; i < sizes.size(); ++i) {
    par.emplace_back(sizes[i], 100 + 10 * static_cast<uint32_t>(i));
    ref.emplace_back(sizes[i], 100 + 10 * static_cast<uint32_t>(i));
  }
  std::vector<CpuAdamTensor> tensors;
  for (TensorData& t : par) tensors.push_back(t.tensor());
  CpuAdamOptions o;
  o.states = states;
  o.block_elems = 1024;  // ~1000 blocks: many per thread, partial blocks at tensor ends
  o.simd = kernels::best_simd_level();
  o.hyper.weight_decay = 0.05f;
  for (int64_t step = 1; step <= 2; ++step) {
    o.hyper.step = step;
    auto r = cpu_adam_step(pool->get(), tensors, o);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_FALSE(r->skipped);
    EXPECT_EQ(r->blocks, 1u + 1u + 1u + 4u + 977u);
    const kernels::AdamConstants c = kernels::adam_constants(o.hyper);
    for (TensorData& t : ref) {
      if (states == AdamStates::f32) {
        kernels::adam_update(c, o.formats, {t.param.data(), t.m.data(), t.v.data(), t.grad.data(), t.copy.data(), t.param.size()},
                             SimdLevel::scalar);
      } else {
        kernels::adam8bit_update(c, o.formats, t.q8_span(), SimdLevel::scalar);
      }
    }
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t n = sizes[i];
    EXPECT_TRUE(same_bits(par[i].param.data(), ref[i].param.data(), 4 * n)) << "tensor " << i;
    EXPECT_TRUE(same_bits(par[i].copy.data(), ref[i].copy.data(), 2 * n)) << "tensor " << i;
    if (states == AdamStates::f32) {
      EXPECT_TRUE(same_bits(par[i].m.data(), ref[i].m.data(), 4 * n)) << "tensor " << i;
      EXPECT_TRUE(same_bits(par[i].v.data(), ref[i].v.data(), 4 * n)) << "tensor " << i;
    } else {
      EXPECT_TRUE(same_bits(par[i].m_code.data(), ref[i].m_code.data(), n)) << "tensor " << i;
      EXPECT_TRUE(same_bits(par[i].v_code.data(), ref[i].v_code.data(), n)) << "tensor " << i;
      EXPECT_TRUE(same_bits(par[i].m_scale.data(), ref[i].m_scale.data(), 4 * par[i].m_scale.size())) << i;
      EXPECT_TRUE(same_bits(par[i].v_scale.data(), ref[i].v_scale.data(), 4 * par[i].v_scale.size())) << i;
    }
  }
  // The step really changed the weights (the comparison is not of two untouched copies).
  EXPECT_NE(par[4].param, TensorData(sizes[4], 140).param);
}

INSTANTIATE_TEST_SUITE_P(States, CpuAdamStatesTest, ::testing::Values(AdamStates::f32, AdamStates::q8),
                         [](const auto& info) { return std::string(info.param == AdamStates::f32 ? "fp32" : "q8"); });

TEST(CpuAdam, NonFiniteGradientSkipsTheStepWhenAsked) {
  auto pool = ThreadPool::create(ThreadPoolOptions{.threads = 2, .numa_node = -1, .pin = false, .name = "adam-test"});
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    TensorData a(5000, 1), b(70000, 2);
    b.grad[69999] = bad;  // the very last element of the last tensor
    const std::vector<float> a0 = a.param, b0 = b.param, am0 = a.m;
    const std::vector<CpuAdamTensor> tensors = {a.tensor(), b.tensor()};
    CpuAdamOptions o;
    o.skip_nonfinite = true;
    auto r = cpu_adam_step(pool->get(), tensors, o);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_TRUE(r->skipped);
    EXPECT_EQ(a.param, a0);  // nothing was written, in any tensor
    EXPECT_EQ(a.m, am0);
    EXPECT_EQ(b.param, b0);
    o.skip_nonfinite = false;  // not asked: the step runs and the bad element goes NaN
    r = cpu_adam_step(pool->get(), tensors, o);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_FALSE(r->skipped);
    EXPECT_TRUE(std::isnan(b.param[69999]));
    EXPECT_NE(a.param, a0);
  }
}

TEST(CpuAdam, RejectsBadInput) {
  TensorData a(100, 1);
  std::vector<CpuAdamTensor> tensors = {a.tensor()};
  CpuAdamOptions o;
  o.hyper.lr = -1.0f;
  auto r = cpu_adam_step(nullptr, tensors, o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::invalid_argument);
  EXPECT_NE(r.status().message().find("learning rate -1"), std::string::npos) << r.status().to_string();
  o.hyper.lr = 1e-3f;
  o.hyper.step = 0;
  r = cpu_adam_step(nullptr, tensors, o);
  EXPECT_NE(r.status().message().find("step 0 must be >= 1"), std::string::npos) << r.status().to_string();
  o.hyper.step = 1;
  o.hyper.beta2 = 1.0f;
  r = cpu_adam_step(nullptr, tensors, o);
  EXPECT_NE(r.status().message().find("beta2 1 must be in [0, 1)"), std::string::npos) << r.status().to_string();
  o.hyper.beta2 = 0.999f;
  o.block_elems = 1000;
  r = cpu_adam_step(nullptr, tensors, o);
  EXPECT_EQ(r.status().code(), Code::invalid_argument);
  EXPECT_NE(r.status().message().find("multiple of 256"), std::string::npos) << r.status().to_string();
  o.block_elems = 1024;
  o.states = AdamStates::q8;
  tensors[0].m_code = nullptr;
  r = cpu_adam_step(nullptr, tensors, o);
  EXPECT_EQ(r.status().code(), Code::invalid_argument);
  EXPECT_NE(r.status().message().find("missing its weights, gradient or 8bit states"), std::string::npos) << r.status().to_string();
  o.states = AdamStates::f32;
  tensors[0].copy_out = nullptr;
  r = cpu_adam_step(nullptr, tensors, o);
  EXPECT_NE(r.status().message().find("no copy-out buffer but the copy format is bf16"), std::string::npos)
      << r.status().to_string();
  o.formats.copy = kernels::CopyOut::none;  // without a copy it is fine, and runs single-threaded
  r = cpu_adam_step(nullptr, tensors, o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->blocks, 1u);
}

}  // namespace
}  // namespace strata
