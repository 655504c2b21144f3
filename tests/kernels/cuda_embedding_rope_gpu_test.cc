// GPU tests of the sorted token-embedding backward and the position-parallel RoPE kernels: the
// sorted backward (CUB radix sort + one block per token) against the CPU reference bit for bit
// (fp32 sums in row order, one rounding), with heavily repeated tokens (a run longer than a block's
// chunk), against the slow path without a workspace, and run to run; RoPE at head sizes with and
// without the shared cos/sin table, several row slices per position, in place, and run to run.
#include <gtest/gtest.h>

#include "gpu_required.h"

#if defined(STRATA_HAVE_CUDA)

#include <cstring>
#include <vector>

#include "kernels/cpu/ops_embedding.h"
#include "kernels/cpu/ops_rope.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "tests/kernels/cuda_gpu_test_support.h"
#include "tests/kernels/ops_test_support.h"

namespace strata::kernels::cuda {
namespace {

namespace cpu = ::strata::kernels;
using strata::kernels::testing::random_floats;
using testing::DeviceArray;
using testing::DeviceTensor;
using testing::round_all;

template <typename T>
class CudaEmbeddingRopeTest : public ::testing::Test {};
TYPED_TEST_SUITE(CudaEmbeddingRopeTest, testing::ElementTypes, testing::ElementTypeNames);

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

// Device scratch for the sorted backward, exactly the size it asks for.
class Workspace {
 public:
  explicit Workspace(size_t bytes) : bytes_(bytes) { EXPECT_EQ(cudaMalloc(&ptr_, bytes > 0 ? bytes : 1), cudaSuccess); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() { cudaFree(ptr_); }
  void* data() { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

// N = 4 x 1024 rows over V = 500 ids: token 7 on every third row (a run of 1366 rows, six chunks of
// the kernel's 256), the rest skewed; C = 300 (two column chunks, the second partial).
TYPED_TEST(CudaEmbeddingRopeTest, SortedTokenBackwardMatchesCpuBitForBit) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const int64_t B = 4, T_len = 1024, N = B * T_len, C = 300, V = 500;
  std::vector<int32_t> tokens(N);
  for (int64_t i = 0; i < N; ++i) tokens[i] = i % 3 == 0 ? 7 : static_cast<int32_t>((i * i / 7 + i / 13) % V);
  const auto dout = round_all<T>(random_floats(N * C, 301));
  const auto g0_te = round_all<T>(random_floats(V * C, 302)), g0_pe = round_all<T>(random_floats(T_len * C, 303));
  std::vector<float> want_te = g0_te, want_pe = g0_pe, want_tok = g0_te;
  cpu::encoder_backward(want_te.data(), want_pe.data(), dout.data(), tokens.data(), B, T_len, C);
  cpu::token_embedding_backward(want_tok.data(), dout.data(), tokens.data(), N, C);
  // The GPU rounds each fp32 "old + sum" once to T, as the CPU result stored as T.
  want_te = round_all<T>(want_te);
  want_pe = round_all<T>(want_pe);
  want_tok = round_all<T>(want_tok);

  const size_t need = token_embedding_backward_workspace_bytes(N);
  ASSERT_GT(need, 0u);
  Workspace workspace(need);
  DeviceArray<int32_t> d_tokens(tokens);
  DeviceTensor<T> d_dout(dout);
  std::vector<std::vector<float>> sorted_runs;
  for (int run = 0; run < 2; ++run) {
    DeviceTensor<T> d_te(g0_te), d_pe(g0_pe), d_tok(g0_te);
    ASSERT_EQ(encoder_backward(d_te.data(), d_pe.data(), d_dout.data(), d_tokens.data(), B, T_len, C,
                               workspace.data(), workspace.bytes(), nullptr),
              cudaSuccess);
    ASSERT_EQ(token_embedding_backward(d_tok.data(), d_dout.data(), d_tokens.data(), N, C, workspace.data(),
                                       workspace.bytes(), nullptr),
              cudaSuccess);
    const std::vector<float> te = d_te.download(), pe = d_pe.download(), tok = d_tok.download();
    EXPECT_TRUE(same_bits(te, want_te)) << "encoder dwte";
    EXPECT_TRUE(same_bits(pe, want_pe)) << "encoder dwpe";
    EXPECT_TRUE(same_bits(tok, want_tok)) << "token dwte";
    EXPECT_TRUE(d_te.guards_intact() && d_pe.guards_intact() && d_tok.guards_intact()) << "guard bytes";
    sorted_runs.push_back(tok);
  }
  EXPECT_TRUE(same_bits(sorted_runs[0], sorted_runs[1])) << "run to run";

  // One byte short of the workspace, and none: the slow path, with the same bits.
  for (const size_t bytes : {need - 1, size_t{0}}) {
    DeviceTensor<T> d_tok(g0_te);
    ASSERT_EQ(token_embedding_backward(d_tok.data(), d_dout.data(), d_tokens.data(), N, C,
                                       bytes > 0 ? workspace.data() : nullptr, bytes, nullptr),
              cudaSuccess);
    EXPECT_TRUE(same_bits(d_tok.download(), want_tok)) << "slow path with " << bytes << " bytes";
  }
}

// Every row the same token, and every row a different one: a single run of N and N runs of one.
TYPED_TEST(CudaEmbeddingRopeTest, SortedTokenBackwardAtBothExtremes) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const int64_t N = 777, C = 64, V = 800;
  const auto dout = round_all<T>(random_floats(N * C, 311));
  const auto g0 = round_all<T>(random_floats(V * C, 312));
  Workspace workspace(token_embedding_backward_workspace_bytes(N));
  for (const bool all_same : {true, false}) {
    SCOPED_TRACE(all_same ? "one token" : "distinct tokens");
    std::vector<int32_t> tokens(N);
    for (int64_t i = 0; i < N; ++i) tokens[i] = all_same ? 3 : static_cast<int32_t>(V - 1 - i);
    std::vector<float> want = g0;
    cpu::token_embedding_backward(want.data(), dout.data(), tokens.data(), N, C);
    DeviceArray<int32_t> d_tokens(tokens);
    DeviceTensor<T> d_dout(dout), d_te(g0);
    ASSERT_EQ(token_embedding_backward(d_te.data(), d_dout.data(), d_tokens.data(), N, C, workspace.data(),
                                       workspace.bytes(), nullptr),
              cudaSuccess);
    EXPECT_TRUE(same_bits(d_te.download(), round_all<T>(want)));
  }
}

// HS = 128 (table; B * NH * HS/2 = 2048 pairs per position: two row slices) and HS = 2100 (no
// table: half = 1050 > 1024), forward, in place, and the accumulating inverse, twice.
TYPED_TEST(CudaEmbeddingRopeTest, RopeMatchesCpuAtLargeHeadsAndRunsTwiceBitIdentical) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  struct Case {
    int64_t B, T_len, NH, HS;
  };
  for (const Case c : {Case{4, 33, 8, 128}, Case{1, 5, 2, 2100}}) {
    SCOPED_TRACE(::testing::Message() << "HS " << c.HS);
    const int64_t n = c.B * c.T_len * c.NH * c.HS, offset = 3;
    const auto inp = round_all<T>(random_floats(n, 321)), dout = round_all<T>(random_floats(n, 322));
    const auto g0 = round_all<T>(random_floats(n, 323));
    std::vector<float> out(n), din = g0;
    cpu::rope_forward(out.data(), inp.data(), c.B, c.T_len, c.NH, c.HS, 10000.0f, offset);
    cpu::rope_backward(din.data(), dout.data(), c.B, c.T_len, c.NH, c.HS, 10000.0f, offset);
    std::vector<std::vector<float>> runs;
    for (int run = 0; run < 2; ++run) {
      DeviceTensor<T> d_inp(inp), d_dout(dout), d_out(n), d_din(g0);
      ASSERT_EQ(rope_forward(d_out.data(), d_inp.data(), c.B, c.T_len, c.NH, c.HS, 10000.0f, offset, nullptr),
                cudaSuccess);
      ASSERT_EQ(rope_backward(d_din.data(), d_dout.data(), c.B, c.T_len, c.NH, c.HS, 10000.0f, offset, nullptr),
                cudaSuccess);
      // cos/sin from double on both sides (the device's and glibc's last double bit may differ)
      // and the same fp32 operations, unfused: agreement to T's rounding.
      testing::expect_matches(d_out, out, testing::elementwise_tolerance<T>(), "out");
      testing::expect_matches(d_din, din, testing::elementwise_tolerance<T>(), "dinp");
      ASSERT_EQ(rope_forward(d_inp.data(), d_inp.data(), c.B, c.T_len, c.NH, c.HS, 10000.0f, offset, nullptr),
                cudaSuccess);
      const std::vector<float> in_place = d_inp.download();
      EXPECT_TRUE(same_bits(in_place, d_out.download())) << "in place differs from out of place";
      std::vector<float> all = in_place;
      const std::vector<float> d = d_din.download();
      all.insert(all.end(), d.begin(), d.end());
      runs.push_back(std::move(all));
    }
    EXPECT_TRUE(same_bits(runs[0], runs[1])) << "run to run";
  }
}

}  // namespace
}  // namespace strata::kernels::cuda

#else

TEST(CudaEmbeddingRope, SkippedWithoutCudaBuild) { STRATA_GPU_SKIP("strata was built without the CUDA backend"); }

#endif
