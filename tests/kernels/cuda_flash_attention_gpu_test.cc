// GPU tests of the tiled tensor-core attention (kernels/cuda/flash_attention.cuh), reached through
// attention_forward / attention_backward with bf16 and fp16 at head sizes 64 and 128: against the
// CPU reference (kernels/cpu/ops_attention.h) with sequence lengths that are and are not multiples
// of the 64-row tile, grouped-query heads and gradients accumulated onto non-zero values; the
// backward with scratch (the dq kernel hands each row's D and lse to the dk, dv kernel) bit for bit
// the backward without; bit for bit the same result on a second run (no atomics); and the same bits
// with 32 query rows a warp as with 16 (flash::WarpRows). CTest label `gpu`.
#include <gtest/gtest.h>

#include "gpu_required.h"

#if defined(STRATA_HAVE_CUDA)

#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kernels/cpu/ops_attention.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/flash_attention.cuh"
#include "tests/kernels/cuda_gpu_test_support.h"
#include "tests/kernels/ops_test_support.h"

namespace strata::kernels::cuda {
namespace {

namespace cpu = ::strata::kernels;
using strata::kernels::testing::random_floats;
using testing::DeviceTensor;
using testing::expect_matches;
using testing::round_all;

template <typename T>
class CudaFlashAttentionTest : public ::testing::Test {};
using HalfTypes = ::testing::Types<__nv_bfloat16, __half>;
struct HalfTypeNames {
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, __half> ? "fp16" : "bf16";
  }
};
TYPED_TEST_SUITE(CudaFlashAttentionTest, HalfTypes, HalfTypeNames);

struct Case {
  int64_t B, T_len, NH, NKV, HS;
};

TYPED_TEST(CudaFlashAttentionTest, MatchesCpuAcrossTilesHeadSizesAndGroups) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  // 64 and 128 rows: whole tiles; 1, 65 and 200: a partial last tile; NH / NKV = 1, 2 and 3.
  for (const Case c : {Case{2, 64, 2, 2, 64}, Case{1, 1, 2, 1, 64}, Case{2, 65, 4, 2, 64}, Case{1, 200, 3, 1, 64},
                       Case{1, 128, 2, 1, 128}, Case{2, 70, 2, 2, 128}}) {
    SCOPED_TRACE(::testing::Message() << "B " << c.B << " T " << c.T_len << " NH " << c.NH << " NKV " << c.NKV
                                      << " HS " << c.HS);
    const int64_t nq = c.B * c.T_len * c.NH * c.HS, nkv = c.B * c.T_len * c.NKV * c.HS, nl = c.B * c.NH * c.T_len;
    // Scores of a few units, as trained models have: softmax neither flat nor one-hot.
    const auto q = round_all<T>(random_floats(nq, 81, -2.0f, 2.0f)), k = round_all<T>(random_floats(nkv, 82, -2.0f, 2.0f));
    const auto v = round_all<T>(random_floats(nkv, 83)), dout = round_all<T>(random_floats(nq, 84));
    const auto g0_q = round_all<T>(random_floats(nq, 85)), g0_k = round_all<T>(random_floats(nkv, 86)),
               g0_v = round_all<T>(random_floats(nkv, 87));
    std::vector<float> out(nq), lse(nl), dq = g0_q, dk = g0_k, dv = g0_v;
    cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), c.B, c.T_len, c.NH, c.NKV, c.HS);
    const auto out_t = round_all<T>(out);
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out_t.data(),
                            lse.data(), c.B, c.T_len, c.NH, c.NKV, c.HS);

    DeviceTensor<T> d_q(q), d_k(k), d_v(v), d_dout(dout), d_out(nq), d_dq(g0_q), d_dk(g0_k), d_dv(g0_v);
    DeviceTensor<float> d_lse(nl);
    ASSERT_EQ(attention_forward(d_out.data(), d_lse.data(), d_q.data(), d_k.data(), d_v.data(), c.B, c.T_len, c.NH,
                                c.NKV, c.HS, nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    expect_matches(d_out, out, testing::reduction_tolerance<T>(), "out");
    // lse: fp32 sums of exp2 instead of exp, in another order: relative 1e-5 of a value ~ log(T) + 4.
    expect_matches(d_lse, lse, testing::Tolerance{2e-5, 2e-5}, "lse");
    d_out.upload(out_t);
    d_lse.upload(lse);
    ASSERT_EQ(attention_backward(d_dq.data(), d_dk.data(), d_dv.data(), d_dout.data(), d_q.data(), d_k.data(),
                                 d_v.data(), d_out.data(), d_lse.data(), c.B, c.T_len, c.NH, c.NKV, c.HS, nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    expect_matches(d_dq, dq, testing::reduction_tolerance<T>(), "dq");
    expect_matches(d_dk, dk, testing::reduction_tolerance<T>(), "dk");
    expect_matches(d_dv, dv, testing::reduction_tolerance<T>(), "dv");

    // With scratch for the per-row terms (poisoned first: every row read must have been written):
    // the same bits.
    DeviceTensor<T> s_dq(g0_q), s_dk(g0_k), s_dv(g0_v);
    DeviceTensor<float> scratch(std::vector<float>(2 * nl + 64, std::numeric_limits<float>::quiet_NaN()));
    ASSERT_EQ(attention_backward(s_dq.data(), s_dk.data(), s_dv.data(), d_dout.data(), d_q.data(), d_k.data(),
                                 d_v.data(), d_out.data(), d_lse.data(), c.B, c.T_len, c.NH, c.NKV, c.HS, nullptr,
                                 scratch.data(), static_cast<size_t>(2 * nl)),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (auto [with, without, name] : {std::tuple{&s_dq, &d_dq, "dq"}, {&s_dk, &d_dk, "dk"}, {&s_dv, &d_dv, "dv"}}) {
      const std::vector<float> a = with->download(), b = without->download();
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << name << ": scratch changed a bit";
    }
  }
}

TYPED_TEST(CudaFlashAttentionTest, SecondRunIsBitIdentical) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const Case c{2, 300, 4, 2, 64};
  const int64_t nq = c.B * c.T_len * c.NH * c.HS, nkv = c.B * c.T_len * c.NKV * c.HS, nl = c.B * c.NH * c.T_len;
  const auto q = round_all<T>(random_floats(nq, 91)), k = round_all<T>(random_floats(nkv, 92));
  const auto v = round_all<T>(random_floats(nkv, 93)), dout = round_all<T>(random_floats(nq, 94));
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    const std::vector<float> zeros_q(nq), zeros_kv(nkv);
    DeviceTensor<T> d_q(q), d_k(k), d_v(v), d_dout(dout), d_out(nq), d_dq(zeros_q), d_dk(zeros_kv), d_dv(zeros_kv);
    DeviceTensor<float> d_lse(nl), scratch(2 * nl);  // the per-row terms path, as the runtime runs it
    ASSERT_EQ(attention_forward(d_out.data(), d_lse.data(), d_q.data(), d_k.data(), d_v.data(), c.B, c.T_len, c.NH,
                                c.NKV, c.HS, nullptr),
              cudaSuccess);
    ASSERT_EQ(attention_backward(d_dq.data(), d_dk.data(), d_dv.data(), d_dout.data(), d_q.data(), d_k.data(),
                                 d_v.data(), d_out.data(), d_lse.data(), c.B, c.T_len, c.NH, c.NKV, c.HS, nullptr,
                                 scratch.data(), static_cast<size_t>(2 * nl)),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> all;
    for (DeviceTensor<T>* t : {&d_out, &d_dq, &d_dk, &d_dv}) {
      const std::vector<float> part = t->download();
      all.insert(all.end(), part.begin(), part.end());
    }
    const std::vector<float> l = d_lse.download();
    all.insert(all.end(), l.begin(), l.end());
    runs.push_back(std::move(all));
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)), 0);
}

