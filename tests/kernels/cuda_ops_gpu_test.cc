// GPU tests of kernels/cuda norms, elementwise ops, RoPE and embeddings: each op on random inputs
// against the CPU op (kernels/cpu/ops_*.h) in fp32, bf16 and fp16, gradients starting from random
// values (the += convention), guard bytes around every output, odd sizes (N = 17, C = 1).
// Every test skips with the CUDA error string when no device is usable.
#include <gtest/gtest.h>

#include "gpu_required.h"

#include <cstring>

#if defined(STRATA_HAVE_CUDA)

#include "kernels/cpu/ops_elementwise.h"
#include "kernels/cpu/ops_embedding.h"
#include "kernels/cpu/ops_norm.h"
#include "kernels/cpu/ops_rope.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/norm.cuh"
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

template <typename T>
class CudaOpsTest : public ::testing::Test {};
TYPED_TEST_SUITE(CudaOpsTest, testing::ElementTypes, testing::ElementTypeNames);

TYPED_TEST(CudaOpsTest, LayerNormMatchesCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  for (const int64_t C : {int64_t{1}, int64_t{67}, int64_t{768}}) {
    SCOPED_TRACE(C);
    const int64_t N = 17;
    const auto inp = round_all<T>(random_floats(N * C, 1, -2.0f, 2.0f));
    const auto w = round_all<T>(random_floats(C, 2)), b = round_all<T>(random_floats(C, 3));
    const auto dout = round_all<T>(random_floats(N * C, 4));
    const auto g0_in = round_all<T>(random_floats(N * C, 5)), g0_w = round_all<T>(random_floats(C, 6)),
               g0_b = round_all<T>(random_floats(C, 7));
    std::vector<float> out(N * C), mean(N), rstd(N), din = g0_in, dw = g0_w, db = g0_b;
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C, 1e-5f);
    cpu::layernorm_backward(din.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(), rstd.data(),
                       N, C);

    DeviceTensor<T> d_inp(inp), d_w(w), d_b(b), d_dout(dout), d_out(N * C), d_din(g0_in), d_dw(g0_w), d_db(g0_b);
    DeviceTensor<float> d_mean(N), d_rstd(N);
    ASSERT_EQ(layernorm_forward(d_out.data(), d_mean.data(), d_rstd.data(), d_inp.data(), d_w.data(), d_b.data(), N, C,
                                1e-5f, nullptr),
              cudaSuccess);
    // The backward runs on the CPU's statistics so its check isolates the backward kernels.
    d_mean.upload(mean);
    d_rstd.upload(rstd);
    ASSERT_EQ(layernorm_backward(d_din.data(), d_dw.data(), d_db.data(), d_dout.data(), d_inp.data(), d_w.data(),
                                 d_mean.data(), d_rstd.data(), N, C, nullptr),
              cudaSuccess);
    expect_matches(d_out, out, testing::reduction_tolerance<T>(), "out");
    expect_matches(d_din, din, testing::reduction_tolerance<T>(), "dinp");
    expect_matches(d_dw, dw, testing::reduction_tolerance<T>(), "dweight");
    expect_matches(d_db, db, testing::reduction_tolerance<T>(), "dbias");
  }
}

TYPED_TEST(CudaOpsTest, LayerNormSavesCpuStatistics) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const int64_t N = 17, C = 129;
  const auto inp = round_all<T>(random_floats(N * C, 11, -3.0f, 3.0f));
  const auto w = round_all<T>(random_floats(C, 12)), b = round_all<T>(random_floats(C, 13));
  std::vector<float> out(N * C), mean(N), rstd(N);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C, 1e-5f);
  DeviceTensor<T> d_inp(inp), d_w(w), d_b(b), d_out(N * C);
  DeviceTensor<float> d_mean(N), d_rstd(N);
  ASSERT_EQ(layernorm_forward(d_out.data(), d_mean.data(), d_rstd.data(), d_inp.data(), d_w.data(), d_b.data(), N, C,
                              1e-5f, nullptr),
            cudaSuccess);
  // Statistics are fp32 in both; only the summation order differs.
  expect_matches(d_mean, mean, Tolerance{1e-6, 1e-5}, "mean");
  expect_matches(d_rstd, rstd, Tolerance{1e-6, 1e-5}, "rstd");
}

