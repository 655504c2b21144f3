// Training runs for the tiling tests (vocab_tile_test, mlp_tile_test, mlp_tile_checkpoint_test,
// tiling_test): a few clipped AdamW steps of a small model on the CPU backend, resident or with
// its weights paged under a device budget, from init or a checkpoint, and what came out of them
// (losses, norms, whole-tensor masters, the arena's peak), and how far apart two runs' masters
// are. Not used outside tests/model.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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

namespace strata::model::tiled_training {

using testing::expect_value;

constexpr int64_t kB = 1, kT = 16;

// A small model of `arch` named "<gpt2|llama>-<what>": C = 64 in 4 heads (LLaMA: 2 kv heads),
// 32 positions, GPT-2's head tied and LLaMA's untied, with the sizes that make it heavy.
inline ModelConfig small_model(Arch arch, const std::string& what, int64_t vocab, int64_t layers, int64_t ffn_hidden) {
  ModelConfig c;
  c.name = (arch == Arch::gpt2 ? "gpt2-" : "llama-") + what;
  c.arch = arch;
  c.vocab = vocab;
  c.max_seq = 32;
  c.dim = 64;
  c.n_layer = layers;
  c.n_head = 4;
  c.n_kv_head = arch == Arch::gpt2 ? 4 : 2;
  c.ffn_hidden = ffn_hidden;
  c.tied_head = arch == Arch::gpt2;
  return c;
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
inline Outcome train(const ModelConfig& config, DType dtype, uint64_t budget, int steps, const std::string& resume = "",
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

// A tiled layout against the untiled one: every spec has its tensor's untiled name, shape and
// ordinal, in its own layer's chunk; each tensor's rows are covered once, in order; a tile's rows
// are its chunk's.
inline void expect_tiles_cover(const ParamLayout& layout, const ParamLayout& whole) {
  std::map<std::string, int64_t> next_row;
  for (const ParamSpec& p : layout.params) {
    const ParamSpec* w = whole.find(p.name);
    ASSERT_NE(w, nullptr) << p.name;
    EXPECT_EQ(p.shape, w->shape) << p.name;
    EXPECT_EQ(p.tensor, w->tensor) << p.name;
    EXPECT_EQ(p.row_begin, next_row[p.name]) << p.name;
    const uint64_t row = p.tensor_elements() / uint64_t(p.shape[0]);
    next_row[p.name] += int64_t(p.elements / row);
    const ChunkSpec& chunk = layout.chunks[p.chunk];
    EXPECT_EQ(chunk.layer, p.layer) << p.name;
    if (!p.whole()) {
      EXPECT_EQ(p.row_begin, chunk.row_begin) << p.name;
      EXPECT_EQ(p.elements, uint64_t(chunk.rows) * row) << p.name;
    }
  }
  for (const auto& [name, rows] : next_row) EXPECT_EQ(rows, whole.find(name)->shape[0]) << name;
}

// What paging `config`'s fp32 weights through two layer slots under `budget` device bytes says:
// out_of_memory when a slot group alone is over the budget.
inline Code paging_status(const ModelConfig& config, uint64_t budget) {
  auto backend = expect_value(make_backend({.kind = BackendKind::cpu, .memory_budget = budget}));
  auto pinned = expect_value(PinnedPool::create(PinnedPoolOptions{.slab_bytes = 4ull << 20, .allow_cuda = false}));
  const ParamLayout layout = expect_value(build_param_layout(config, 4));
  return TierManager::create(*backend, *pinned, nullptr, nullptr,
                             paged_weight_options(layout, Tier::cpu, 2, 0, 2, config.name))
      .status()
      .code();
}

// ||got - want|| / ||want|| over a tensor's values (its relative L2 difference): how far a tiled
// run's masters are from the untiled run's (MLP tiles regroup fp32 sums).
inline double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double(got[i]) - double(want[i])) * (double(got[i]) - double(want[i]));
    norm += double(want[i]) * double(want[i]);
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

inline std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct TempDir {
  TempDir() : path(std::string(STRATA_BINARY_DIR) + "/test-scratch/tiled-" + std::to_string(::getpid()) + "-" +
                   std::to_string(counter++)) {
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
  static inline int counter = 0;
};

}  // namespace strata::model::tiled_training