// The three kernels with 32 rows a warp (two m16 tiles: query rows in the forward and dq, keys in
// dk, dv; the default at head size 64) against 16 (one): every row goes through the same operations
// in the same order, so out, lse, dq, dk and dv must be the same bits. At whole and partial
// 128-row blocks (T 1, 64, 65, 128, 200, 300, 1024: warps whose rows all lie past T, warps that
// skip a block's last key tile or first query tile), grouped heads, gradients accumulated onto
// non-zero values, the backward with and without scratch (the dk, dv kernel reading the per-row
// terms the dq kernel wrote, or forming them). m32 at head size 128 is not built: refused.
TYPED_TEST(CudaFlashAttentionTest, ThirtyTwoRowsAWarpEqualSixteenBitForBit) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  for (const Case c : {Case{2, 64, 2, 2, 64}, Case{1, 1, 2, 1, 64}, Case{2, 65, 4, 2, 64}, Case{1, 128, 2, 1, 64},
                       Case{1, 200, 3, 1, 64}, Case{2, 300, 4, 2, 64}, Case{1, 1024, 2, 2, 64}}) {
    SCOPED_TRACE(::testing::Message() << "B " << c.B << " T " << c.T_len << " NH " << c.NH << " NKV " << c.NKV);
    const int64_t nq = c.B * c.T_len * c.NH * c.HS, nkv = c.B * c.T_len * c.NKV * c.HS, nl = c.B * c.NH * c.T_len;
    const auto q = round_all<T>(random_floats(nq, 101, -2.0f, 2.0f)),
               k = round_all<T>(random_floats(nkv, 102, -2.0f, 2.0f));
    const auto v = round_all<T>(random_floats(nkv, 103)), dout = round_all<T>(random_floats(nq, 104));
    const auto g0_q = round_all<T>(random_floats(nq, 105)), g0_k = round_all<T>(random_floats(nkv, 106)),
               g0_v = round_all<T>(random_floats(nkv, 107));
    // The backward's out and lse: the CPU reference's, the same input for both choices.
    std::vector<float> out(nq), lse(nl);
    cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), c.B, c.T_len, c.NH, c.NKV, c.HS);
    const auto out_t = round_all<T>(out);

    std::vector<std::vector<float>> results[2];
    const flash::WarpRows choices[2] = {flash::WarpRows::m16, flash::WarpRows::m32};
    for (int ci = 0; ci < 2; ++ci) {
      const flash::WarpRows rows = choices[ci];
      DeviceTensor<T> d_q(q), d_k(k), d_v(v), d_dout(dout), d_out(nq), d_out_ref(out_t);
      DeviceTensor<float> d_lse(nl), d_lse_ref(lse);
      ASSERT_EQ(flash::forward<T>(d_out.data(), d_lse.data(), d_q.data(), d_k.data(), d_v.data(), c.B, c.T_len, c.NH,
                                  c.NKV, c.HS, nullptr, 0, rows),
                cudaSuccess);
      results[ci].push_back(d_out.download());
      results[ci].push_back(d_lse.download());
      EXPECT_TRUE(d_out.guards_intact() && d_lse.guards_intact());
      for (const bool with_scratch : {false, true}) {
        DeviceTensor<T> d_dq(g0_q), d_dk(g0_k), d_dv(g0_v);
        DeviceTensor<float> scratch(std::vector<float>(2 * nl, std::numeric_limits<float>::quiet_NaN()));
        ASSERT_EQ(flash::backward<T>(d_dq.data(), d_dk.data(), d_dv.data(), d_dout.data(), d_q.data(), d_k.data(),
                                     d_v.data(), d_out_ref.data(), d_lse_ref.data(), c.B, c.T_len, c.NH, c.NKV, c.HS,
                                     nullptr, with_scratch ? scratch.data() : nullptr,
                                     with_scratch ? static_cast<size_t>(2 * nl) : 0, 0, rows),
                  cudaSuccess);
        for (DeviceTensor<T>* t : {&d_dq, &d_dk, &d_dv}) {
          results[ci].push_back(t->download());
          EXPECT_TRUE(t->guards_intact());
        }
      }
    }
    const char* names[] = {"out", "lse", "dq", "dk", "dv", "dq (scratch)", "dk (scratch)", "dv (scratch)"};
    ASSERT_EQ(results[0].size(), 8u);
    ASSERT_EQ(results[1].size(), 8u);
    for (size_t i = 0; i < 8; ++i) {
      ASSERT_EQ(results[0][i].size(), results[1][i].size());
      EXPECT_EQ(std::memcmp(results[0][i].data(), results[1][i].data(), results[0][i].size() * sizeof(float)), 0)
          << names[i] << ": 32 rows a warp changed a bit";
    }
    // And the m32 results are attention's, not two equal wrong answers: out against the reference.
    const testing::Tolerance tol = testing::reduction_tolerance<T>();
    EXPECT_TRUE(strata::kernels::testing::all_close(results[1][0], testing::widen_all(out), tol.atol, tol.rtol))
        << "out (m32) against the CPU reference";
  }

  // Two m-tiles at head size 128 are not built.
  const Case c{1, 64, 1, 1, 128};
  const int64_t n = c.T_len * c.HS;
  DeviceTensor<T> a(n), b2(n), c2(n), d(n), e(n), f(n), g(n), o(n);
  DeviceTensor<float> l(c.T_len);
  EXPECT_EQ(flash::forward<T>(o.data(), l.data(), a.data(), b2.data(), c2.data(), c.B, c.T_len, c.NH, c.NKV, c.HS,
                              nullptr, 0, flash::WarpRows::m32),
            cudaErrorInvalidValue);
  EXPECT_EQ(flash::backward<T>(d.data(), e.data(), f.data(), g.data(), a.data(), b2.data(), c2.data(), o.data(),
                               l.data(), c.B, c.T_len, c.NH, c.NKV, c.HS, nullptr, nullptr, 0, 0,
                               flash::WarpRows::m32),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace strata::kernels::cuda

#else

TEST(CudaFlashAttention, SkippedWithoutCudaBuild) { STRATA_GPU_SKIP("strata was built without the CUDA backend"); }

#endif
