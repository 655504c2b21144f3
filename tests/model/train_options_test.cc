// Tests of the train config keys and TrainOptions: the defaults, every cross-key error, the
// DeepSpeed-style aliases of a JSON config file, and the precedence file < env < flags.
#include "model/train_options.h"

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "model/train_config_keys.h"
#include "model_test_files.h"
#include "runtime/config.h"

namespace strata::model {
namespace {

using testing::expect_value;
using testing::TempDir;
using testing::write_text;
using Flags = std::vector<std::pair<std::string, std::string>>;

ConfigSchema train_schema() {
  ConfigSchema schema;
  add_train_config_keys(schema);
  return schema;
}

// The options of `flags` and the environment `env` ("NAME=VALUE" strings).
StatusOr<TrainOptions> options_from(const Flags& flags, std::vector<std::string> env = {}) {
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  STRATA_ASSIGN_OR_RETURN(Config config, resolve_config(train_schema(), flags, envp.data()));
  return train_options_from_config(config);
}

void expect_error(const StatusOr<TrainOptions>& result, Code code, const std::vector<std::string>& words) {
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), code) << result.status().to_string();
  for (const std::string& w : words) EXPECT_NE(result.status().message().find(w), std::string::npos)
      << "'" << w << "' missing from: " << result.status().message();
}

TEST(TrainOptionsTest, DefaultsTrainTheTinyModelOnTheBuiltInCorpus) {
  const TrainOptions o = expect_value(options_from({}));
  EXPECT_EQ(o.preset, "gpt2-tiny");
  EXPECT_EQ(o.preset, kDefaultTrainPreset);
  EXPECT_TRUE(o.uses_builtin_corpus());
  EXPECT_FALSE(o.data_format.has_value());
  EXPECT_DOUBLE_EQ(o.val_fraction, 0.05);
  EXPECT_EQ(o.steps, 1000u);
  EXPECT_EQ(o.micro_batch, 16u);
  EXPECT_EQ(o.seq, 64u);
  EXPECT_EQ(o.grad_accum, 1u);
  EXPECT_EQ(o.tokens_per_step(), 1024u);
  EXPECT_EQ(o.dtype, DType::f32);
  EXPECT_FALSE(o.tf32);
  EXPECT_FALSE(o.activation_checkpointing);
  EXPECT_EQ(o.optimizer, "adamw");
  EXPECT_EQ(o.adam_hyper.mode, kernels::AdamMode::adamw);
  EXPECT_EQ(o.adam_states, AdamStates::f32);
  EXPECT_FLOAT_EQ(o.adam_hyper.lr, 1e-3f);
  EXPECT_FLOAT_EQ(o.adam_hyper.beta1, 0.9f);
  EXPECT_FLOAT_EQ(o.adam_hyper.beta2, 0.95f);
  EXPECT_FLOAT_EQ(o.adam_hyper.eps, 1e-8f);
  EXPECT_FLOAT_EQ(o.adam_hyper.weight_decay, 0.1f);
  EXPECT_DOUBLE_EQ(o.clip_grad_norm, 1.0);
  EXPECT_DOUBLE_EQ(o.lr_schedule.peak_lr, 1e-3);
  EXPECT_EQ(o.lr_schedule.warmup_steps, 100u);  // auto: 10% of the steps
  EXPECT_EQ(o.lr_schedule.decay, LrDecay::cosine);
  EXPECT_EQ(o.lr_schedule.total_steps, 1000u);
  EXPECT_DOUBLE_EQ(o.lr_schedule.final_fraction, 0.1);
  EXPECT_TRUE(o.loss_scaler.dynamic);
  EXPECT_DOUBLE_EQ(o.loss_scaler.initial_scale, 65536.0);
  EXPECT_EQ(o.loss_scaler.growth_interval, 1000u);
  EXPECT_EQ(o.loss_scaler.hysteresis, 2u);
  EXPECT_DOUBLE_EQ(o.loss_scaler.min_scale, 1.0);
  EXPECT_EQ(o.eval_every, 50u);
  EXPECT_EQ(o.eval_batches, 8u);
  EXPECT_TRUE(o.evaluates());
  EXPECT_EQ(o.log_every, 1u);
  EXPECT_EQ(o.metrics_path, "");
  EXPECT_EQ(o.checkpoint_dir, "");
  EXPECT_EQ(o.checkpoint_every, 0u);
  EXPECT_EQ(o.resume_path, "");
  EXPECT_TRUE(o.warnings.empty());
}

