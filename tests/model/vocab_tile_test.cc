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

#include "model/checkpoint.h"
#include "model/placement.h"
#include "model/trainer.h"
#include "model/transformer.h"
#include "offload/tier_manager.h"
#include "model_run.h"

namespace strata::model {
namespace vocab_tile_test {

using testing::expect_value;

constexpr int64_t kB = 1, kT = 16;

// A model whose tables dominate: V = 32 x 1024 + 300 rows (an uneven last tile) of C = 64 against
// layers of ~50 K parameters: each table is 8.5 MB in fp32, a layer 0.2 MB.
ModelConfig table_heavy(Arch arch, int64_t vocab_tile) {
  ModelConfig c;
  c.name = arch == Arch::gpt2 ? "gpt2-tables" : "llama-tables";
  c.arch = arch;
  c.vocab = 32 * kVocabTileBlock + 300;
  c.max_seq = 32;
  c.dim = 64;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_kv_head = arch == Arch::gpt2 ? 4 : 2;
  c.ffn_hidden = arch == Arch::gpt2 ? 256 : 160;
  c.tied_head = arch == Arch::gpt2;
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
    // Per tensor: the same name, shape and ordinal as untiled, its rows covered once in order.
    std::map<std::string, int64_t> next_row;
    for (const ParamSpec& p : layout.params) {
      const ParamSpec* w = whole.find(p.name);
      ASSERT_NE(w, nullptr) << p.name;
      EXPECT_EQ(p.shape, w->shape) << p.name;
      EXPECT_EQ(p.tensor, w->tensor) << p.name;
      EXPECT_EQ(p.row_begin, next_row[p.name]) << p.name;
      next_row[p.name] += int64_t(p.elements / (p.tensor_elements() / uint64_t(p.shape[0])));
      const ChunkSpec& chunk = layout.chunks[p.chunk];
      if (!p.whole()) {
        EXPECT_EQ(p.row_begin, chunk.row_begin) << p.name;
        EXPECT_EQ(p.elements, uint64_t(chunk.rows * c.dim)) << p.name;
      }
    }
    for (const auto& [name, rows] : next_row) EXPECT_EQ(rows, whole.find(name)->shape[0]) << name;
  }
  ModelConfig bad = table_heavy(Arch::llama, 1000);
  EXPECT_EQ(validate(bad).code(), Code::invalid_argument);
  EXPECT_NE(validate(bad).message().find("multiple of 1024"), std::string::npos) << validate(bad).message();
}

TEST(VocabTileLayout, AutoTilesPagedTablesLargerThanAnEighthOfTheBudget) {
  const ModelConfig c = table_heavy(Arch::llama, 0);  // tables of 33068 x 64 x 4 B = 8.5 MB
  TrainOptions o;
  o.offload_param = TrainOptions::ParamHome::cpu;
  EXPECT_EQ(with_vocab_tile(c, o, 128ull << 20).vocab_tile, 0);  // 1/8 of 128 MiB holds it
  // 16 MiB: 1/16 is 1 MiB = 4096 rows of 256 B; 4 MiB: 1024 rows.
  EXPECT_EQ(with_vocab_tile(c, o, 16ull << 20).vocab_tile, 4 * kVocabTileBlock);
  EXPECT_EQ(with_vocab_tile(c, o, 4ull << 20).vocab_tile, kVocabTileBlock);
  EXPECT_EQ(with_vocab_tile(c, o, 1ull << 20).vocab_tile, kVocabTileBlock);  // at least one block
  o.offload_param = TrainOptions::ParamHome::none;  // resident weights: all on the device anyway
  EXPECT_EQ(with_vocab_tile(c, o, 4ull << 20).vocab_tile, 0);
  o.vocab_tile = 2048;  // given: kept
  EXPECT_EQ(with_vocab_tile(c, o, 64ull << 20).vocab_tile, 2048);
}

struct Outcome {
  std::vector<double> losses, norms;
  std::map<std::string, std::vector<float>> masters;  // HF name -> the whole tensor's fp32 master
  uint64_t arena_peak = 0;
};

// `steps` steps of `config` on the CPU backend under `budget` bytes of device memory, weights
// homed in pinned memory and paged (resident when budget is 0: 64 MiB), the optimizer on the CPU,
// every step clipped. Starts from init(7), or from the checkpoint `resume` and the data it used;
// saves a checkpoint into `save` at the end when given.
Outcome train(const ModelConfig& config, DType dtype, uint64_t budget, int steps, const std::string& resume = "",
              const std::string& save = "", Status* failure = nullptr) {
  Outcome out;
  auto backend = expect_value(make_backend(BackendOptions{.kind = BackendKind::cpu,
                                                          .memory_budget = budget == 0 ? 64ull << 20 : budget}));
  auto pinned = expect_value(PinnedPool::create(PinnedPoolOptions{.slab_bytes = 4ull << 20, .allow_cuda = false}));
  auto pool = expect_value(ThreadPool::create(ThreadPoolOptions{.threads = 2, .pin = false, .name = "tiles"}));
  const ParamLayout layout = build_param_layout(config, dtype_size(dtype)).value();
  std::unique_ptr<TierManager> tiers;
  if (budget != 0)
    tiers = expect_value(TierManager::create(*backend, *pinned, nullptr, nullptr,
                                             paged_weight_options(layout, Tier::cpu, 2, 0, 2, config.name)));
  auto model = expect_value(Transformer::create(
      *backend, config, {.batch = kB, .seq_len = kT, .checkpoint_layers = true, .dtype = dtype, .device_grads = false},
      {.weights = tiers.get(), .pinned = pinned.get()}));
  if (resume.empty()) {
    EXPECT_TRUE(model->init(7).is_ok());
  } else {
    EXPECT_TRUE(load_checkpoint_weights(resume, *model).is_ok());
  }
  TrainOptions o;
  o.dtype = dtype;
  o.clip_grad_norm = 0.05;  // below these norms: every step clips
  o.adam_hyper = kernels::AdamHyper{.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  o.lr_schedule = LrScheduleOptions{.peak_lr = 3e-3, .decay = LrDecay::constant};
  o.optimizer_staging = 3;
  auto trainer = expect_value(Trainer::create(*backend, *model, *pinned, pool.get(), o, {}));
  // Tokens spread over every tile, the same for every run.
  std::mt19937_64 rng(11);
  std::vector<int32_t> inputs(kB * kT), targets(kB * kT);
  const NextBatch next = [&]() -> StatusOr<BatchView> {
    for (int64_t i = 0; i < kB * kT; ++i) {
      inputs[i] = int32_t(rng() % uint64_t(config.vocab));
      targets[i] = int32_t(rng() % uint64_t(config.vocab));
    }
    return BatchView{.inputs = inputs.data(), .targets = targets.data(), .batch_size = kB, .seq_len = kT};
  };
  int first = 0;
  if (!resume.empty()) {
    const Status s = load_checkpoint_optimizer(resume, *trainer);
    if (failure != nullptr && !s.is_ok()) {
      *failure = s;
      return out;
    }
    EXPECT_TRUE(s.is_ok()) << s.message();
    first = int(trainer->steps_done());
    for (int s = 0; s < first; ++s) (void)next();
  }
  for (int s = first; s < steps; ++s) {
    const StepResult r = expect_value(trainer->step(next));
    out.losses.push_back(r.loss);
    out.norms.push_back(r.grad_norm);
  }
  EXPECT_TRUE(backend->synchronize_all().is_ok());
  if (!save.empty()) {
    CheckpointState saved;
    saved.step = trainer->steps_done();
    saved.preset = config.name;
    EXPECT_TRUE(save_checkpoint(save, *model, *trainer, saved).is_ok());
  }
  EXPECT_TRUE(trainer->sync_host_state().is_ok());
  for (const ParamSpec& p : model->master_layout().params) {
    std::vector<float>& whole = out.masters[p.name];
    whole.resize(p.tensor_elements());
    const std::vector<float> m = expect_value(trainer->master(p));
    std::copy(m.begin(), m.end(), whole.begin() + int64_t(p.tensor_offset()));
  }
  out.arena_peak = backend->memory().peak;
  return out;
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

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct TempDir {
  TempDir() : path(std::string(STRATA_BINARY_DIR) + "/test-scratch/vocab-tile-" + std::to_string(::getpid()) + "-" +
                   std::to_string(counter++)) {
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
  static inline int counter = 0;
};

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
  auto backend = expect_value(make_backend({.kind = BackendKind::cpu, .memory_budget = kBudget}));
  auto pinned = expect_value(PinnedPool::create(PinnedPoolOptions{.slab_bytes = 4ull << 20, .allow_cuda = false}));
  const ParamLayout layout = expect_value(build_param_layout(whole, 4));
  EXPECT_EQ(TierManager::create(*backend, *pinned, nullptr, nullptr,
                                paged_weight_options(layout, Tier::cpu, 2, 0, 2, whole.name))
                .status()
                .code(),
            Code::out_of_memory);
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
