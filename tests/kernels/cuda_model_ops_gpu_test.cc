// GPU tests of kernels/cuda attention, cross-entropy, casts, Adam/AdamW, grad norm, finite check
// and the cuBLAS GEMM wrappers, against the CPU ops (kernels/cpu) in fp32, bf16 and fp16, with
// guard bytes around outputs and odd sizes (T = 1, N = 17, C = 1, V = 50257), and strict fp32
// GEMMs staying fp32 whatever math mode the cuBLAS handle was left in. Every GPU test skips with
// the CUDA error string when no device is usable.
#include <gtest/gtest.h>

#include "gpu_required.h"

#if defined(STRATA_HAVE_CUDA)

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/adam.h"
#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/ops_attention.h"
#include "kernels/cpu/ops_loss.h"
#include "kernels/cpu/ops_matmul.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/loss.cuh"
#include "kernels/cuda/optimizer.cuh"
#include "tests/kernels/cuda_gemm_test_support.h"
#include "tests/kernels/cuda_gpu_test_support.h"
#include "tests/kernels/ops_test_support.h"

namespace strata::kernels::cuda {
namespace {

namespace cpu = ::strata::kernels;
using strata::kernels::testing::all_close;
using strata::kernels::testing::random_floats;
using testing::DeviceArray;
using testing::DeviceTensor;
using testing::expect_matches;
using testing::round_all;
using testing::Tolerance;
using testing::widen_all;

bool testing_bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

template <typename T>
class CudaModelOpsTest : public ::testing::Test {};
TYPED_TEST_SUITE(CudaModelOpsTest, testing::ElementTypes, testing::ElementTypeNames);

TYPED_TEST(CudaModelOpsTest, AttentionMatchesCpuWithGroupedHeads) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  struct Case {
    int64_t B, T_len, NH, NKV, HS;
  };
  for (const Case c : {Case{2, 17, 4, 2, 40}, Case{1, 1, 2, 1, 8}, Case{1, 9, 3, 3, 256}}) {
    SCOPED_TRACE(::testing::Message() << "T " << c.T_len << " HS " << c.HS);
    const int64_t nq = c.B * c.T_len * c.NH * c.HS, nkv = c.B * c.T_len * c.NKV * c.HS, nl = c.B * c.NH * c.T_len;
    const auto q = round_all<T>(random_floats(nq, 61)), k = round_all<T>(random_floats(nkv, 62));
    const auto v = round_all<T>(random_floats(nkv, 63)), dout = round_all<T>(random_floats(nq, 64));
    const auto g0_q = round_all<T>(random_floats(nq, 65)), g0_k = round_all<T>(random_floats(nkv, 66)),
               g0_v = round_all<T>(random_floats(nkv, 67));
    std::vector<float> out(nq), lse(nl), dq = g0_q, dk = g0_k, dv = g0_v;
    cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), c.B, c.T_len, c.NH, c.NKV, c.HS);
    // The CPU backward runs on the forward's out rounded as the GPU stores it (T).
    const auto out_t = round_all<T>(out);
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out_t.data(),
                            lse.data(), c.B, c.T_len, c.NH, c.NKV, c.HS);
    DeviceTensor<T> d_q(q), d_k(k), d_v(v), d_dout(dout), d_out(nq), d_dq(g0_q), d_dk(g0_k), d_dv(g0_v);
    DeviceTensor<float> d_lse(nl);
    ASSERT_EQ(attention_forward(d_out.data(), d_lse.data(), d_q.data(), d_k.data(), d_v.data(), c.B, c.T_len, c.NH,
                                c.NKV, c.HS, nullptr),
              cudaSuccess);
    expect_matches(d_out, out, testing::reduction_tolerance<T>(), "out");
    expect_matches(d_lse, lse, Tolerance{1e-5, 1e-5}, "lse");  // fp32 inputs rounded alike on both sides
    d_out.upload(out_t);
    d_lse.upload(lse);
    ASSERT_EQ(attention_backward(d_dq.data(), d_dk.data(), d_dv.data(), d_dout.data(), d_q.data(), d_k.data(),
                                 d_v.data(), d_out.data(), d_lse.data(), c.B, c.T_len, c.NH, c.NKV, c.HS, nullptr),
              cudaSuccess);
    expect_matches(d_dq, dq, testing::reduction_tolerance<T>(), "dq");
    expect_matches(d_dk, dk, testing::reduction_tolerance<T>(), "dk");
    expect_matches(d_dv, dv, testing::reduction_tolerance<T>(), "dv");
  }
}