TYPED_TEST(CudaOpsTest, RmsNormMatchesCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  for (const int64_t C : {int64_t{1}, int64_t{67}, int64_t{1024}}) {
    SCOPED_TRACE(C);
    const int64_t N = 17;
    const auto inp = round_all<T>(random_floats(N * C, 21, -2.0f, 2.0f));
    const auto w = round_all<T>(random_floats(C, 22)), dout = round_all<T>(random_floats(N * C, 23));
    const auto g0_in = round_all<T>(random_floats(N * C, 24)), g0_w = round_all<T>(random_floats(C, 25));
    std::vector<float> out(N * C), rstd(N), din = g0_in, dw = g0_w;
    cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-6f);
    cpu::rmsnorm_backward(din.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);
    DeviceTensor<T> d_inp(inp), d_w(w), d_dout(dout), d_out(N * C), d_din(g0_in), d_dw(g0_w);
    DeviceTensor<float> d_rstd(N);
    ASSERT_EQ(rmsnorm_forward(d_out.data(), d_rstd.data(), d_inp.data(), d_w.data(), N, C, 1e-6f, nullptr), cudaSuccess);
    expect_matches(d_rstd, rstd, Tolerance{1e-6, 1e-5}, "rstd");
    d_rstd.upload(rstd);
    ASSERT_EQ(rmsnorm_backward(d_din.data(), d_dw.data(), d_dout.data(), d_inp.data(), d_w.data(), d_rstd.data(), N, C,
                               nullptr),
              cudaSuccess);
    expect_matches(d_out, out, testing::reduction_tolerance<T>(), "out");
    expect_matches(d_din, din, testing::reduction_tolerance<T>(), "dinp");
    expect_matches(d_dw, dw, testing::reduction_tolerance<T>(), "dweight");
  }
}

// The fused backward (scratch for the row blocks' partial column sums) at training shapes: LayerNorm
// with C = 768 and 1600 (GPT-2 124M, 1.5B), RMSNorm with C = 4096, N = 3000 rows (512 row blocks of
// 6, the last one short), against the CPU; a second run is bit-identical; a scratch too small for
// one block's partials takes the unfused path, within the same tolerance.
TYPED_TEST(CudaOpsTest, NormBackwardFusedMatchesCpuAndRepeats) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const int64_t N = 3000;
  for (const int64_t C : {int64_t{768}, int64_t{1600}, int64_t{4096}}) {
    const bool rms = C == 4096;
    SCOPED_TRACE(::testing::Message() << (rms ? "rmsnorm" : "layernorm") << " C " << C);
    ASSERT_GT(norm_row_block_rows(N, C, kGemmProductFloats), 0);
    const auto inp = round_all<T>(random_floats(N * C, 31, -2.0f, 2.0f));
    const auto w = round_all<T>(random_floats(C, 32, 0.5f, 1.5f)), dout = round_all<T>(random_floats(N * C, 33));
    const auto g0_in = round_all<T>(random_floats(N * C, 34)), g0_w = round_all<T>(random_floats(C, 35)),
               g0_b = round_all<T>(random_floats(C, 36));
    std::vector<float> out(N * C), mean(N), rstd(N), din = g0_in, dw = g0_w, db = g0_b;
    if (rms) {
      cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-6f);
      cpu::rmsnorm_backward(din.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);
    } else {
      const std::vector<float> no_bias(C, 0.0f);
      cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), no_bias.data(), N, C, 1e-5f);
      cpu::layernorm_backward(din.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                              rstd.data(), N, C);
    }
    DeviceTensor<T> d_inp(inp), d_w(w), d_dout(dout);
    DeviceTensor<float> d_mean(mean), d_rstd(rstd), scratch(kGemmProductFloats);
    std::vector<std::vector<float>> runs;
    for (const size_t scratch_floats : {size_t{kGemmProductFloats}, size_t{kGemmProductFloats}, size_t{2 * C - 1}}) {
      DeviceTensor<T> d_din(g0_in), d_dw(g0_w), d_db(g0_b);
      const cudaError_t e =
          rms ? rmsnorm_backward(d_din.data(), d_dw.data(), d_dout.data(), d_inp.data(), d_w.data(), d_rstd.data(), N,
                                 C, nullptr, scratch.data(), scratch_floats)
              : layernorm_backward(d_din.data(), d_dw.data(), d_db.data(), d_dout.data(), d_inp.data(), d_w.data(),
                                   d_mean.data(), d_rstd.data(), N, C, nullptr, scratch.data(), scratch_floats);
      ASSERT_EQ(e, cudaSuccess);
      expect_matches(d_din, din, testing::reduction_tolerance<T>(), "dinp");
      // dweight and dbias are 3000-term fp32 sums (terms ~0.4, partial sums ~20) in another order
      // than the CPU's: a few fp32 ulps of the partial sums (~1e-5 each) over ~sqrt(3000) steps,
      // 1e-4 absolute; in 16 bits the rounding of the result dominates as in the other tests.
      const Tolerance column_tol = std::is_same_v<T, float> ? Tolerance{1e-4, 2e-4} : testing::reduction_tolerance<T>();
      expect_matches(d_dw, dw, column_tol, "dweight");
      if (!rms) expect_matches(d_db, db, column_tol, "dbias");
      std::vector<float> all = d_din.download();
      for (DeviceTensor<T>* t : {&d_dw, &d_db}) {
        const std::vector<float> part = t->download();
        all.insert(all.end(), part.begin(), part.end());
      }
      runs.push_back(std::move(all));
    }
    EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)), 0)
        << "the fused backward differs between two runs";
  }
}