TEST(TrainOptionsTest, EveryKeyHasHelpAndTheFlagsReadBack) {
  const ConfigSchema schema = train_schema();
  for (const ConfigKey& key : schema.keys()) EXPECT_FALSE(key.help.empty()) << key.name;
  const TrainOptions o = expect_value(options_from({{"--data", "a.bin,b.bin"},
                                                    {"--data-format", "u16"},
                                                    {"--steps", "1000"},
                                                    {"--micro-batch", "2"},
                                                    {"--seq", "128"},
                                                    {"--grad-accum", "3"},
                                                    {"--dtype", "bf16"},
                                                    {"--optimizer-type", "adamw8bit"},
                                                    {"--lr-schedule", "linear"},
                                                    {"--metrics", "m.jsonl"},
                                                    {"--checkpoint-dir", "ckpt"},
                                                    {"--checkpoint-every", "100"},
                                                    {"--resume", "ckpt/step_100"},
                                                    {"--tf32", "true"},
                                                    {"--activation-checkpointing", "on"}}));
  EXPECT_EQ(o.data, (std::vector<std::string>{"a.bin", "b.bin"}));
  EXPECT_FALSE(o.uses_builtin_corpus());
  EXPECT_EQ(o.data_format, TokenFileKind::raw_u16);
  EXPECT_EQ(o.tokens_per_step(), 2u * 128u * 3u);
  EXPECT_EQ(o.dtype, DType::bf16);
  EXPECT_EQ(o.adam_states, AdamStates::q8);
  EXPECT_EQ(o.adam_hyper.mode, kernels::AdamMode::adamw);
  EXPECT_EQ(o.lr_schedule.decay, LrDecay::linear);
  EXPECT_EQ(o.lr_schedule.warmup_steps, 100u);
  EXPECT_EQ(o.lr_schedule.total_steps, 1000u);
  EXPECT_EQ(o.metrics_path, "m.jsonl");
  EXPECT_EQ(o.checkpoint_every, 100u);
  EXPECT_EQ(o.resume_path, "ckpt/step_100");
  EXPECT_TRUE(o.tf32);
  EXPECT_TRUE(o.activation_checkpointing);
}

TEST(TrainOptionsTest, DataAndTextTogetherIsAnError) {
  expect_error(options_from({{"--data", "a.bin"}, {"--text", "book.txt"}}), Code::invalid_argument,
               {"data a.bin (flag --data)", "text book.txt (flag --text)", "not both"});
  const TrainOptions o = expect_value(options_from({{"--text", "book.txt"}}));
  EXPECT_EQ(o.text, "book.txt");
  EXPECT_FALSE(o.uses_builtin_corpus());
}

TEST(TrainOptionsTest, TokenDataFormatWithTextIsAnError) {
  expect_error(options_from({{"--text", "book.txt"}, {"--data-format", "u32"}}), Code::invalid_argument,
               {"data_format u32", "read as bytes"});
  EXPECT_TRUE(options_from({{"--text", "book.txt"}, {"--data-format", "text"}}).is_ok());
}

