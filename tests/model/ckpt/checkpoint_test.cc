// Checkpoints (model/ckpt/checkpoint.h): N steps straight equal N/2 steps, a save, a fresh model and
// trainer restored from the files, and N/2 more -- bit for bit in losses, weights, moments and
// the fp16 loss scale, under a cosine schedule whose rate depends on the step, in fp32, bf16 with
// 8-bit moments and fp16 with a growing loss scale; model.safetensors holds HF names and
// layouts that load_hf_safetensors reads back; an interrupted save, a wrong preset and a missing
// directory are refused with errors that say so.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "model/ckpt/checkpoint.h"
#include "model/ckpt/optimizer_buffers.h"
#include "tests/model/trainer_fixture.h"

namespace strata::model {
namespace {

using testing::expect_value;
using testing::Golden;
using testing::golden_rule;
using testing::make_run;
using testing::open_golden;
using testing::rows_of;
using testing::TempDir;
using testing::TrainRun;

constexpr int kSteps = 6;

// One precision setup of the resume test.
struct PrecisionCase {
  std::string preset;
  DType dtype = DType::f32;
  AdamStates states = AdamStates::f32;
  bool device_optimizer = false;
};

// A schedule whose rate changes every step, and clipping, so a resumed run that got the step
// count or the moments wrong cannot match; fp16's scale grows every 2 good steps, so a resumed
// run that lost the scaler's state cannot match either.
TrainOptions schedule_rule(const PrecisionCase& setup = {}) {
  TrainOptions o = golden_rule();
  o.lr_schedule = LrScheduleOptions{.peak_lr = 3e-3, .warmup_steps = 2, .decay = LrDecay::cosine, .total_steps = kSteps};
  o.clip_grad_norm = 1.0;
  o.dtype = setup.dtype;
  o.adam_states = setup.states;
  if (setup.device_optimizer) o.optimizer_home = Tier::device;
  o.loss_scaler.growth_interval = 2;
  return o;
}

std::vector<std::vector<std::byte>> optimizer_bytes(Trainer& t) {
  std::vector<std::vector<std::byte>> out;
  EXPECT_TRUE(t.visit_state(/*write_back=*/false, [&](const StatePiece& piece, const OptimizerStateLayout& layout,
                                                      ChunkState& state) {
                 for (const OptimizerBuffer& b : optimizer_buffers(piece, layout, state.image.data()))
                   out.emplace_back(b.data, b.data + b.bytes);
                 return Status::ok();
               }).is_ok());
  return out;
}

// Step `step` (0-based) reads one row of the golden batch, alternating: the data changes too.
NextBatch batch_of_step(const Golden& g, const Trainer& t) {
  return [&g, &t]() -> StatusOr<BatchView> { return rows_of(g, int64_t(t.steps_done() % 2), 1); };
}

std::vector<std::vector<float>> all_weights(Transformer& model) {
  std::vector<std::vector<float>> out;
  for (const ParamSpec& p : model.layout().params)
    out.push_back(expect_value(model.copy_parameter_to_host(p.name, ParamState::weights)));
  return out;
}

class CheckpointResumeTest : public ::testing::TestWithParam<PrecisionCase> {};

TEST_P(CheckpointResumeTest, HalfSaveResumeHalfEqualsStraight) {
  const PrecisionCase& setup = GetParam();
  const TrainOptions rule = schedule_rule(setup);
  const Golden g = open_golden(setup.preset);
  std::vector<double> straight, resumed;
  TrainRun a = make_run(setup.preset, g, rule, /*seed=*/7);
  for (int i = 0; i < kSteps; ++i) straight.push_back(expect_value(a.trainer->step(batch_of_step(g, *a.trainer))).loss);

  TempDir dir;
  const CheckpointState saved{.step = kSteps / 2, .loader = {.epoch = 1, .batch = 5}, .seed = 7, .preset = setup.preset};
  {
    TrainRun b = make_run(setup.preset, g, rule, /*seed=*/7);
    for (int i = 0; i < kSteps / 2; ++i)
      resumed.push_back(expect_value(b.trainer->step(batch_of_step(g, *b.trainer))).loss);
    ASSERT_TRUE(save_checkpoint(dir.path(), *b.model, *b.trainer, saved).is_ok());
  }
  const CheckpointState state = expect_value(read_checkpoint_state(dir.path(), setup.preset));
  EXPECT_EQ(state.step, uint64_t(kSteps / 2));
  EXPECT_EQ(state.loader, saved.loader);
  EXPECT_EQ(state.seed, 7u);

  // A different seed: every weight must come from the checkpoint.
  TrainRun c = make_run(setup.preset, g, rule, /*seed=*/99);
  ASSERT_TRUE(load_checkpoint_weights(dir.path(), *c.model).is_ok());
  c.trainer = expect_value(Trainer::create(*c.backend, *c.model, *c.pinned, c.pool.get(), rule));
  ASSERT_TRUE(load_checkpoint_optimizer(dir.path(), *c.trainer).is_ok());
  EXPECT_EQ(c.trainer->steps_done(), uint64_t(kSteps / 2));
  for (int i = kSteps / 2; i < kSteps; ++i)
    resumed.push_back(expect_value(c.trainer->step(batch_of_step(g, *c.trainer))).loss);

  EXPECT_EQ(resumed, straight);  // bit for bit
  EXPECT_EQ(all_weights(*c.model), all_weights(*a.model));
  ASSERT_TRUE(a.trainer->sync_host_state().is_ok());
  ASSERT_TRUE(c.trainer->sync_host_state().is_ok());
  for (const ParamSpec& p : a.model->master_layout().params) {
    const auto ma = expect_value(a.trainer->master(p)), mc = expect_value(c.trainer->master(p));
    EXPECT_TRUE(std::equal(ma.begin(), ma.end(), mc.begin(), mc.end())) << "fp32 master of " << p.name;
  }
  EXPECT_EQ(optimizer_bytes(*c.trainer), optimizer_bytes(*a.trainer));
  EXPECT_EQ(c.trainer->updates_done(), a.trainer->updates_done());
  if (setup.dtype == DType::f16) {
    ASSERT_NE(c.trainer->loss_scaler(), nullptr);
    EXPECT_EQ(c.trainer->loss_scaler()->state(), a.trainer->loss_scaler()->state());
    EXPECT_GT(a.trainer->loss_scaler()->scale(), rule.loss_scaler.initial_scale);  // it grew: the state mattered
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CheckpointResumeTest,
                         ::testing::Values(PrecisionCase{"gpt2-tiny"}, PrecisionCase{"llama-tiny"},
                                           PrecisionCase{"gpt2-tiny", DType::bf16, AdamStates::q8},
                                           PrecisionCase{"llama-tiny", DType::f16},
                                           PrecisionCase{"gpt2-tiny", DType::f32, AdamStates::f32, true},
                                           PrecisionCase{"llama-tiny", DType::bf16, AdamStates::f32, true}),
                         [](const auto& info) {
                           std::string name = info.param.preset + "_" + std::string(dtype_name(info.param.dtype)) +
                                              "_" + std::string(adam_states_name(info.param.states)) +
                                              (info.param.device_optimizer ? "_on_device" : "");
                           for (char& ch : name) ch = std::isalnum(uint8_t(ch)) ? ch : '_';
                           return name;
                         });

TEST(CheckpointErrors, MomentFormatMismatchIsRefusedWithTheFlagToPass) {
  const Golden g = open_golden("gpt2-tiny");
  TempDir dir;
  TrainRun a = make_run("gpt2-tiny", g, schedule_rule(), /*seed=*/7);
  ASSERT_TRUE(a.trainer->step(batch_of_step(g, *a.trainer)).is_ok());
  ASSERT_TRUE(save_checkpoint(dir.path(), *a.model, *a.trainer, {.step = 1, .loader = {}, .seed = 7, .preset = "gpt2-tiny"}).is_ok());
  TrainRun b = make_run("gpt2-tiny", g, schedule_rule({.preset = "gpt2-tiny", .states = AdamStates::q8}), 7);
  const Status s = load_checkpoint_optimizer(dir.path(), *b.trainer);
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_NE(s.message().find("fp32 Adam moments"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--optimizer-type adamw"), std::string::npos) << s.message();
}

class CheckpointTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointTest, ModelFileHasHuggingFaceNamesAndShapes) {
  const Golden g = open_golden(GetParam());
  TrainRun r = make_run(GetParam(), g, golden_rule());  // the golden weights, untrained
  TempDir dir;
  ASSERT_TRUE(save_checkpoint(dir.path(), *r.model, *r.trainer, {.step = 0, .loader = {}, .seed = 0, .preset = GetParam()}).is_ok());
  const SafetensorsFile saved = expect_value(SafetensorsFile::open(dir.file("model.safetensors")));
  size_t compared = 0;
  for (const SafetensorsTensor& t : g.file.tensors()) {
    if (t.name.starts_with("grad.") || t.name.starts_with("act.") || t.name.starts_with("adamw.") ||
        t.name == "tokens" || t.name == "targets" || t.name == "logits" || t.name == "loss")
      continue;
    const SafetensorsTensor* s = saved.find(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    EXPECT_EQ(s->shape, t.shape) << t.name;
    EXPECT_EQ(g.f32(t.name), [&] {
      std::vector<float> v(s->elements());
      std::memcpy(v.data(), saved.data(*s).data(), s->bytes());
      return v;
    }()) << t.name;
    ++compared;
  }
  EXPECT_EQ(compared, saved.tensors().size());
}

INSTANTIATE_TEST_SUITE_P(Presets, CheckpointTest, ::testing::Values("gpt2-tiny", "llama-tiny"));

TEST(CheckpointErrors, MissingDirectoryIsNotFound) {
  TempDir dir;
  auto s = read_checkpoint_state(dir.file("nothing-here"), "gpt2-tiny");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), Code::not_found);
  EXPECT_NE(s.status().message().find("nothing-here"), std::string::npos) << s.status().message();
}

TEST(CheckpointErrors, InterruptedSaveAndWrongPresetAreRefused) {
  const Golden g = open_golden("gpt2-tiny");
  TrainRun r = make_run("gpt2-tiny", g, golden_rule());
  TempDir old_dir, new_dir;
  ASSERT_TRUE(save_checkpoint(old_dir.path(), *r.model, *r.trainer, {.step = 0, .loader = {}, .seed = 0, .preset = "gpt2-tiny"}).is_ok());
  ASSERT_TRUE(r.trainer->step([&]() -> StatusOr<BatchView> { return rows_of(g, 0, g.B); }).is_ok());
  ASSERT_TRUE(save_checkpoint(new_dir.path(), *r.model, *r.trainer, {.step = 1, .loader = {}, .seed = 0, .preset = "gpt2-tiny"}).is_ok());

  auto wrong = read_checkpoint_state(new_dir.path(), "llama-tiny");
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_EQ(wrong.status().code(), Code::invalid_argument);
  EXPECT_NE(wrong.status().message().find("trained as model 'gpt2-tiny'"), std::string::npos) << wrong.status().message();

  // The new optimizer file next to the old weights: what a crash between the two renames leaves.
  std::filesystem::copy_file(old_dir.file("model.safetensors"), new_dir.file("model.safetensors"),
                             std::filesystem::copy_options::overwrite_existing);
  auto torn = read_checkpoint_state(new_dir.path(), "gpt2-tiny");
  ASSERT_FALSE(torn.is_ok());
  EXPECT_EQ(torn.status().code(), Code::corruption);
  EXPECT_NE(torn.status().message().find("interrupted"), std::string::npos) << torn.status().message();
}

}  // namespace
}  // namespace strata::model
