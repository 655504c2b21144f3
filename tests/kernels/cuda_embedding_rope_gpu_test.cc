// GPU tests of the sorted token-embedding backward and the position-parallel RoPE kernels: the
// sorted backward (CUB radix sort + one block per token) against the CPU reference bit for bit
// (fp32 sums in row order, one rounding), with heavily repeated tokens (a run longer than a block's
// chunk), against the slow path without a workspace, and run to run; the embeddings over row tiles
// of the table against the untiled calls, bit for bit; RoPE at head sizes with and
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

// Row tiles of the table (TableRows), each its own device buffer, visited one at a time with all
// N = 4 x 256 rows over V = 1000 ids (none in [300, 420); token 7 on every third row): the forward
// writes the untiled bits to the rows the tile holds and nothing else, the backward (sorted and
// slow path) gives the untiled dwte bits tile by tile, dwpe passed with one tile is the untiled.
TYPED_TEST(CudaEmbeddingRopeTest, TiledTablesGiveTheUntiledBits) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const int64_t B = 4, T_len = 256, N = B * T_len, C = 300, V = 1000;
  const std::vector<int64_t> begins = {0, 1, 300, 420, 777, V};  // one row, none held, an uneven last
  std::vector<int32_t> tokens(N);
  for (int64_t i = 0; i < N; ++i) {
    const auto x = static_cast<int32_t>((i * i / 7 + i / 13) % (V - 120));
    tokens[i] = i % 3 == 0 ? 7 : x < 300 ? x : x + 120;
  }
  tokens[5] = 0;  // the one-row tile holds a token
  const auto wte = round_all<T>(random_floats(V * C, 331)), wpe = round_all<T>(random_floats(T_len * C, 332));
  const auto dout = round_all<T>(random_floats(N * C, 333)), g0_te = round_all<T>(random_floats(V * C, 334));
  const auto g0_pe = round_all<T>(random_floats(T_len * C, 335));
  Workspace workspace(token_embedding_backward_workspace_bytes(N));
  DeviceArray<int32_t> d_tokens(tokens);
  DeviceTensor<T> d_wte(wte), d_wpe(wpe), d_dout(dout), d_enc(N * C), d_tok(N * C);
  DeviceTensor<T> d_te(g0_te), d_pe(g0_pe), d_te_tok(g0_te);
  ASSERT_EQ(encoder_forward(d_enc.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), B, T_len, C, nullptr),
            cudaSuccess);
  ASSERT_EQ(token_embedding_forward(d_tok.data(), d_tokens.data(), d_wte.data(), N, C, nullptr), cudaSuccess);
  ASSERT_EQ(encoder_backward(d_te.data(), d_pe.data(), d_dout.data(), d_tokens.data(), B, T_len, C, workspace.data(),
                             workspace.bytes(), nullptr),
            cudaSuccess);
  ASSERT_EQ(token_embedding_backward(d_te_tok.data(), d_dout.data(), d_tokens.data(), N, C, workspace.data(),
                                     workspace.bytes(), nullptr),
            cudaSuccess);
  const std::vector<float> want_enc = d_enc.download(), want_tok = d_tok.download(), want_te = d_te.download();
  const std::vector<float> want_pe = d_pe.download(), want_te_tok = d_te_tok.download();

  const std::vector<float> fill(N * C, 0.25f);
  std::vector<float> got_te, got_te_tok, got_te_slow;
  DeviceTensor<T> d_tile_pe(g0_pe);
  for (size_t k = 0; k + 1 < begins.size(); ++k) {
    const TableRows tile{begins[k], begins[k + 1] - begins[k]};
    SCOPED_TRACE(::testing::Message() << "tile [" << tile.begin << ", +" << tile.count << ")");
    const auto rows_of = [&](const std::vector<float>& v) {
      return std::vector<float>(v.begin() + tile.begin * C, v.begin() + (tile.begin + tile.count) * C);
    };
    DeviceTensor<T> d_table(rows_of(wte)), d_out(fill), d_out_tok(fill);
    ASSERT_EQ(encoder_forward(d_out.data(), d_tokens.data(), d_table.data(), d_wpe.data(), B, T_len, C, nullptr,
                              tile),
              cudaSuccess);
    ASSERT_EQ(token_embedding_forward(d_out_tok.data(), d_tokens.data(), d_table.data(), N, C, nullptr, tile),
              cudaSuccess);
    const std::vector<float> out = d_out.download(), out_tok = d_out_tok.download();
    int64_t wrong = 0;
    for (int64_t n = 0; n < N; ++n) {
      const size_t at = static_cast<size_t>(n * C), bytes = sizeof(float) * C;
      const bool held = tile.holds(tokens[n]);
      wrong += std::memcmp(&out[at], held ? &want_enc[at] : &fill[at], bytes) != 0;
      wrong += std::memcmp(&out_tok[at], held ? &want_tok[at] : &fill[at], bytes) != 0;
    }
    EXPECT_EQ(wrong, 0) << "rows with other bits than the untiled call's, or rows of other tiles written";
    EXPECT_TRUE(d_out.guards_intact() && d_out_tok.guards_intact());

    DeviceTensor<T> d_tile_te(rows_of(g0_te)), d_tile_tok(rows_of(g0_te)), d_tile_slow(rows_of(g0_te));
    ASSERT_EQ(encoder_backward(d_tile_te.data(), tile.begin == 420 ? d_tile_pe.data() : nullptr, d_dout.data(),
                               d_tokens.data(), B, T_len, C, workspace.data(), workspace.bytes(), nullptr, tile),
              cudaSuccess);
    ASSERT_EQ(token_embedding_backward(d_tile_tok.data(), d_dout.data(), d_tokens.data(), N, C, workspace.data(),
                                       workspace.bytes(), nullptr, tile),
              cudaSuccess);
    ASSERT_EQ(token_embedding_backward(d_tile_slow.data(), d_dout.data(), d_tokens.data(), N, C, nullptr, 0, nullptr,
                                       tile),
              cudaSuccess);
    EXPECT_TRUE(d_tile_te.guards_intact() && d_tile_tok.guards_intact() && d_tile_slow.guards_intact());
    const auto append = [](DeviceTensor<T>& d, std::vector<float>& got) {
      const std::vector<float> v = d.download();
      got.insert(got.end(), v.begin(), v.end());
    };
    append(d_tile_te, got_te);
    append(d_tile_tok, got_te_tok);
    append(d_tile_slow, got_te_slow);
  }
  EXPECT_TRUE(same_bits(got_te, want_te)) << "encoder dwte";
  EXPECT_TRUE(same_bits(got_te_tok, want_te_tok)) << "token dwte, sorted path";
  EXPECT_TRUE(same_bits(got_te_slow, want_te_tok)) << "token dwte, slow path";
  EXPECT_TRUE(same_bits(d_tile_pe.download(), want_pe)) << "dwpe passed with the tile at 420";
  EXPECT_EQ(token_embedding_forward<T>(nullptr, nullptr, nullptr, 1, 1, nullptr, TableRows{-1, 4}),
            cudaErrorInvalidValue);
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