TYPED_TEST(CudaOpsTest, GeluSwigluResidualMatchCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const int64_t N = 17, H = 45, n = N * H;
  const Tolerance tol = testing::elementwise_tolerance<T>();
  const auto x = round_all<T>(random_floats(n, 31, -4.0f, 4.0f)), y = round_all<T>(random_floats(n, 32));
  const auto dout = round_all<T>(random_floats(n, 33)), g0 = round_all<T>(random_floats(n, 34));
  {  // GELU
    std::vector<float> out(n), din = g0;
    cpu::gelu_forward(out.data(), x.data(), n);
    cpu::gelu_backward(din.data(), x.data(), dout.data(), n);
    DeviceTensor<T> d_x(x), d_dout(dout), d_out(n), d_din(g0);
    ASSERT_EQ(gelu_forward(d_out.data(), d_x.data(), n, nullptr), cudaSuccess);
    ASSERT_EQ(gelu_backward(d_din.data(), d_x.data(), d_dout.data(), n, nullptr), cudaSuccess);
    expect_matches(d_out, out, tol, "gelu out");
    expect_matches(d_din, din, tol, "gelu dinp");
  }
  {  // SwiGLU over the fused (N, 2H) input
    const auto inp = round_all<T>(random_floats(2 * n, 35, -4.0f, 4.0f)), g0_in = round_all<T>(random_floats(2 * n, 36));
    std::vector<float> out(n), din = g0_in;
    cpu::swiglu_forward(out.data(), inp.data(), N, H);
    cpu::swiglu_backward(din.data(), inp.data(), dout.data(), N, H);
    DeviceTensor<T> d_inp(inp), d_dout(dout), d_out(n), d_din(g0_in);
    ASSERT_EQ(swiglu_forward(d_out.data(), d_inp.data(), N, H, nullptr), cudaSuccess);
    ASSERT_EQ(swiglu_backward(d_din.data(), d_inp.data(), d_dout.data(), N, H, nullptr), cudaSuccess);
    expect_matches(d_out, out, tol, "swiglu out");
    expect_matches(d_din, din, tol, "swiglu dinp");
  }
  {  // residual
    std::vector<float> out(n), da = g0, db = x;
    cpu::residual_forward(out.data(), x.data(), y.data(), n);
    cpu::residual_backward(da.data(), db.data(), dout.data(), n);
    DeviceTensor<T> d_x(x), d_y(y), d_dout(dout), d_out(n), d_da(g0), d_db(x);
    ASSERT_EQ(residual_forward(d_out.data(), d_x.data(), d_y.data(), n, nullptr), cudaSuccess);
    ASSERT_EQ(residual_backward(d_da.data(), d_db.data(), d_dout.data(), n, nullptr), cudaSuccess);
    expect_matches(d_out, out, tol, "residual out");
    expect_matches(d_da, da, tol, "residual da");
    expect_matches(d_db, db, tol, "residual db");
  }
}

TYPED_TEST(CudaOpsTest, RopeMatchesCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const int64_t B = 2, T_len = 17, NH = 3, HS = 18, n = B * T_len * NH * HS, offset = 5;
  const auto inp = round_all<T>(random_floats(n, 41)), dout = round_all<T>(random_floats(n, 42));
  const auto g0 = round_all<T>(random_floats(n, 43));
  std::vector<float> out(n), din = g0;
  cpu::rope_forward(out.data(), inp.data(), B, T_len, NH, HS, 10000.0f, offset);
  cpu::rope_backward(din.data(), dout.data(), B, T_len, NH, HS, 10000.0f, offset);
  DeviceTensor<T> d_inp(inp), d_dout(dout), d_out(n), d_din(g0);
  ASSERT_EQ(rope_forward(d_out.data(), d_inp.data(), B, T_len, NH, HS, 10000.0f, offset, nullptr), cudaSuccess);
  ASSERT_EQ(rope_backward(d_din.data(), d_dout.data(), B, T_len, NH, HS, 10000.0f, offset, nullptr), cudaSuccess);
  // cos/sin come from double on both sides; the fp32 products are the same operations.
  expect_matches(d_out, out, testing::elementwise_tolerance<T>(), "out");
  expect_matches(d_din, din, testing::elementwise_tolerance<T>(), "dinp");
  // In place: out == inp.
  ASSERT_EQ(rope_forward(d_inp.data(), d_inp.data(), B, T_len, NH, HS, 10000.0f, offset, nullptr), cudaSuccess);
  expect_matches(d_inp, out, testing::elementwise_tolerance<T>(), "in-place out");
}

