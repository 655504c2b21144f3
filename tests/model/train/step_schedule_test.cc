// The run's step schedule (model/train/step_schedule.h): what auto picks and why, explicit choices
// kept, layer-major refused across ranks and without activation checkpointing, and the device
// bytes the planner counts for it (model/plan/placement.h: K residual streams, d residuals, the
// tied table's stash and batch buffers).
#include "model/train/step_schedule.h"

#include <string>

#include <gtest/gtest.h>

#include "model/plan/placement.h"
#include "model/train/train_config_keys.h"
#include "runtime/config.h"
#include "tests/model/model_test_files.h"

namespace strata::model {
namespace {

using testing::expect_value;

constexpr uint64_t kLarge = 64ull << 30;

TrainOptions paged(uint64_t K) {
  TrainOptions o;
  o.micro_batch = 2;
  o.seq = 64;
  o.grad_accum = K;
  o.weight_home = Tier::nvme;
  o.activation_checkpointing = true;
  return o;
}

void expect_choice(const ScheduleChoice& c, StepSchedule want, const std::string& word) {
  EXPECT_EQ(c.schedule, want) << c.why;
  EXPECT_NE(c.why.find(word), std::string::npos) << "'" << word << "' missing from: " << c.why;
}

TEST(StepScheduleTest, AutoIsLayerMajorWhereItPaysAndFits) {
  const ModelConfig gpt2 = expect_value(model_preset("gpt2-tiny"));
  expect_choice(expect_value(choose_step_schedule(gpt2, paged(4), 1, kLarge)), StepSchedule::layer_major, "nvme");
  expect_choice(expect_value(choose_step_schedule(gpt2, paged(1), 1, kLarge)), StepSchedule::micro_batch_major,
                "--grad-accum 1");
  TrainOptions resident = paged(4);
  resident.weight_home = Tier::device;
  expect_choice(expect_value(choose_step_schedule(gpt2, resident, 1, kLarge)), StepSchedule::micro_batch_major,
                "resident");
  TrainOptions no_checkpointing = paged(4);
  no_checkpointing.activation_checkpointing = false;
  expect_choice(expect_value(choose_step_schedule(gpt2, no_checkpointing, 1, kLarge)),
                StepSchedule::micro_batch_major, "--activation-checkpointing");
  // Over the budget: the micro-batch-major run's bytes fit, the layer-major one's do not.
  const uint64_t mbm = estimate_device_bytes(gpt2, paged(4)).total();
  expect_choice(expect_value(choose_step_schedule(gpt2, paged(4), 1, mbm)), StepSchedule::micro_batch_major,
                "over the budget");
  // Across ranks, K is a rank's micro-batches: one a rank has nothing to group; two are grouped
  // where their weights are paged or, ZeRO-3, gathered from the ranks' shards; ZeRO-2's resident
  // weights cross nothing.
  const auto across = [](TrainOptions o, Tier home, int zero_stage) {
    o.ranks = 2;
    o.weight_home = home;
    o.zero_stage = zero_stage;
    return o;
  };
  expect_choice(expect_value(choose_step_schedule(gpt2, across(paged(2), Tier::nvme, 2), 2, kLarge)),
                StepSchedule::micro_batch_major, "per rank");
  expect_choice(expect_value(choose_step_schedule(gpt2, across(paged(4), Tier::nvme, 2), 2, kLarge)),
                StepSchedule::layer_major, "2 micro-batches a rank");
  expect_choice(expect_value(choose_step_schedule(gpt2, across(paged(4), Tier::device, 3), 2, kLarge)),
                StepSchedule::layer_major, "gathered from the 2 ranks' shards");
  expect_choice(expect_value(choose_step_schedule(gpt2, across(paged(4), Tier::device, 2), 2, kLarge)),
                StepSchedule::micro_batch_major, "ZeRO-2");
  // The budget it is checked against is a rank's: 2 micro-batches' layer inputs, not the step's 4.
  TrainOptions two = across(paged(4), Tier::nvme, 2);
  two.step_schedule = StepSchedule::layer_major;
  TrainOptions alone = paged(2);
  alone.step_schedule = StepSchedule::layer_major;
  EXPECT_EQ(estimate_device_bytes(gpt2, two).activations, estimate_device_bytes(gpt2, alone).activations);
}

TEST(StepScheduleTest, AnExplicitChoiceIsKeptAndLayerMajorIsRefusedOverTheBudget) {
  const ModelConfig gpt2 = expect_value(model_preset("gpt2-tiny"));
  TrainOptions o = paged(4);
  o.step_schedule = StepSchedule::micro_batch_major;
  expect_choice(expect_value(choose_step_schedule(gpt2, o, 1, kLarge)), StepSchedule::micro_batch_major, "as asked");
  o.step_schedule = StepSchedule::layer_major;
  o.weight_home = Tier::device;  // pays nothing, but asked for
  expect_choice(expect_value(choose_step_schedule(gpt2, o, 1, kLarge)), StepSchedule::layer_major, "as asked");
  const StatusOr<ScheduleChoice> over = choose_step_schedule(gpt2, o, 1, estimate_device_bytes(gpt2, paged(4)).total());
  ASSERT_FALSE(over.is_ok());
  EXPECT_EQ(over.status().code(), Code::out_of_memory);
  EXPECT_NE(over.status().message().find("--step-schedule auto or micro-batch-major"), std::string::npos)
      << over.status().message();
  o.ranks = 2;  // across ranks: kept, for a rank's micro-batches
  expect_choice(expect_value(choose_step_schedule(gpt2, o, 2, kLarge)), StepSchedule::layer_major,
                "this rank's 2 micro-batches");
}

// The planner counts what the model and trainer allocate: K - 1 more residual streams (L + 1
// layer inputs) and d residuals, K - 1 copies of GPT-2's tied table (LLaMA's is untied: none),
// and K batch buffers.
TEST(StepScheduleTest, TheDeviceEstimateCountsTheMicroBatchesBuffers) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    SCOPED_TRACE(preset);
    StatusOr<ModelConfig> c = model_preset(preset);
    if (!c.is_ok()) continue;  // no such preset
    TrainOptions o = paged(3);
    const DeviceBytes mbm = estimate_device_bytes(*c, o);
    o.step_schedule = StepSchedule::layer_major;
    const DeviceBytes lm = estimate_device_bytes(*c, o);
    const uint64_t N = o.micro_batch * o.seq, esize = dtype_size(o.dtype);
    const uint64_t streams = 2 * (uint64_t(c->n_layer + 1) * N * c->dim + N * c->dim) * esize;
    const ParamLayout layout = build_param_layout(*c, esize).value();
    uint64_t table = 0;
    if (c->tied_head)
      for (size_t t = 0; t < layout.embedding_chunks(); ++t) table += layout.chunks[t].bytes;
    EXPECT_GE(lm.activations - mbm.activations, streams + 2 * table);
    EXPECT_LE(lm.activations - mbm.activations, streams + 2 * table + 8 * 256);
    EXPECT_EQ(lm.batch, 3 * mbm.batch);
    EXPECT_EQ(lm.weights, mbm.weights);
    EXPECT_EQ(lm.gradients, mbm.gradients);
  }
}

TEST(StepScheduleTest, LayerMajorWithoutActivationCheckpointingIsRefusedSayingWhatToPass) {
  ConfigSchema schema;
  add_train_config_keys(schema);
  char* no_env[] = {nullptr};
  const Config config = expect_value(resolve_config(schema, {{"--step-schedule", "layer-major"}}, no_env));
  const StatusOr<TrainOptions> o = train_options_from_config(config);
  ASSERT_FALSE(o.is_ok());
  EXPECT_EQ(o.status().code(), Code::invalid_argument);
  EXPECT_NE(o.status().message().find("--activation-checkpointing"), std::string::npos) << o.status().message();
  const Config with = expect_value(resolve_config(
      schema, {{"--step-schedule", "layer-major"}, {"--activation-checkpointing", "true"}}, no_env));
  EXPECT_EQ(expect_value(train_options_from_config(with)).step_schedule, StepSchedule::layer_major);
  EXPECT_EQ(expect_value(train_options_from_config(expect_value(resolve_config(schema, {}, no_env))))
                .step_schedule,
            StepSchedule::automatic);
}

}  // namespace
}  // namespace strata::model
