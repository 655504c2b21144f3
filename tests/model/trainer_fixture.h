// Test fixture for the trainer and checkpoint tests: the golden files' batch and AdamW rule
// (tests/data/golden/README.md), a tiny model with a Trainer on a CPU (default) or CUDA backend,
// and the check of the golden 10-step loss trajectory. Not used outside tests/model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/hf/safetensors.h"
#include "model/train/trainer.h"
#include "tests/model/golden_file.h"
#include "tests/model/model_run.h"
#include "tests/model/model_test_files.h"

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

// The golden rule in working precision `dtype`; fp16 starts at loss scale 1024, which does not
// overflow on the golden problem, so its trajectory is unbroken.
inline TrainOptions golden_rule(DType dtype) {
  TrainOptions o = golden_rule();
  o.dtype = dtype;
  o.loss_scaler.initial_scale = 1024.0;
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

// A model on the backend `backend` asks for (pinned memory registered with the CUDA driver on CUDA), with the
// golden weights (seed 0) or init(seed); then a trainer.
inline TrainRun make_run(const std::string& preset, const Golden& g, TrainOptions options, uint64_t seed = 0,
                         const BackendOptions& backend = test_backend(BackendKind::cpu)) {
  TrainRun r;
  r.backend = expect_value(make_backend(backend));
  r.pinned = expect_value(PinnedPool::create(
      PinnedPoolOptions{.slab_bytes = 8ull << 20, .allow_cuda = backend.kind == BackendKind::cuda}));
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

// Ten optimizer steps of a fresh golden-weight run on the golden batch, then the loss after them:
// each of the 11 losses within `tolerance` (relative) of the golden AdamW trajectory (float64
// torch), no step skipped, a loss scale exactly in fp16. Returns the worst relative error.
inline double check_golden_trajectory(TrainRun& r, const Golden& g, double tolerance) {
  const std::vector<double> want = g.f64("adamw.losses");
  EXPECT_EQ(want.size(), 11u);
  if (want.size() != 11u) return INFINITY;
  const NextBatch same_batch = [&g]() -> StatusOr<BatchView> { return rows_of(g, 0, g.B); };
  double worst = 0.0;
  for (size_t i = 0; i < 10; ++i) {
    const StepResult s = expect_value(r.trainer->step(same_batch));
    EXPECT_EQ(s.step, i + 1);
    EXPECT_FALSE(s.skipped) << "step " << s.step;
    EXPECT_EQ(s.loss_scale.has_value(), r.model->dtype() == DType::f16);
    const double rel = relative_error(s.loss, want[i]);
    EXPECT_LE(rel, tolerance) << "loss before update " << i + 1;
    worst = std::max(worst, rel);
  }
  const double rel = relative_error(expect_value(r.trainer->evaluate(same_batch, 1)), want[10]);
  EXPECT_LE(rel, tolerance) << "loss after 10 updates";
  EXPECT_EQ(r.trainer->updates_done(), 10u);
  EXPECT_LT(want[10], want[0] - 0.01) << "the trajectory must show learning, or it checks little";
  return std::max(worst, rel);
}

}  // namespace strata::model::testing