TYPED_TEST(CudaModelOpsTest, CrossEntropyMatchesCpuOverGpt2Vocabulary) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const int64_t N = 5, V = 50257;
  const auto logits = round_all<T>(random_floats(N * V, 71, -6.0f, 6.0f));
  const std::vector<int32_t> targets = {3, kIgnoreTarget, 50256, 0, 1234};
  const auto g0 = round_all<T>(random_floats(N * V, 72, -1e-3f, 1e-3f));
  std::vector<float> lse(N), losses(N), dlogits = g0, inplace = logits;
  const CrossEntropyResult want = cpu::crossentropy_forward(lse.data(), losses.data(), logits.data(), targets.data(), N, V);
  const float dloss = 1.0f / static_cast<float>(want.valid_count);
  cpu::crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), dloss, N, V);
  cpu::crossentropy_backward_inplace(inplace.data(), lse.data(), targets.data(), dloss, N, V);

  DeviceArray<int32_t> d_targets(targets);
  DeviceArray<CrossEntropyResult> d_result(std::vector<CrossEntropyResult>(1));
  DeviceTensor<T> d_logits(logits), d_dlogits(g0), d_inplace(logits);
  DeviceTensor<float> d_lse(N), d_losses(N);
  ASSERT_EQ(crossentropy_forward(d_lse.data(), d_losses.data(), d_result.data(), d_logits.data(), d_targets.data(), N,
                                 V, nullptr),
            cudaSuccess);
  // lse of 50257 terms: fp32 tree sum vs the CPU's double sum, relative 1e-6 of a sum ~ log(V).
  expect_matches(d_lse, lse, Tolerance{1e-5, 1e-6}, "lse");
  expect_matches(d_losses, losses, Tolerance{1e-5, 1e-5}, "losses");
  const CrossEntropyResult got = d_result.download()[0];
  EXPECT_EQ(got.valid_count, 4);
  EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-4);
  EXPECT_NEAR(got.mean_loss, want.mean_loss, 1e-5);
  d_lse.upload(lse);
  ASSERT_EQ(crossentropy_backward(d_dlogits.data(), d_logits.data(), d_lse.data(), d_targets.data(), dloss, N, V,
                                  nullptr),
            cudaSuccess);
  ASSERT_EQ(crossentropy_backward_inplace(d_inplace.data(), d_lse.data(), d_targets.data(), dloss, N, V, nullptr),
            cudaSuccess);
  // Probabilities ~2e-5 times dloss: absolute tolerances at that scale. 16-bit: one rounding of
  // each stored gradient, 2u relative (u = 2^-8 bf16, 2^-11 fp16); the in-place gradients (~5e-6)
  // are fp16 subnormals, exact to 3e-8 absolute, hence fp16's 1e-7.
  Tolerance tol{1e-9, 1e-5};
  if constexpr (std::is_same_v<T, __nv_bfloat16>) tol = Tolerance{1e-6, 8e-3};
  if constexpr (std::is_same_v<T, __half>) tol = Tolerance{1e-7, 1e-3};
  expect_matches(d_dlogits, dlogits, tol, "dlogits (accumulated; ignored row untouched)");
  expect_matches(d_inplace, inplace, tol, "dlogits in place (ignored row zeroed)");
}

