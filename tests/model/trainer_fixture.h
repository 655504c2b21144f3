// Test fixture for the trainer and checkpoint tests: the golden files' batch and AdamW rule
// (tests/data/golden/README.md) and a tiny model with a Trainer on a CPU backend. Not used
// outside tests/model.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/safetensors.h"
#include "model/trainer.h"
#include "golden_file.h"
#include "model_test_files.h"

namespace strata::model::testing {

// The golden optimizer rule (tests/data/golden/README.md).
inline TrainOptions golden_rule() {
  TrainOptions o;
  o.grad_accum = 1;
  o.adam_hyper = kernels::AdamHyper{.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  o.lr_schedule = LrScheduleOptions{.peak_lr = 1e-3, .decay = LrDecay::constant};
  o.clip_grad_norm = 0.0;
  return o;
}

// Rows [first, first + rows) of the golden batch as a BatchView.
inline BatchView rows_of(const Golden& g, int64_t first, int64_t rows) {
  BatchView v;
  v.inputs = g.tokens.data() + first * g.T;
  v.targets = g.targets.data() + first * g.T;
  v.batch_size = uint32_t(rows);
  v.seq_len = uint32_t(g.T);
  return v;
}

struct TrainRun {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<PinnedPool> pinned;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Transformer> model;
  std::unique_ptr<Trainer> trainer;
};

// A model on a CPU backend, with the golden weights (seed 0) or init(seed); then a trainer.
inline TrainRun make_run(const std::string& preset, const Golden& g, TrainOptions options, uint64_t seed = 0) {
  TrainRun r;
  r.backend = expect_value(make_backend(BackendOptions{.kind = BackendKind::cpu, .memory_budget = 64ull << 20}));
  r.pinned = expect_value(PinnedPool::create(PinnedPoolOptions{.slab_bytes = 8ull << 20, .allow_cuda = false}));
  r.pool = expect_value(ThreadPool::create(ThreadPoolOptions{.threads = 2, .pin = false, .name = "trainer test"}));
  const ModelConfig config = expect_value(model_preset(preset));
  r.model = expect_value(
      Transformer::create(*r.backend, config, TransformerOptions{.batch = g.B, .seq_len = g.T, .dtype = options.dtype}));
  if (seed == 0) {
    EXPECT_TRUE(r.model->load_hf_safetensors(g.file).is_ok());
  } else {
    EXPECT_TRUE(r.model->init(seed).is_ok());
  }
  r.trainer = expect_value(Trainer::create(*r.backend, *r.model, *r.pinned, r.pool.get(), options));
  return r;
}

}  // namespace strata::model::testing