TEST(TrainOptionsTest, ValidationDataOrFractionNotBoth) {
  expect_error(options_from({{"--val-data", "val.bin"}, {"--val-fraction", "0.1"}}), Code::invalid_argument,
               {"val_data val.bin", "val_fraction 0.1", "not both"});
  const TrainOptions o = expect_value(options_from({{"--val-data", "val.bin"}}));
  EXPECT_EQ(o.val_data, std::vector<std::string>{"val.bin"});
  EXPECT_DOUBLE_EQ(o.val_fraction, 0.0);  // the default fraction gives way to the files
  EXPECT_TRUE(o.evaluates());
  EXPECT_FALSE(expect_value(options_from({{"--val-fraction", "0"}})).evaluates());
  EXPECT_FALSE(expect_value(options_from({{"--eval-every", "0"}})).evaluates());
}

TEST(TrainOptionsTest, ValidationFractionMustBeBelowHalf) {
  expect_error(options_from({{"--val-fraction", "0.5"}}), Code::invalid_argument, {"val_fraction 0.5", "below 0.5"});
  expect_error(options_from({{"--val-fraction", "0.7"}}), Code::out_of_range, {"val_fraction", "--val-fraction"});
  EXPECT_DOUBLE_EQ(expect_value(options_from({{"--val-fraction", "0.25"}})).val_fraction, 0.25);
}

TEST(TrainOptionsTest, GradAccumMustBeAtLeastOne) {
  expect_error(options_from({{"--grad-accum", "0"}}), Code::out_of_range, {"grad_accum", "[1, 65536]"});
  expect_error(options_from({}, {"STRATA_MICRO_BATCH=0"}), Code::out_of_range, {"STRATA_MICRO_BATCH", "micro_batch"});
}

TEST(TrainOptionsTest, WarmupLongerThanTheRunIsAnError) {
  expect_error(options_from({{"--warmup-steps", "1300"}}), Code::invalid_argument,
               {"warmup_steps 1300 (flag --warmup-steps)", "steps 1000 (default)"});
  expect_error(options_from({{"--warmup-steps", "1000"}}), Code::invalid_argument,
               {"warmup_steps 1000", "steps 1000", "cosine", "--lr-schedule constant"});
  const TrainOptions o = expect_value(options_from({{"--warmup-steps", "1000"}, {"--lr-schedule", "constant"}}));
  EXPECT_EQ(o.lr_schedule.warmup_steps, 1000u);
  EXPECT_EQ(expect_value(options_from({{"--steps", "5"}})).lr_schedule.warmup_steps, 0u);  // auto: 10%
}

TEST(TrainOptionsTest, ZeroLearningRateIsAnError) {
  expect_error(options_from({{"--lr", "0"}}), Code::invalid_argument, {"lr 0", "above 0"});
}

TEST(TrainOptionsTest, CheckpointEveryNeedsADirectory) {
  expect_error(options_from({{"--checkpoint-every", "50"}}), Code::invalid_argument,
               {"checkpoint_every 50", "--checkpoint-dir"});
}

TEST(TrainOptionsTest, Fp16KeysWithoutFp16AreAWarningNotAnError) {
  const TrainOptions o =
      expect_value(options_from({{"--dtype", "bf16"}, {"--loss-scale-window", "500"}, {"--loss-scale-min", "4"}}));
  ASSERT_EQ(o.warnings.size(), 1u);
  EXPECT_NE(o.warnings[0].find("loss_scale_window 500 (flag --loss-scale-window)"), std::string::npos) << o.warnings[0];
  EXPECT_NE(o.warnings[0].find("loss_scale_min 4"), std::string::npos) << o.warnings[0];
  EXPECT_NE(o.warnings[0].find("ignored with dtype bf16"), std::string::npos) << o.warnings[0];
  const TrainOptions fp16 = expect_value(options_from({{"--dtype", "fp16"}, {"--loss-scale-window", "500"}}));
  EXPECT_TRUE(fp16.warnings.empty());
  EXPECT_EQ(fp16.loss_scaler.growth_interval, 500u);
}