TEST(CudaConvert, MatchesHalfReferenceBitForBit) {
  STRATA_SKIP_WITHOUT_CUDA();
  std::vector<float> values = random_floats(1000, 81, -70000.0f, 70000.0f);
  const float specials[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65520.0f, 1e-8f, 6e-8f, 3e-5f, -3e-5f, 1e-40f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 3.0e38f, 1.00390625f, 1.01171875f};
  values.insert(values.end(), std::begin(specials), std::end(specials));
  const size_t n = values.size();
  DeviceTensor<float> d_src(values), d_back(n);
  for (const FloatFormat to : {FloatFormat::bf16, FloatFormat::f16}) {
    SCOPED_TRACE(float_format_name(to));
    DeviceTensor<uint16_t> d_half(n);
    ASSERT_EQ(convert(d_half.data(), to, d_src.data(), FloatFormat::f32, n, nullptr), cudaSuccess);
    ASSERT_EQ(convert(d_back.data(), FloatFormat::f32, d_half.data(), to, n, nullptr), cudaSuccess);
    std::vector<uint16_t> bits(n);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(bits.data(), d_half.data(), 2 * n, cudaMemcpyDeviceToHost), cudaSuccess);
    const std::vector<float> back = d_back.download();
    for (size_t i = 0; i < n; ++i) {
      const uint16_t want = to == FloatFormat::bf16 ? float_to_bf16(values[i]) : float_to_fp16(values[i]);
      ASSERT_EQ(bits[i], want) << "element " << i << " = " << values[i];
      const float want_back = to == FloatFormat::bf16 ? bf16_to_float(want) : fp16_to_float(want);
      ASSERT_EQ(float_bits(back[i]), float_bits(want_back)) << "element " << i;
    }
    EXPECT_TRUE(d_half.guards_intact());
    EXPECT_TRUE(d_back.guards_intact());
  }
}

