// Checkpoints (model/checkpoint.h): N steps straight equal N/2 steps, a save, a fresh model and
// trainer restored from the files, and N/2 more -- bit for bit in losses, weights and moments,
// under a cosine schedule whose rate depends on the step; model.safetensors holds HF names and
// layouts that load_hf_safetensors reads back; an interrupted save, a wrong preset and a missing
// directory are refused with errors that say so.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "trainer_fixture.h"

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

// A schedule whose rate changes every step, and clipping, so a resumed run that got the step
// count or the moments wrong cannot match.
TrainOptions schedule_rule() {
  TrainOptions o = golden_rule();
  o.lr_schedule = LrScheduleOptions{.peak_lr = 3e-3, .warmup_steps = 2, .decay = LrDecay::cosine, .total_steps = kSteps};
  o.clip_grad_norm = 1.0;
  return o;
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

class CheckpointTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointTest, HalfSaveResumeHalfEqualsStraight) {
  const Golden g = open_golden(GetParam());
  std::vector<double> straight, resumed;
  TrainRun a = make_run(GetParam(), g, schedule_rule(), /*seed=*/7);
  for (int i = 0; i < kSteps; ++i) straight.push_back(expect_value(a.trainer->step(batch_of_step(g, *a.trainer))).loss);

  TempDir dir;
  const CheckpointState saved{.step = kSteps / 2, .loader = {.epoch = 1, .batch = 5}, .seed = 7, .preset = GetParam()};
  {
    TrainRun b = make_run(GetParam(), g, schedule_rule(), /*seed=*/7);
    for (int i = 0; i < kSteps / 2; ++i)
      resumed.push_back(expect_value(b.trainer->step(batch_of_step(g, *b.trainer))).loss);
    ASSERT_TRUE(save_checkpoint(dir.path(), *b.model, *b.trainer, saved).is_ok());
  }
  const CheckpointState state = expect_value(read_checkpoint_state(dir.path(), GetParam()));
  EXPECT_EQ(state.step, uint64_t(kSteps / 2));
  EXPECT_EQ(state.loader, saved.loader);
  EXPECT_EQ(state.seed, 7u);

  // A different seed: every weight must come from the checkpoint.
  TrainRun c = make_run(GetParam(), g, schedule_rule(), /*seed=*/99);
  ASSERT_TRUE(load_checkpoint_weights(dir.path(), *c.model).is_ok());
  c.trainer = expect_value(Trainer::create(*c.backend, *c.model, *c.pinned, c.pool.get(), schedule_rule()));
  ASSERT_TRUE(load_checkpoint_optimizer(dir.path(), *c.trainer).is_ok());
  EXPECT_EQ(c.trainer->steps_done(), uint64_t(kSteps / 2));
  for (int i = kSteps / 2; i < kSteps; ++i)
    resumed.push_back(expect_value(c.trainer->step(batch_of_step(g, *c.trainer))).loss);

  EXPECT_EQ(resumed, straight);  // bit for bit
  EXPECT_EQ(all_weights(*c.model), all_weights(*a.model));
  for (size_t k = 0; k < a.model->layout().chunks.size(); ++k) {
    const auto ma = a.trainer->first_moment(k), mc = c.trainer->first_moment(k);
    const auto va = a.trainer->second_moment(k), vc = c.trainer->second_moment(k);
    EXPECT_TRUE(std::equal(ma.begin(), ma.end(), mc.begin(), mc.end())) << "m of chunk " << k;
    EXPECT_TRUE(std::equal(va.begin(), va.end(), vc.begin(), vc.end())) << "v of chunk " << k;
  }
}

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
  EXPECT_NE(wrong.status().message().find("pass --preset gpt2-tiny"), std::string::npos) << wrong.status().message();

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
