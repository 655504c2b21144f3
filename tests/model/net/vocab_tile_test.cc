// Memory-centric tiling (ModelConfig::vocab_tile): the (V, C) token table and untied head cut into
// row tiles, each its own chunk. The layout's tiles cover each table exactly once; a model whose
// table alone is larger than the device budget trains with paged weights and the arena's peak
// under the budget; in fp32 the tiled run's losses, gradient norms, final masters and checkpoint
// files are bit-identical to the untiled run's (only the output dimension is split, and the head's
// input gradient is reduced in the same kVocabTileBlock blocks either way); a tiled model loads an
// untiled checkpoint and resumes from its own; a checkpoint saved with other tiles is refused in
// words.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/ckpt/checkpoint.h"
#include "model/plan/placement.h"
#include "model/train/trainer.h"
#include "model/net/transformer.h"
#include "offload/tier_manager.h"
#include "tests/model/model_run.h"
#include "tests/model/tiled_training.h"

namespace strata::model {
namespace vocab_tile_test {

using testing::expect_value;
using tiled_training::Outcome;
using tiled_training::train;
using tiled_training::file_bytes;
using tiled_training::TempDir;
using tiled_training::kB;
using tiled_training::kT;
using tiled_training::small_model;
using tiled_training::expect_tiles_cover;
using tiled_training::paging_status;

// A model whose tables dominate: V = 32 x 1024 + 300 rows (an uneven last tile) of C = 64 against
// layers of ~50 K parameters: each table is 8.5 MB in fp32, a layer 0.2 MB.
ModelConfig table_heavy(Arch arch, int64_t vocab_tile) {
  ModelConfig c = small_model(arch, "tables", 32 * kVocabTileBlock + 300, 3, arch == Arch::gpt2 ? 256 : 160);
  c.vocab_tile = vocab_tile;
  return c;
}

TEST(VocabTileLayout, TilesCoverEachTableOnceInTheirOwnChunks) {
  for (const Arch arch : {Arch::gpt2, Arch::llama}) {
    const ModelConfig c = table_heavy(arch, 2 * kVocabTileBlock);
    const ParamLayout layout = expect_value(build_param_layout(c, 4));
    const ParamLayout whole = expect_value(build_param_layout(table_heavy(arch, 0), 4));
    EXPECT_EQ(layout.total_elements(), parameter_count(c));
    EXPECT_EQ(vocab_tiles(c), 17);
    EXPECT_EQ(layout.embedding_chunks(), 17u);
    EXPECT_EQ(layout.head_chunks(), arch == Arch::gpt2 ? 1u : 17u);
    EXPECT_EQ(layout.chunks.size(), whole.chunks.size() + (arch == Arch::gpt2 ? 16 : 32));
    EXPECT_EQ(layout.chunks[0].name, "embedding tile 1/17");
    EXPECT_EQ(layout.chunks[16].row_begin, 32 * kVocabTileBlock);
    EXPECT_EQ(layout.chunks[16].rows, 300);
    expect_tiles_cover(layout, whole);
  }
  ModelConfig bad = table_heavy(Arch::llama, 1000);
  EXPECT_EQ(validate(bad).code(), Code::invalid_argument);
  EXPECT_NE(validate(bad).message().find("multiple of 1024"), std::string::npos) << validate(bad).message();
}

// The losses and masters bit for bit. The gradient norm is summed per chunk, then over chunks, in
// double: a table's sum in tiles is grouped differently, so the norm (and the clip scale, in
// double) may differ in its last bits; the float scale the update uses did not in these runs, and
// the masters check that.
void expect_same_training(const Outcome& got, const Outcome& want) {
  EXPECT_EQ(got.losses, want.losses);
  ASSERT_EQ(got.norms.size(), want.norms.size());
  for (size_t i = 0; i < want.norms.size(); ++i) EXPECT_NEAR(got.norms[i], want.norms[i], 1e-14 * want.norms[i]);
  ASSERT_EQ(got.masters.size(), want.masters.size());
  for (const auto& [name, values] : want.masters) {
    const auto it = got.masters.find(name);
    ASSERT_NE(it, got.masters.end()) << name;
    ASSERT_EQ(it->second.size(), values.size()) << name;
    EXPECT_EQ(0, std::memcmp(it->second.data(), values.data(), values.size() * sizeof(float))) << name;
  }
}

class VocabTileTraining : public ::testing::TestWithParam<Arch> {};

// The table (8.5 MB) is larger than the whole 6 MiB budget; tiles of 1024 rows (256 KiB) fit.
TEST_P(VocabTileTraining, ATableLargerThanTheBudgetTrainsBitIdenticallyToUntiled) {
  constexpr uint64_t kBudget = 6ull << 20;
  const ModelConfig whole = table_heavy(GetParam(), 0);
  const ModelConfig tiled = table_heavy(GetParam(), kVocabTileBlock);
  ASSERT_GT(uint64_t(whole.vocab * whole.dim) * 4, kBudget);
  TempDir a, b;
  const Outcome want = train(whole, DType::f32, 0, 6, "", a.path);
  const Outcome got = train(tiled, DType::f32, kBudget, 6, "", b.path);
  expect_same_training(got, want);
  EXPECT_LE(got.arena_peak, kBudget);
  EXPECT_GT(got.arena_peak, kBudget / 2);  // the tiles did take the room
  // The checkpoints are the same files: each tile is written into its tensor.
  EXPECT_EQ(file_bytes(b.path + "/" + std::string(kCheckpointModelFile)),
            file_bytes(a.path + "/" + std::string(kCheckpointModelFile)));
  // Untiled, the same budget cannot even page the weights: the table's slot alone is over it.
  EXPECT_EQ(paging_status(whole, kBudget), Code::out_of_memory);
}

// bf16 rounds the head's input gradient once per GEMM, so a tiled run is within those roundings
// of an untiled one, not equal: the losses stay within 2% over a few steps.
TEST_P(VocabTileTraining, Bf16TiledTracksUntiledWithinTheHeadsRoundings) {
  const Outcome want = train(table_heavy(GetParam(), 0), DType::bf16, 0, 4);
  const Outcome got = train(table_heavy(GetParam(), kVocabTileBlock), DType::bf16, 6ull << 20, 4);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  EXPECT_EQ(got.losses.front(), want.losses.front());  // the forward is the same bits
  for (size_t i = 0; i < want.losses.size(); ++i) EXPECT_NEAR(got.losses[i], want.losses[i], 0.02 * want.losses[i]);
}

TEST_P(VocabTileTraining, ATiledRunLoadsAnUntiledCheckpointAndResumesItsOwn) {
  TempDir whole_ckpt, tiled_ckpt;
  const Outcome straight = train(table_heavy(GetParam(), 2 * kVocabTileBlock), DType::f32, 10ull << 20, 6);
  // An untiled run's checkpoint after 3 steps: the weights load into tiles; its moments are per
  // chunk, so a tiled optimizer refuses them, naming the flag.
  (void)train(table_heavy(GetParam(), 0), DType::f32, 0, 3, "", whole_ckpt.path);
  Status refused;
  (void)train(table_heavy(GetParam(), 2 * kVocabTileBlock), DType::f32, 10ull << 20, 6, whole_ckpt.path, "", &refused);
  EXPECT_EQ(refused.code(), Code::invalid_argument) << refused.message();
  EXPECT_NE(refused.message().find("--vocab-tile 0"), std::string::npos) << refused.message();
  // A tiled run's own checkpoint resumes bit-identically.
  (void)train(table_heavy(GetParam(), 2 * kVocabTileBlock), DType::f32, 10ull << 20, 3, "", tiled_ckpt.path);
  const Outcome resumed = train(table_heavy(GetParam(), 2 * kVocabTileBlock), DType::f32, 10ull << 20, 6, tiled_ckpt.path);
  ASSERT_EQ(resumed.losses.size(), 3u);
  EXPECT_EQ(resumed.losses, std::vector<double>(straight.losses.begin() + 3, straight.losses.end()));
  expect_same_training(Outcome{.losses = {}, .norms = {}, .masters = resumed.masters},
                       Outcome{.losses = {}, .norms = {}, .masters = straight.masters});
}

// One forward and backward of the resident model (the model's own device gradients), tiled and
// untiled: the logits, the loss and every gradient are the same bits.
TEST(VocabTileForwardBackward, LogitsLossAndEveryGradientAreTheUntiledBits) {
  for (const Arch arch : {Arch::gpt2, Arch::llama}) {
    std::map<std::string, std::vector<float>> g[2];
    std::vector<float> logits[2];
    double loss[2];
    for (int t = 0; t < 2; ++t) {
      const ModelConfig c = table_heavy(arch, t == 0 ? 0 : kVocabTileBlock);
      auto backend =
          expect_value(make_backend(BackendOptions{.kind = BackendKind::cpu, .memory_budget = 256ull << 20}));
      auto model =
          expect_value(Transformer::create(*backend, c, {.batch = kB, .seq_len = kT, .checkpoint_layers = false}));
      ASSERT_TRUE(model->init(7).is_ok());
      std::mt19937_64 rng(11);
      std::vector<int32_t> in(kB * kT), tg(kB * kT);
      for (int64_t i = 0; i < kB * kT; ++i) {
        in[i] = int32_t(rng() % uint64_t(c.vocab));
        tg[i] = int32_t(rng() % uint64_t(c.vocab));
      }
      // The CPU backend's device memory is host memory.
      auto* din = static_cast<int32_t*>(expect_value(backend->allocate(in.size() * 4, "inputs")));
      auto* dtg = static_cast<int32_t*>(expect_value(backend->allocate(tg.size() * 4, "targets")));
      std::memcpy(din, in.data(), in.size() * 4);
      std::memcpy(dtg, tg.data(), tg.size() * 4);
      ASSERT_TRUE(model->zero_grad().is_ok());
      ASSERT_TRUE(model->forward(din, dtg, kB, kT).is_ok());
      loss[t] = expect_value(model->read_loss()).mean_loss;
      ASSERT_TRUE(backend->synchronize_all().is_ok());
      const float* lg = reinterpret_cast<const float*>(model->activations().logits);
      for (int64_t n = 0; n < kB * kT; ++n)  // each row's V logits (the padding past V is never written)
        logits[t].insert(logits[t].end(), lg + n * model->logits_stride(), lg + n * model->logits_stride() + c.vocab);
      ASSERT_TRUE(model->backward().is_ok());
      for (const ParamSpec& p : model->layout().params)
        g[t][p.name] = expect_value(model->copy_parameter_to_host(p.name, ParamState::gradients));
    }
    EXPECT_EQ(loss[0], loss[1]);
    size_t diff = 0;
    for (size_t i = 0; i < logits[0].size(); ++i) diff += logits[0][i] != logits[1][i];
    EXPECT_EQ(diff, 0u) << "logits";
    for (const auto& [name, v] : g[0]) {
      size_t d = 0;
      for (size_t i = 0; i < v.size(); ++i) d += v[i] != g[1][name][i];
      EXPECT_EQ(d, 0u) << name << " of " << v.size();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, VocabTileTraining, ::testing::Values(Arch::gpt2, Arch::llama),
                         [](const ::testing::TestParamInfo<Arch>& info) {
                           return std::string(info.param == Arch::gpt2 ? "Gpt2Tied" : "LlamaUntied");
                         });

}  // namespace vocab_tile_test
}  // namespace strata::model