TEST(CudaAdam, MatchesCpuReferenceBitForBit) {
  STRATA_SKIP_WITHOUT_CUDA();
  const size_t n = 1037;
  for (const AdamMode mode : {AdamMode::adamw, AdamMode::adam}) {
    for (const FloatFormat grad_format : {FloatFormat::f32, FloatFormat::bf16, FloatFormat::f16}) {
      SCOPED_TRACE(::testing::Message() << "mode " << static_cast<int>(mode) << " grad "
                                        << float_format_name(grad_format));
      AdamHyper hyper;
      hyper.lr = 3e-4f;
      hyper.weight_decay = 0.1f;
      hyper.step = 7;
      hyper.grad_scale = 0.5f;
      hyper.mode = mode;
      const AdamConstants c = adam_constants(hyper);
      std::vector<float> p = random_floats(n, 91), m = random_floats(n, 92, -0.01f, 0.01f);
      std::vector<float> v = random_floats(n, 93, 0.0f, 1e-4f), g = random_floats(n, 94);
      std::vector<uint16_t> g16(n);
      for (size_t i = 0; i < n; ++i) g16[i] = grad_format == FloatFormat::f16 ? float_to_fp16(g[i]) : float_to_bf16(g[i]);
      DeviceTensor<float> d_p(p), d_m(m), d_v(v), d_g(g);
      DeviceArray<uint16_t> d_g16(g16);
      DeviceTensor<uint16_t> d_copy(n);
      const AdamFormats formats{grad_format, CopyOut::bf16};
      std::vector<uint16_t> copy(n);
      const void* host_grad = grad_format == FloatFormat::f32 ? static_cast<const void*>(g.data()) : g16.data();
      cpu::adam_update(c, formats, AdamSpan{p.data(), m.data(), v.data(), host_grad, copy.data(), n}, SimdLevel::scalar);
      const void* dev_grad = grad_format == FloatFormat::f32 ? static_cast<const void*>(d_g.data()) : d_g16.data();
      ASSERT_EQ(cuda::adam_update(c, formats, AdamSpan{d_p.data(), d_m.data(), d_v.data(), dev_grad, d_copy.data(), n},
                                  nullptr),
                cudaSuccess);
      EXPECT_TRUE(testing_bits_equal(d_p.download(), p)) << "param";
      EXPECT_TRUE(testing_bits_equal(d_m.download(), m)) << "m";
      EXPECT_TRUE(testing_bits_equal(d_v.download(), v)) << "v";
      std::vector<uint16_t> got_copy(n);
      ASSERT_EQ(cudaMemcpy(got_copy.data(), d_copy.data(), 2 * n, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(got_copy, copy) << "bf16 copy-out";
      EXPECT_TRUE(d_p.guards_intact() && d_m.guards_intact() && d_v.guards_intact() && d_copy.guards_intact());
    }
  }
}

// 8-bit moments: the CPU kernels' bits (kernels/cpu/adam8bit.h, scalar) in weights, copy, codes and
// scales, over a partial last block, an all-zero block (a zero m scale) and five steps, each
// requantizing the codes the step before wrote; every gradient format and copy-out.
TEST(CudaAdam8bit, MatchesCpuReferenceBitForBit) {
  STRATA_SKIP_WITHOUT_CUDA();
  const size_t n = 1037, blocks = cpu::adam8bit_blocks(n);
  for (const FloatFormat grad_format : {FloatFormat::f32, FloatFormat::bf16, FloatFormat::f16}) {
    for (const CopyOut copy_out : {CopyOut::none, CopyOut::bf16, CopyOut::f16}) {
      SCOPED_TRACE(::testing::Message() << "grad " << float_format_name(grad_format) << " copy "
                                        << static_cast<int>(copy_out));
      std::vector<float> p = random_floats(n, 191), m = random_floats(n, 192, -0.01f, 0.01f);
      std::vector<float> v = random_floats(n, 193, 0.0f, 1e-4f), g = random_floats(n, 194);
      for (size_t i = 256; i < 512; ++i) m[i] = g[i] = 0.0f;  // block 1: zero m, and no gradient
      std::vector<int8_t> m_code(n);
      std::vector<uint8_t> v_code(n);
      std::vector<float> m_scale(blocks), v_scale(blocks);
      std::vector<uint16_t> copy(n), g16(n);
      cpu::Adam8bitSpan host{p.data(), m_code.data(), v_code.data(), m_scale.data(), v_scale.data(),
                             nullptr, copy_out == CopyOut::none ? nullptr : copy.data(), n};
      cpu::adam8bit_quantize(m.data(), v.data(), n, host);
      for (size_t i = 0; i < n; ++i) g16[i] = grad_format == FloatFormat::f16 ? float_to_fp16(g[i]) : float_to_bf16(g[i]);
      host.grad = grad_format == FloatFormat::f32 ? static_cast<const void*>(g.data()) : g16.data();
      DeviceArray<float> d_p(p), d_g(g), d_m_scale(m_scale), d_v_scale(v_scale);
      DeviceArray<int8_t> d_m_code(m_code);
      DeviceArray<uint8_t> d_v_code(v_code);
      DeviceArray<uint16_t> d_g16(g16), d_copy(copy);
      const cpu::Adam8bitSpan device{d_p.data(), d_m_code.data(), d_v_code.data(), d_m_scale.data(), d_v_scale.data(),
                                     grad_format == FloatFormat::f32 ? static_cast<const void*>(d_g.data())
                                                                     : d_g16.data(),
                                     copy_out == CopyOut::none ? nullptr : d_copy.data(), n};
      const AdamFormats formats{grad_format, copy_out};
      for (int64_t step = 1; step <= 5; ++step) {
        SCOPED_TRACE(::testing::Message() << "step " << step);
        AdamHyper hyper;
        hyper.lr = 3e-4f;
        hyper.weight_decay = 0.1f;
        hyper.step = step;
        hyper.grad_scale = 0.5f;
        const AdamConstants c = adam_constants(hyper);
        (void)cpu::adam8bit_update(c, formats, host, SimdLevel::scalar);
        ASSERT_EQ(cuda::adam8bit_update(c, formats, device, nullptr), cudaSuccess);
        EXPECT_TRUE(testing_bits_equal(d_p.download(), p)) << "param";
        EXPECT_EQ(d_m_code.download(), m_code) << "m codes";
        EXPECT_EQ(d_v_code.download(), v_code) << "v codes";
        EXPECT_TRUE(testing_bits_equal(d_m_scale.download(), m_scale)) << "m scales";
        EXPECT_TRUE(testing_bits_equal(d_v_scale.download(), v_scale)) << "v scales";
        if (copy_out != CopyOut::none) {
          EXPECT_EQ(d_copy.download(), copy) << "copy-out";
        }
      }
      EXPECT_EQ(m_scale[1], 0.0f) << "the zero block's m scale (the test's premise)";
    }
  }
}

TEST(CudaGradChecks, NormSquaredAndFiniteFlag) {
  STRATA_SKIP_WITHOUT_CUDA();
  const size_t n = 100003;
  std::vector<float> g = random_floats(n, 101);
  double want = 0.0;
  for (float x : g) want += static_cast<double>(x) * x;
  DeviceTensor<float> d_g(g), d_sum(1), d_scratch(kGradNormScratchFloats);
  DeviceArray<int32_t> d_finite(std::vector<int32_t>{1});
  // Two calls accumulate: the sum of both tensors (here the same one twice).
  ASSERT_EQ(grad_norm_squared(d_sum.data(), d_scratch.data(), d_g.data(), FloatFormat::f32, n, nullptr), cudaSuccess);
  ASSERT_EQ(grad_norm_squared(d_sum.data(), d_scratch.data(), d_g.data(), FloatFormat::f32, n, nullptr), cudaSuccess);
  // fp32 sums of 1e5 squares in 65536 partial chains: relative error well under 1e-5.
  EXPECT_NEAR(d_sum.download()[0], 2.0 * want, 2.0 * want * 1e-5);
  ASSERT_EQ(grad_check_finite(d_finite.data(), d_g.data(), FloatFormat::f32, n, nullptr), cudaSuccess);
  EXPECT_EQ(d_finite.download()[0], 1);
  g[n - 1] = std::numeric_limits<float>::infinity();
  d_g.upload(g);
  ASSERT_EQ(grad_check_finite(d_finite.data(), d_g.data(), FloatFormat::f32, n, nullptr), cudaSuccess);
  EXPECT_EQ(d_finite.download()[0], 0);
  // bf16 NaN in the middle.
  std::vector<uint16_t> h(n, float_to_bf16(0.5f));
  h[n / 2] = 0x7fc0u;
  DeviceArray<uint16_t> d_h(h);
  DeviceArray<int32_t> d_finite2(std::vector<int32_t>{1});
  ASSERT_EQ(grad_check_finite(d_finite2.data(), d_h.data(), FloatFormat::bf16, n, nullptr), cudaSuccess);
  EXPECT_EQ(d_finite2.download()[0], 0);
}

TYPED_TEST(CudaModelOpsTest, MatmulMatchesCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const testing::TestGemmContext gemm;
  struct Case {
    int64_t N, C, OC;
  };
  for (const Case c : {Case{17, 33, 29}, Case{17, 1, 5}, Case{64, 256, 96}}) {
    SCOPED_TRACE(::testing::Message() << "N " << c.N << " C " << c.C << " OC " << c.OC);
    const auto inp = round_all<T>(random_floats(c.N * c.C, 111)), w = round_all<T>(random_floats(c.OC * c.C, 112));
    const auto b = round_all<T>(random_floats(c.OC, 113)), dout = round_all<T>(random_floats(c.N * c.OC, 114));
    const auto g0_in = round_all<T>(random_floats(c.N * c.C, 115)), g0_w = round_all<T>(random_floats(c.OC * c.C, 116)),
               g0_b = round_all<T>(random_floats(c.OC, 117));
    std::vector<float> out(c.N * c.OC), din = g0_in, dw = g0_w, db = g0_b;
    cpu::matmul_forward(out.data(), inp.data(), w.data(), b.data(), c.N, c.C, c.OC);
    cpu::matmul_backward(din.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), c.N, c.C, c.OC);
    DeviceTensor<T> d_inp(inp), d_w(w), d_b(b), d_dout(dout), d_out(c.N * c.OC), d_din(g0_in), d_dw(g0_w), d_db(g0_b);
    const GemmOptions strict{};
    EXPECT_TRUE(matmul_forward(gemm.ctx(), d_out.data(), d_inp.data(), d_w.data(), d_b.data(), c.N, c.C, c.OC, strict,
                               nullptr)
                    .ok());
    EXPECT_TRUE(matmul_backward(gemm.ctx(), d_din.data(), d_dw.data(), d_db.data(), d_dout.data(), d_inp.data(),
                                d_w.data(), c.N, c.C, c.OC, strict, nullptr)
                    .ok());
    // fp32: K <= 256 products of values in [-1, 1], fp32 accumulation in a different order; 16-bit:
    // the same, rounded once to T (the bias added in fp32 by the cuBLASLt epilogue, the += in fp32
    // over product tiles). dweight sums
    // N = 64 products onto g0, so |dw| reaches ~12, where T's ulp is larger: a wider atol.
    expect_matches(d_out, out, testing::reduction_tolerance<T>(), "out");
    expect_matches(d_din, din, testing::reduction_tolerance<T>(), "dinp");
    Tolerance dw_tol{1e-4, 2e-2};
    if constexpr (std::is_same_v<T, __nv_bfloat16>) dw_tol = Tolerance{6e-2, 2e-2};
    if constexpr (std::is_same_v<T, __half>) dw_tol = Tolerance{1.5e-2, 5e-3};
    expect_matches(d_dw, dw, dw_tol, "dweight");
    expect_matches(d_db, db, testing::reduction_tolerance<T>(), "dbias");
  }
}

TEST(CudaGemm, StrictFp32IgnoresATf32ModeLeftOnTheHandle) {
  STRATA_SKIP_WITHOUT_CUDA();
  const testing::TestGemmContext gemm;
  ASSERT_EQ(cublasSetMathMode(gemm.cublas(), CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
  const int64_t N = 128, C = 256, OC = 128;
  const auto inp = random_floats(N * C, 121), w = random_floats(OC * C, 122);
  std::vector<float> want(N * OC);
  cpu::matmul_forward(want.data(), inp.data(), w.data(), nullptr, N, C, OC);
  DeviceTensor<float> d_inp(inp), d_w(w), d_out(N * OC);
  EXPECT_TRUE(matmul_forward<float>(gemm.ctx(), d_out.data(), d_inp.data(), d_w.data(), nullptr, N, C, OC,
                                    GemmOptions{}, nullptr)
                  .ok());
  // Outputs are 256-term sums of products in [-1, 1] (rms ~5). Each fp32 GEMM carries ~4e-6 rms
  // absolute round-off (at most ~2e-5), so two of them in different orders stay well under 2e-4.
  // Had the handle's TF32 mode leaked (inputs cut to 10 mantissa bits), typical elements would be
  // off by ~2e-3.
  expect_matches(d_out, want, Tolerance{2e-4, 0.0}, "strict fp32 out");
}

TEST(CudaModelOpsArguments, InvalidShapesAreRejectedBeforeAnyLaunch) {
  // Host-side checks, no CUDA call: tested with or without a GPU.
  EXPECT_EQ(attention_forward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 4, 3, 2, 16, nullptr),
            cudaErrorInvalidValue);  // NH % NKV != 0
  EXPECT_EQ(attention_forward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 4, 2, 2, 257, nullptr),
            cudaErrorInvalidValue);  // HS above kAttentionMaxHeadSize
  EXPECT_EQ(crossentropy_forward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, 4, 0, nullptr),
            cudaErrorInvalidValue);  // V = 0
  EXPECT_EQ(adam_update(AdamConstants{}, AdamFormats{FloatFormat::f32, CopyOut::bf16},
                        AdamSpan{nullptr, nullptr, nullptr, nullptr, nullptr, 8}, nullptr),
            cudaErrorInvalidValue);  // copy-out requested without a buffer
  const GemmStatus st = matmul_forward<float>(GemmContext{}, nullptr, nullptr, nullptr, nullptr, -1, 4, 4, {}, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.cublas, CUBLAS_STATUS_INVALID_VALUE);
}

}  // namespace
}  // namespace strata::kernels::cuda

#else

TEST(CudaModelOps, SkippedWithoutCudaBuild) { STRATA_GPU_SKIP("strata was built without the CUDA backend"); }

#endif