TEST(TrainOptionsTest, Fp16MinimumScaleAboveTheInitialScaleIsAnError) {
  expect_error(options_from({{"--dtype", "fp16"}, {"--loss-scale-initial-power", "4"}, {"--loss-scale-min", "32"}}),
               Code::invalid_argument, {"loss_scale_min 32", "2^4 = 16", "flag --loss-scale-initial-power"});
  const TrainOptions o = expect_value(options_from({{"--dtype", "fp16"}, {"--loss-scale", "128"}}));
  EXPECT_FALSE(o.loss_scaler.dynamic);
  EXPECT_DOUBLE_EQ(o.loss_scaler.initial_scale, 128.0);
}

TEST(TrainOptionsTest, DeepSpeedPrecisionSwitchesAgreeWithDtype) {
  expect_error(options_from({{"--bf16-enabled", "true"}, {"--fp16-enabled", "true"}}), Code::invalid_argument,
               {"bf16_enabled true", "fp16_enabled true", "both true"});
  expect_error(options_from({{"--fp16-enabled", "true"}, {"--dtype", "bf16"}}), Code::invalid_argument,
               {"dtype bf16 (flag --dtype)", "contradicts fp16_enabled true"});
  EXPECT_EQ(expect_value(options_from({{"--fp16-enabled", "true"}})).dtype, DType::f16);
  EXPECT_EQ(expect_value(options_from({{"--bf16-enabled", "true"}, {"--dtype", "bf16"}})).dtype, DType::bf16);
  EXPECT_EQ(expect_value(options_from({{"--fp16-enabled", "false"}, {"--dtype", "fp16"}})).dtype, DType::f16);
}

TEST(TrainOptionsTest, OptimizerChoiceIsCaseInsensitive) {
  const TrainOptions o = expect_value(options_from({}, {"STRATA_OPTIMIZER_TYPE=AdamW"}));
  EXPECT_EQ(o.optimizer, "adamw");
  const TrainOptions adam = expect_value(options_from({{"--optimizer-type", "Adam"}}));
  EXPECT_EQ(adam.adam_hyper.mode, kernels::AdamMode::adam);
  EXPECT_TRUE(adam.warnings.empty());  // the L2 note is for DeepSpeed files only
}

TEST(TrainOptionsTest, DeepSpeedConfigFileAliases) {
  TempDir dir;
  const std::string path = dir.file("ds_config.json");
  write_text(path, R"({
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 4,
    "gradient_clipping": 0.5,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "eps": 1e-6, "weight_decay": 0.01}},
    "scheduler": {"params": {"warmup_num_steps": 10}},
    "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12, "loss_scale_window": 500,
             "hysteresis": 3, "min_loss_scale": 2},
    "bf16": {"enabled": false}
  })");
  const TrainOptions o = expect_value(options_from({{"--config", path}}));
  EXPECT_EQ(o.micro_batch, 8u);
  EXPECT_EQ(o.grad_accum, 4u);
  EXPECT_DOUBLE_EQ(o.clip_grad_norm, 0.5);
  EXPECT_EQ(o.optimizer, "adamw");
  EXPECT_DOUBLE_EQ(o.lr_schedule.peak_lr, 3e-4);
  EXPECT_FLOAT_EQ(o.adam_hyper.eps, 1e-6f);
  EXPECT_FLOAT_EQ(o.adam_hyper.weight_decay, 0.01f);
  EXPECT_EQ(o.lr_schedule.warmup_steps, 10u);
  EXPECT_EQ(o.dtype, DType::f16);
  EXPECT_TRUE(o.loss_scaler.dynamic);
  EXPECT_DOUBLE_EQ(o.loss_scaler.initial_scale, 4096.0);  // 2^12
  EXPECT_EQ(o.loss_scaler.growth_interval, 500u);
  EXPECT_EQ(o.loss_scaler.hysteresis, 3u);
  EXPECT_DOUBLE_EQ(o.loss_scaler.min_scale, 2.0);
  EXPECT_TRUE(o.warnings.empty());
}