TYPED_TEST(CudaOpsTest, EncoderAndTokenEmbeddingMatchCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const int64_t B = 3, T_len = 17, C = 33, V = 11, N = B * T_len;
  std::vector<int32_t> tokens(N);
  for (int64_t i = 0; i < N; ++i) tokens[i] = static_cast<int32_t>((i * 7 + i / 5) % V);  // repeats
  const auto wte = round_all<T>(random_floats(V * C, 51)), wpe = round_all<T>(random_floats(T_len * C, 52));
  const auto dout = round_all<T>(random_floats(N * C, 53));
  const auto g0_te = round_all<T>(random_floats(V * C, 54)), g0_pe = round_all<T>(random_floats(T_len * C, 55));
  std::vector<float> out(N * C), tok_out(N * C), dte = g0_te, dpe = g0_pe, tok_dte = g0_te;
  cpu::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T_len, C);
  cpu::encoder_backward(dte.data(), dpe.data(), dout.data(), tokens.data(), B, T_len, C);
  cpu::token_embedding_forward(tok_out.data(), tokens.data(), wte.data(), N, C);
  cpu::token_embedding_backward(tok_dte.data(), dout.data(), tokens.data(), N, C);

  DeviceArray<int32_t> d_tokens(tokens);
  DeviceTensor<T> d_wte(wte), d_wpe(wpe), d_dout(dout), d_out(N * C), d_tok_out(N * C), d_dte(g0_te), d_dpe(g0_pe),
      d_tok_dte(g0_te);
  ASSERT_EQ(encoder_forward(d_out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), B, T_len, C, nullptr),
            cudaSuccess);
  ASSERT_EQ(encoder_backward(d_dte.data(), d_dpe.data(), d_dout.data(), d_tokens.data(), B, T_len, C, nullptr, 0,
                             nullptr),
            cudaSuccess);
  ASSERT_EQ(token_embedding_forward(d_tok_out.data(), d_tokens.data(), d_wte.data(), N, C, nullptr), cudaSuccess);
  ASSERT_EQ(token_embedding_backward(d_tok_dte.data(), d_dout.data(), d_tokens.data(), N, C, nullptr, 0, nullptr),
            cudaSuccess);
  // The forward is a copy (plus one add): exact in fp32. Backward sums a token's rows in row order,
  // as the CPU does: exact in fp32 too; 16-bit types round the += once.
  const Tolerance tol = std::is_same_v<T, float> ? Tolerance{0.0, 0.0} : testing::elementwise_tolerance<T>();
  expect_matches(d_out, out, tol, "encoder out");
  expect_matches(d_tok_out, tok_out, tol, "token out");
  expect_matches(d_dte, dte, tol, "dwte");
  expect_matches(d_dpe, dpe, tol, "dwpe");
  expect_matches(d_tok_dte, tok_dte, tol, "token dwte");
}

TEST(CudaOpsArguments, InvalidShapesAreRejectedBeforeAnyLaunch) {
  // Argument checks run on the host before any CUDA call, so they are tested with or without a GPU.
  EXPECT_EQ(layernorm_forward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, -1, 4, 1e-5f, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(rope_forward<float>(nullptr, nullptr, 1, 4, 2, 7, 10000.0f, 0, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(gelu_forward<float>(nullptr, nullptr, -3, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(swiglu_backward<__nv_bfloat16>(nullptr, nullptr, nullptr, 2, -1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(rmsnorm_backward<__half>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, -2, 8, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(encoder_forward<float>(nullptr, nullptr, nullptr, nullptr, -1, 2, 2, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(token_embedding_backward<float>(nullptr, nullptr, nullptr, -1, 4, nullptr, 0, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(token_embedding_backward_workspace_bytes(0), 0u);
  // Empty work is a successful no-op (no launch of a zero-sized grid).
  EXPECT_EQ(gelu_forward<float>(nullptr, nullptr, 0, nullptr), cudaSuccess);
  EXPECT_EQ(rmsnorm_forward<float>(nullptr, nullptr, nullptr, nullptr, 0, 8, 1e-6f, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace strata::kernels::cuda

#else

TEST(CudaOps, SkippedWithoutCudaBuild) { STRATA_GPU_SKIP("strata was built without the CUDA backend"); }

#endif