TEST(TrainOptionsTest, DeepSpeedAdamWithWeightDecayWarnsThatItIsL2) {
  TempDir dir;
  const std::string path = dir.file("ds_adam.json");
  write_text(path, R"({"optimizer": {"type": "Adam", "params": {"weight_decay": 0.01}}})");
  const TrainOptions o = expect_value(options_from({{"--config", path}}));
  EXPECT_EQ(o.adam_hyper.mode, kernels::AdamMode::adam);
  ASSERT_EQ(o.warnings.size(), 1u);
  EXPECT_NE(o.warnings[0].find("adam_w_mode"), std::string::npos) << o.warnings[0];
  EXPECT_NE(o.warnings[0].find("adamw"), std::string::npos) << o.warnings[0];
}

TEST(TrainOptionsTest, DeepSpeedBetasArrayAndBeta1Beta2AreAccepted) {
  TempDir dir;
  const std::string path = dir.file("ds_betas.json");
  write_text(path, R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.85, 0.98]}}})");
  const TrainOptions o = expect_value(options_from({{"--config", path}}));
  EXPECT_FLOAT_EQ(o.adam_hyper.beta1, 0.85f);
  EXPECT_FLOAT_EQ(o.adam_hyper.beta2, 0.98f);
  EXPECT_DOUBLE_EQ(o.lr_schedule.peak_lr, 1e-4);
  write_text(path, R"({"optimizer": {"params": {"betas": [0.9, 0.95, 0.99]}}})");
  expect_error(options_from({{"--config", path}}), Code::invalid_argument,
               {path, "optimizer.params.betas has 3 elements", "index 2"});
  write_text(path, R"({"optimizer": {"params": {"beta1": 0.8, "beta2": 0.99}}})");
  const TrainOptions named = expect_value(options_from({{"--config", path}}));
  EXPECT_FLOAT_EQ(named.adam_hyper.beta1, 0.8f);
  EXPECT_FLOAT_EQ(named.adam_hyper.beta2, 0.99f);
}

TEST(TrainOptionsTest, FlagsOverrideEnvironmentOverrideFile) {
  TempDir dir;
  const std::string path = dir.file("cfg.json");
  write_text(path, R"({"micro_batch": 8, "steps": 300, "lr": 0.002})");
  Flags flags = {{"--config", path}, {"--micro-batch", "32"}};
  std::vector<char*> envp;
  std::string env = "STRATA_MICRO_BATCH=16", env2 = "STRATA_STEPS=400";
  envp = {env.data(), env2.data(), nullptr};
  const Config config = expect_value(resolve_config(train_schema(), flags, envp.data()));
  const TrainOptions o = expect_value(train_options_from_config(config));
  EXPECT_EQ(o.micro_batch, 32u);
  EXPECT_EQ(config.source("micro_batch"), ConfigSource::flag);
  EXPECT_EQ(o.steps, 400u);
  EXPECT_EQ(config.source("steps"), ConfigSource::env);
  EXPECT_DOUBLE_EQ(o.lr_schedule.peak_lr, 0.002);
  EXPECT_EQ(config.source("lr"), ConfigSource::file);
  EXPECT_EQ(o.lr_schedule.warmup_steps, 40u);  // auto follows the effective steps
}

TEST(TrainOptionsTest, DataFormatForAutoGoesByExtension) {
  const TrainOptions automatic = expect_value(options_from({}));
  EXPECT_EQ(expect_value(data_format_for(automatic, "fineweb_train_000001.bin")), TokenFileKind::llmc_bin);
  EXPECT_EQ(expect_value(data_format_for(automatic, "book.txt")), TokenFileKind::text);
  const StatusOr<TokenFileKind> unknown = data_format_for(automatic, "tokens.u16");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_EQ(unknown.status().code(), Code::invalid_argument);
  EXPECT_NE(unknown.status().message().find("tokens.u16"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("--data-format"), std::string::npos);
  const TrainOptions u32 = expect_value(options_from({{"--data-format", "u32"}}));
  EXPECT_EQ(expect_value(data_format_for(u32, "tokens.bin")), TokenFileKind::raw_u32);
}

}  // namespace
}  // namespace strata::model
