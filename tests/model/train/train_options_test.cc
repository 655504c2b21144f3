// Tests of the train config keys and TrainOptions: the defaults, every cross-key error, the
// DeepSpeed-style aliases of a JSON config file (a full ZeRO-Infinity config among them: batch
// sizes, schedulers, ignored settings), the weight placement keys (offload_param and its DeepSpeed
// section), and the precedence file < env < flags.
#include "model/train/train_options.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "model/train/train_config_keys.h"
#include "tests/model/model_test_files.h"
#include "offload/config_keys.h"
#include "runtime/config.h"
#include "runtime/config_keys.h"

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
  EXPECT_EQ(o.lr_schedule.warmup, LrWarmup::linear);
  EXPECT_DOUBLE_EQ(o.lr_schedule.warmup_start_fraction, 0.0);
  EXPECT_EQ(o.lr_schedule.total_steps, 1000u);
  EXPECT_DOUBLE_EQ(o.lr_schedule.final_fraction, 0.1);
  EXPECT_TRUE(o.loss_scaler.dynamic);
  EXPECT_FALSE(o.loss_scaler.consecutive_hysteresis);
  EXPECT_DOUBLE_EQ(o.loss_scaler.initial_scale, 65536.0);
  EXPECT_EQ(o.loss_scaler.growth_interval, 1000u);
  EXPECT_EQ(o.loss_scaler.hysteresis, 2u);
  EXPECT_DOUBLE_EQ(o.loss_scaler.min_scale, 1.0);
  EXPECT_EQ(o.eval_every, 50u);
  EXPECT_EQ(o.eval_batches, 8u);
  EXPECT_TRUE(o.evaluates());
  EXPECT_EQ(o.log_every, 0u);  // auto: model/train/train_progress.h
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

TEST(TrainOptionsTest, Fp16GrowthAndBackoffFactorsAreSettable) {
  const TrainOptions d = expect_value(options_from({{"--dtype", "fp16"}}));
  EXPECT_EQ(d.loss_scaler.growth_factor, 2.0);
  EXPECT_EQ(d.loss_scaler.backoff_factor, 0.5);
  const TrainOptions o = expect_value(
      options_from({{"--dtype", "fp16"}, {"--loss-scale-growth", "4"}, {"--loss-scale-backoff", "0.25"}}));
  EXPECT_EQ(o.loss_scaler.growth_factor, 4.0);
  EXPECT_EQ(o.loss_scaler.backoff_factor, 0.25);
  expect_error(options_from({{"--dtype", "fp16"}, {"--loss-scale-backoff", "1"}}), Code::out_of_range,
               {"loss_scale_backoff"});
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
             "hysteresis": 3, "consecutive_hysteresis": true, "min_loss_scale": 2},
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
  EXPECT_TRUE(o.loss_scaler.consecutive_hysteresis);
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

// --- DeepSpeed configs -------------------------------------------------------------------------

// The schema of the strata CLI (tools/strata/schema.cc): a DeepSpeed file also holds offload keys.
ConfigSchema cli_schema() {
  ConfigSchema schema;
  add_runtime_config_keys(schema);
  add_offload_config_keys(schema);
  add_train_config_keys(schema);
  return schema;
}

// The options of the config file `json` (written to a temporary file) and `flags`.
StatusOr<TrainOptions> options_from_file(const std::string& json, Flags flags = {}) {
  TempDir dir;
  const std::string path = dir.file("ds_config.json");
  write_text(path, json);
  flags.emplace_back("--config", path);
  std::vector<char*> envp = {nullptr};
  STRATA_ASSIGN_OR_RETURN(Config config, resolve_config(cli_schema(), flags, envp.data()));
  return train_options_from_config(config);
}

bool has_warning(const TrainOptions& o, const std::string& words) {
  for (const std::string& w : o.warnings)
    if (w.find(words) != std::string::npos) return true;
  return false;
}

// DeepSpeed's ZeRO-Infinity example (stage 3, optimizer and parameters offloaded to NVMe, aio
// settings) with bf16, AdamW and WarmupCosineLR, as a DeepSpeed user would bring it.
constexpr std::string_view kZeroInfinityConfig = R"({
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 8,
  "gradient_clipping": 1.0,
  "steps_per_print": 10,
  "wall_clock_breakdown": false,
  "zero_allow_untested_optimizer": true,
  "bf16": {"enabled": true},
  "optimizer": {
    "type": "AdamW",
    "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}
  },
  "scheduler": {
    "type": "WarmupCosineLR",
    "params": {"total_num_steps": 2000, "warmup_min_ratio": 0.01, "warmup_num_steps": 100,
               "cos_min_ratio": 0.1, "warmup_type": "linear"}
  },
  "zero_optimization": {
    "stage": 3,
    "contiguous_gradients": true,
    "overlap_comm": true,
    "reduce_bucket_size": 1e7,
    "sub_group_size": 1e9,
    "stage3_prefetch_bucket_size": 1e7,
    "stage3_param_persistence_threshold": 1e5,
    "stage3_max_live_parameters": 1e9,
    "stage3_max_reuse_distance": 1e9,
    "stage3_gather_16bit_weights_on_model_save": true,
    "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true,
                          "buffer_count": 4, "fast_init": false},
    "offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true,
                      "buffer_count": 5, "buffer_size": 1e8, "max_in_cpu": 1e9}
  },
  "aio": {"block_size": 1048576, "queue_depth": 8, "thread_count": 1, "single_submit": false,
          "overlap_events": true}
})";

TEST(TrainOptionsTest, DeepSpeedZeroInfinityConfigLoads) {
  TempDir dir;
  const std::string path = dir.file("zero_infinity.json");
  write_text(path, std::string(kZeroInfinityConfig));
  std::vector<char*> envp = {nullptr};
  const Config config = expect_value(resolve_config(cli_schema(), {{"--config", path}}, envp.data()));
  EXPECT_EQ(config.get_list("nvme_path"), std::vector<std::string>{"/local_nvme"});  // both sections agree
  EXPECT_EQ(config.get_size("aio_block_size"), 1024u * 1024u);
  EXPECT_EQ(config.get_int("aio_queue_depth"), 8);

  const TrainOptions o = expect_value(train_options_from_config(config));
  EXPECT_EQ(o.micro_batch, 8u);
  EXPECT_EQ(o.grad_accum, 8u);  // train_batch_size 64 / micro batch 8
  EXPECT_EQ(o.steps, 2000u);    // the schedule's total_num_steps, no --steps given
  EXPECT_EQ(o.log_every, 10u);
  EXPECT_DOUBLE_EQ(o.clip_grad_norm, 1.0);
  EXPECT_EQ(o.dtype, DType::bf16);
  EXPECT_EQ(o.optimizer, "adamw");
  EXPECT_EQ(o.adam_hyper.mode, kernels::AdamMode::adamw);
  EXPECT_FLOAT_EQ(o.adam_hyper.lr, 3e-4f);
  EXPECT_FLOAT_EQ(o.adam_hyper.beta1, 0.9f);
  EXPECT_FLOAT_EQ(o.adam_hyper.beta2, 0.95f);
  EXPECT_FLOAT_EQ(o.adam_hyper.eps, 1e-8f);
  EXPECT_FLOAT_EQ(o.adam_hyper.weight_decay, 0.1f);
  EXPECT_DOUBLE_EQ(o.lr_schedule.peak_lr, 3e-4);
  EXPECT_EQ(o.lr_schedule.decay, LrDecay::cosine);
  EXPECT_EQ(o.lr_schedule.warmup, LrWarmup::linear);
  EXPECT_EQ(o.lr_schedule.warmup_steps, 100u);
  EXPECT_DOUBLE_EQ(o.lr_schedule.warmup_start_fraction, 0.01);
  EXPECT_EQ(o.lr_schedule.total_steps, 2000u);
  EXPECT_DOUBLE_EQ(o.lr_schedule.final_fraction, 0.1);

  // offload_param pages the weights from NVMe with offload_param.buffer_count staging buffers.
  EXPECT_EQ(o.weight_home, Tier::nvme);
  EXPECT_EQ(o.nvme_staging, 5u);
  EXPECT_EQ(o.param_slots, 2u);
  EXPECT_EQ(o.prefetch_bytes, 0u);
  // offload_optimizer: the state on NVMe, DeepSpeed's buffer_count staging buffers.
  EXPECT_TRUE(o.cpu_optimizer());
  EXPECT_EQ(o.optimizer_home, Tier::nvme);
  EXPECT_EQ(o.optimizer_staging, 4u);
  EXPECT_EQ(offload_value(o.optimizer_home), "nvme");
  // sub_group_size: parameters per optimizer piece.
  EXPECT_EQ(o.sub_group_size, 1000000000u);

  // Every ignored setting is reported, grouped by why it has no effect; nothing else is warned.
  // zero_optimization.stage is what a run across ranks partitions.
  EXPECT_EQ(o.zero_stage, 3);
  EXPECT_FALSE(o.partitions_weights());  // on one rank nothing is partitioned
  ASSERT_EQ(o.warnings.size(), 10u) << ::testing::PrintToString(o.warnings);
  EXPECT_FALSE(has_warning(o, "zero_optimization.stage=3"));
  EXPECT_TRUE(has_warning(o, "zero_optimization.overlap_comm=true, zero_optimization.reduce_bucket_size=10000000.0 "
                             "have no effect: tuning of the gradient and weight collectives"));
  EXPECT_FALSE(has_warning(o, "zero_optimization.offload_optimizer.device"));
  EXPECT_FALSE(has_warning(o, "zero_optimization.offload_optimizer.buffer_count"));
  EXPECT_TRUE(has_warning(o, "zero_optimization.offload_optimizer.pin_memory=true, "
                             "zero_optimization.offload_optimizer.fast_init=false have no effect"));
  EXPECT_TRUE(has_warning(o, "zero_optimization.offload_param.buffer_size=100000000.0 has no effect"));
  EXPECT_TRUE(has_warning(o, "zero_optimization.offload_param.max_in_cpu=1000000000.0 has no effect"));
  EXPECT_TRUE(has_warning(o, "zero_optimization.offload_param.pin_memory=true has no effect"));
  EXPECT_TRUE(has_warning(o, "aio.thread_count=1, aio.single_submit=false, aio.overlap_events=true have no effect"));
  EXPECT_TRUE(has_warning(o, "wall_clock_breakdown=false has no effect"));
  EXPECT_TRUE(has_warning(o, "zero_allow_untested_optimizer=true has no effect"));
}

TEST(TrainOptionsTest, DeepSpeedKeysOutsideTheListStayUnknown) {
  expect_error(options_from_file(R"({"wall_clock_breakdwn": true})"), Code::invalid_argument,
               {"unknown key 'wall_clock_breakdwn'", "did you mean 'wall_clock_breakdown'?"});
  expect_error(options_from_file(R"({"zero_optimization": {"stage": 3, "stage3_max_live_parameter": 1e9}})"),
               Code::invalid_argument,
               {"unknown key 'zero_optimization.stage3_max_live_parameter'",
                "did you mean 'zero_optimization.stage3_max_live_parameters'?"});
  expect_error(options_from_file(R"({"scheduler": {"type": "OneCycle"}})"), Code::invalid_argument,
               {"scheduler.type", "lr_schedule must be one of", "WarmupCosineLR"});
  expect_error(options_from_file(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": "auto"}}})"),
               Code::invalid_argument, {"scheduler.params.warmup_max_lr", "lr must be a number"});
}

TEST(TrainOptionsTest, TrainBatchSizeDerivesTheMissingFactor) {
  // grad_accum not given: train_batch_size / micro_batch (given or default).
  TrainOptions o = expect_value(options_from({{"--train-batch-size", "64"}}));
  EXPECT_EQ(o.micro_batch, 16u);
  EXPECT_EQ(o.grad_accum, 4u);
  // micro_batch not given but grad_accum is: DeepSpeed derives the micro-batch.
  o = expect_value(options_from({{"--train-batch-size", "48"}, {"--grad-accum", "3"}}));
  EXPECT_EQ(o.micro_batch, 16u);
  EXPECT_EQ(o.grad_accum, 3u);
  o = expect_value(options_from_file(R"({"train_batch_size": 24, "gradient_accumulation_steps": 6})"));
  EXPECT_EQ(o.micro_batch, 4u);
  EXPECT_EQ(o.grad_accum, 6u);
  // All three given and consistent.
  o = expect_value(options_from_file(
      R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8})"));
  EXPECT_EQ(o.tokens_per_step(), 32u * 64u);
}

TEST(TrainOptionsTest, TrainBatchSizeThatDisagreesIsAnError) {
  expect_error(options_from({{"--train-batch-size", "32"}, {"--micro-batch", "4"}, {"--grad-accum", "4"}}),
               Code::invalid_argument,
               {"train_batch_size 32 (flag --train-batch-size)", "micro_batch 4 (flag --micro-batch)",
                "grad_accum 4 (flag --grad-accum) = 16", "over all ranks", "gradient_accumulation_steps x world size"});
  expect_error(options_from({{"--train-batch-size", "40"}}), Code::invalid_argument,
               {"train_batch_size 40 (flag --train-batch-size) is not a multiple of micro_batch 16 (default)",
                "grad_accum (not given, 1 now)"});
  expect_error(options_from({{"--train-batch-size", "48"}, {"--grad-accum", "5"}}), Code::invalid_argument,
               {"not a multiple of grad_accum 5 (flag --grad-accum)", "micro_batch (not given, 16 now)"});
  expect_error(options_from({{"--train-batch-size", "131072"}, {"--micro-batch", "1"}}), Code::invalid_argument,
               {"gives grad_accum 131072, above its maximum 65536"});
}

TEST(TrainOptionsTest, DeepSpeedWarmupLRWarmsUpLogarithmicallyByDefault) {
  const TrainOptions o = expect_value(options_from_file(R"({
    "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
    "scheduler": {"type": "WarmupLR",
                  "params": {"warmup_min_lr": 1e-5, "warmup_max_lr": 1e-3, "warmup_num_steps": 50}}
  })"));
  const LrScheduleOptions& s = o.lr_schedule;
  EXPECT_EQ(s.decay, LrDecay::constant);
  EXPECT_EQ(s.warmup, LrWarmup::log);  // DeepSpeed's default warmup_type
  EXPECT_EQ(s.warmup_steps, 50u);
  EXPECT_DOUBLE_EQ(s.peak_lr, 1e-3);
  EXPECT_DOUBLE_EQ(s.warmup_start_fraction, 1e-5 / 1e-3);
  EXPECT_EQ(o.steps, 1000u);  // WarmupLR has no total_num_steps
  const LrSchedule schedule = expect_value(LrSchedule::create(s));
  EXPECT_DOUBLE_EQ(schedule.lr(0), 1e-3 * (0.01 + 0.99 * std::log(2.0) / std::log(51.0)));
  EXPECT_DOUBLE_EQ(schedule.lr(49), 1e-3);
  EXPECT_DOUBLE_EQ(schedule.lr(999), 1e-3);
  // warmup_type linear, and strata's own schedules may take log warmup too.
  const std::string linear = R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "linear"}}})";
  EXPECT_EQ(expect_value(options_from_file(linear)).lr_schedule.warmup, LrWarmup::linear);
  EXPECT_EQ(expect_value(options_from({{"--warmup-type", "log"}})).lr_schedule.warmup, LrWarmup::log);
}

TEST(TrainOptionsTest, DeepSpeedWarmupDecayLREndsAtZeroAtTotalNumSteps) {
  const std::string json = R"({
    "optimizer": {"params": {"lr": 2e-4}},
    "scheduler": {"type": "WarmupDecayLR",
                  "params": {"total_num_steps": 500, "warmup_max_lr": 2e-4, "warmup_num_steps": 20}}
  })";
  TrainOptions o = expect_value(options_from_file(json));
  EXPECT_EQ(o.lr_schedule.decay, LrDecay::linear);
  EXPECT_DOUBLE_EQ(o.lr_schedule.final_fraction, 0.0);
  EXPECT_EQ(o.lr_schedule.total_steps, 500u);
  EXPECT_EQ(o.steps, 500u);
  EXPECT_EQ(o.lr_schedule.warmup, LrWarmup::log);
  // A shorter run keeps the schedule's length: training stops mid-decay.
  o = expect_value(options_from_file(json, {{"--steps", "100"}}));
  EXPECT_EQ(o.steps, 100u);
  EXPECT_EQ(o.lr_schedule.total_steps, 500u);
  EXPECT_DOUBLE_EQ(expect_value(LrSchedule::create(o.lr_schedule)).lr(260), 2e-4 * 0.5);
  // Without warmup_num_steps the warmup is 10% of the schedule, not DeepSpeed's 1000.
  o = expect_value(
      options_from_file(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 300}}})"));
  EXPECT_EQ(o.lr_schedule.warmup_steps, 30u);
  expect_error(options_from_file(R"({"scheduler": {"type": "WarmupDecayLR",
                                                   "params": {"total_num_steps": 300, "warmup_num_steps": 400}}})"),
               Code::invalid_argument, {"warmup_steps 400", "lr_schedule_steps 300 (file"});
}

TEST(TrainOptionsTest, DeepSpeedWarmupCosineLRDefaultsToDeepSpeedsFloor) {
  const TrainOptions o = expect_value(options_from_file(
      R"({"scheduler": {"type": "warmupcosinelr", "params": {"total_num_steps": 1000, "warmup_num_steps": 10}}})"));
  EXPECT_EQ(o.lr_schedule.decay, LrDecay::cosine);
  EXPECT_DOUBLE_EQ(o.lr_schedule.final_fraction, 1e-4);  // DeepSpeed's cos_min_ratio default
  EXPECT_DOUBLE_EQ(o.lr_schedule.warmup_start_fraction, 0.0);
  EXPECT_EQ(o.lr_schedule.warmup, LrWarmup::log);
}

TEST(TrainOptionsTest, DeepSpeedPeakRatesMustAgree) {
  expect_error(options_from_file(R"({
    "optimizer": {"params": {"lr": 1e-3}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 2e-3}}
  })"),
               Code::invalid_argument,
               {"lr is set twice, to different values", "'optimizer.params.lr'=0.001",
                "'scheduler.params.warmup_max_lr'=0.002"});
  const TrainOptions o = expect_value(options_from_file(R"({"scheduler": {"params": {"warmup_max_lr": 5e-4}}})"));
  EXPECT_DOUBLE_EQ(o.lr_schedule.peak_lr, 5e-4);
  EXPECT_FLOAT_EQ(o.adam_hyper.lr, 5e-4f);
}

TEST(TrainOptionsTest, DeepSpeedSchedulerParamsItDoesNotTakeAreErrors) {
  expect_error(options_from_file(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"cos_min_ratio": 0.1}}})"),
               Code::invalid_argument,
               {"min_lr_fraction 0.1 (file", "DeepSpeed's cos_min_ratio", "does not apply to lr_schedule WarmupDecayLR",
                "takes total_num_steps, warmup_min_lr"});
  expect_error(options_from_file(R"({"scheduler": {"type": "WarmupLR", "params": {"total_num_steps": 100}}})"),
               Code::invalid_argument, {"lr_schedule_steps 100", "does not apply to lr_schedule WarmupLR"});
  expect_error(options_from_file(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"warmup_min_lr": 1e-5}}})"),
               Code::invalid_argument,
               {"warmup_min_lr 1e-05", "WarmupCosineLR takes total_num_steps, warmup_min_ratio"});
  expect_error(options_from({{"--lr-schedule", "WarmupLR"}, {"--min-lr-fraction", "0.2"}}), Code::invalid_argument,
               {"min_lr_fraction 0.2 (flag --min-lr-fraction)", "lr_schedule WarmupLR (flag --lr-schedule)"});
}

TEST(TrainOptionsTest, WarmupStartIsARateOrAFractionNotBoth) {
  expect_error(options_from({{"--warmup-min-lr", "1e-5"}, {"--warmup-min-ratio", "0.1"}}), Code::invalid_argument,
               {"warmup_min_lr 1e-05 (flag --warmup-min-lr)", "warmup_min_ratio 0.1 (flag --warmup-min-ratio)",
                "not both"});
  expect_error(options_from({{"--warmup-min-lr", "0.01"}, {"--lr", "0.001"}}), Code::invalid_argument,
               {"warmup_min_lr 0.01", "above the peak lr 0.001 (flag --lr)"});
  EXPECT_DOUBLE_EQ(expect_value(options_from({{"--warmup-min-ratio", "0.25"}})).lr_schedule.warmup_start_fraction,
                   0.25);
}

TEST(TrainOptionsTest, DeepSpeedOptimizerTypesMapOntoOurs) {
  TrainOptions o = expect_value(options_from_file(R"({"optimizer": {"type": "AdamW8bit", "params": {"lr": 1e-4}}})"));
  EXPECT_EQ(o.optimizer, "adamw8bit");
  EXPECT_EQ(o.adam_states, AdamStates::q8);
  EXPECT_EQ(o.adam_hyper.mode, kernels::AdamMode::adamw);
  o = expect_value(options_from_file(R"({"optimizer": {"type": "Adam", "params": {"weight_decay": 0}}})"));
  EXPECT_EQ(o.adam_hyper.mode, kernels::AdamMode::adam);
  expect_error(options_from_file(R"({"optimizer": {"type": "Lamb"}})"), Code::invalid_argument,
               {"optimizer.type", "optimizer_type must be one of adamw, adam, adamw8bit"});
}

// --- weight placement (Offload I) ----------------------------------------------------------------

TEST(TrainOptionsTest, WeightPlacementDefaultsKeepTheWeightsResident) {
  const TrainOptions o = expect_value(options_from_file("{}"));
  EXPECT_EQ(o.weight_home, Tier::device);
  EXPECT_EQ(o.param_slots, 2u);
  EXPECT_EQ(o.prefetch_bytes, 0u);
  EXPECT_EQ(o.nvme_staging, 2u);
  EXPECT_EQ(o.trace_path, "");
  EXPECT_TRUE(o.warnings.empty());
  EXPECT_EQ(offload_value(Tier::device), "none");
  EXPECT_EQ(offload_value(Tier::cpu), "cpu");
  EXPECT_EQ(offload_value(Tier::nvme), "nvme");
}

TEST(TrainOptionsTest, WeightPlacementFlagsReadBack) {
  const TrainOptions o = expect_value(options_from({{"--offload-param", "cpu"},
                                                    {"--param-slots", "3"},
                                                    {"--prefetch-bytes", "512MiB"},
                                                    {"--trace", "run.trace.json"}}));
  EXPECT_EQ(o.weight_home, Tier::cpu);
  EXPECT_EQ(o.param_slots, 3u);
  EXPECT_EQ(o.prefetch_bytes, 512ull << 20);
  EXPECT_EQ(o.trace_path, "run.trace.json");
  EXPECT_TRUE(o.warnings.empty()) << ::testing::PrintToString(o.warnings);
  // nvme with a path, and its staging buffers; the choice is case-insensitive.
  const TrainOptions n = expect_value(options_from_file(
      "{}", {{"--offload-param", "NVMe"}, {"--nvme-path", "/mnt/a,/mnt/b"}, {"--nvme-staging", "4"}}));
  EXPECT_EQ(n.weight_home, Tier::nvme);
  EXPECT_EQ(n.nvme_staging, 4u);
  EXPECT_TRUE(n.warnings.empty()) << ::testing::PrintToString(n.warnings);
}

TEST(TrainOptionsTest, WeightPlacementFromTheEnvironment) {
  const TrainOptions o = expect_value(
      options_from({}, {"STRATA_OFFLOAD_PARAM=cpu", "STRATA_PARAM_SLOTS=4", "STRATA_PREFETCH_BYTES=1GiB",
                        "STRATA_TRACE=/tmp/t.json"}));
  EXPECT_EQ(o.weight_home, Tier::cpu);
  EXPECT_EQ(o.param_slots, 4u);
  EXPECT_EQ(o.prefetch_bytes, 1ull << 30);
  EXPECT_EQ(o.trace_path, "/tmp/t.json");
  // A flag wins over the variable.
  EXPECT_EQ(expect_value(options_from({{"--offload-param", "none"}}, {"STRATA_OFFLOAD_PARAM=cpu"})).weight_home,
            Tier::device);
}

TEST(TrainOptionsTest, WeightPlacementValuesAreChecked) {
  expect_error(options_from({{"--offload-param", "disk"}}), Code::invalid_argument,
               {"--offload-param", "offload_param must be one of none, cpu, nvme"});
  expect_error(options_from({}, {"STRATA_NVME_STAGING=0"}), Code::out_of_range,
               {"STRATA_NVME_STAGING", "nvme_staging must be an integer in [1, 64]"});
  expect_error(options_from({{"--prefetch-bytes", "lots"}}), Code::invalid_argument, {"prefetch_bytes"});
  expect_error(options_from_file(R"({"zero_optimization": {"offload_param": {"device": "gpu"}}})"),
               Code::invalid_argument, {"zero_optimization.offload_param.device", "one of none, cpu, nvme"});
}

TEST(TrainOptionsTest, FewerThanTwoParamSlotsIsAnError) {
  for (const char* slots : {"0", "1"})
    expect_error(options_from({{"--offload-param", "cpu"}, {"--param-slots", slots}}), Code::invalid_argument,
                 {std::string("param_slots ") + slots + " (flag --param-slots)", "one in use, one being fetched"});
  expect_error(options_from({}, {"STRATA_PARAM_SLOTS=1"}), Code::invalid_argument,
               {"param_slots 1 (env STRATA_PARAM_SLOTS)", "two slots"});
}

TEST(TrainOptionsTest, NvmeHomeNeedsAnNvmePath) {
  expect_error(options_from_file("{}", {{"--offload-param", "nvme"}}), Code::invalid_argument,
               {"offload_param nvme (flag --offload-param)", "no nvme_path",
                "pass --nvme-path DIR or set zero_optimization.offload_param.nvme_path"});
  expect_error(options_from_file(R"({"zero_optimization": {"offload_param": {"device": "nvme"}}})"),
               Code::invalid_argument, {"offload_param nvme (file ", "--nvme-path DIR"});
  // A schema without the offload keys has no nvme_path at all: the same error, not a crash.
  expect_error(options_from({{"--offload-param", "nvme"}}), Code::invalid_argument, {"no nvme_path"});
  // offload_optimizer's nvme_path is the same key: it serves the weights too.
  const TrainOptions o = expect_value(options_from_file(
      R"({"zero_optimization": {"offload_optimizer": {"nvme_path": "/nvme"}, "offload_param": {"device": "nvme"}}})"));
  EXPECT_EQ(o.weight_home, Tier::nvme);
}

TEST(TrainOptionsTest, PagedWeightsNeedTheOptimizerOnTheCpu) {
  for (const char* home : {"cpu", "nvme"})
    expect_error(options_from_file("{}", {{"--offload-param", home},
                                          {"--nvme-path", "/nvme"},
                                          {"--optimizer-device", "device"}}),
                 Code::invalid_argument,
                 {std::string("offload_param ") + home + " (flag --offload-param)",
                  "optimizer_device device (flag --optimizer-device)",
                  "the optimizer on the device updates resident weights", "pass --optimizer-device cpu"});
  const TrainOptions o = expect_value(options_from({{"--optimizer-device", "device"}}));
  EXPECT_EQ(o.optimizer_home, Tier::device);
  EXPECT_EQ(o.weight_home, Tier::device);
}

TEST(TrainOptionsTest, PagingKeysWithoutPagingAreAWarningNotAnError) {
  TrainOptions o = expect_value(options_from({{"--param-slots", "4"}, {"--nvme-staging", "3"}}));
  ASSERT_EQ(o.warnings.size(), 1u) << ::testing::PrintToString(o.warnings);
  EXPECT_TRUE(has_warning(o, "param_slots 4 (flag --param-slots), nvme_staging 3 (flag --nvme-staging) only apply "
                             "to paged weights (offload_param cpu or nvme) and are ignored with offload_param none "
                             "(default)"));
  EXPECT_EQ(o.param_slots, 4u);  // read all the same
  o = expect_value(options_from({{"--offload-param", "cpu"}, {"--nvme-staging", "3"}}));
  ASSERT_EQ(o.warnings.size(), 1u) << ::testing::PrintToString(o.warnings);
  EXPECT_TRUE(has_warning(o, "nvme_staging 3 (flag --nvme-staging) only applies to weights homed on NVMe and is "
                             "ignored with offload_param cpu (flag --offload-param)"));
  o = expect_value(options_from({{"--offload-param", "cpu"}, {"--param-cache", "1GiB"}}));
  ASSERT_EQ(o.warnings.size(), 1u) << ::testing::PrintToString(o.warnings);
  EXPECT_TRUE(has_warning(o, "param_cache 1GiB (flag --param-cache) only applies to weights homed on NVMe"));
}

// --param-cache: a size, auto by default (-1: resolved on the budget by the planner), 0 none.
TEST(TrainOptionsTest, TheReadCacheOfNvmeWeightsIsASizeOrAuto) {
  EXPECT_EQ(expect_value(options_from({})).param_cache, -1);
  auto with = [&](const char* v) {
    return expect_value(options_from_file(R"({"zero_optimization": {"offload_param": {"device": "nvme",
                                              "nvme_path": "/local_nvme"}}})",
                                          {{"--param-cache", v}}));
  };
  EXPECT_EQ(with("2GiB").param_cache, int64_t(2) << 30);
  EXPECT_EQ(with("0").param_cache, 0);
  EXPECT_EQ(with("auto").param_cache, -1);
  EXPECT_TRUE(with("2GiB").warnings.empty());
}

// DeepSpeed's offload_param section: device and buffer_count map onto strata keys, nvme_path is
// nvme_path, and buffer_size, max_in_cpu and pin_memory are accepted with one warning each.
TEST(TrainOptionsTest, DeepSpeedOffloadParamSectionMapsAndWarns) {
  const std::string json = R"({"zero_optimization": {"offload_param": {
    "device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 6, "buffer_size": 1e8, "pin_memory": false,
    "max_in_cpu": 1e9}}})";
  TrainOptions o = expect_value(options_from_file(json));
  EXPECT_EQ(o.weight_home, Tier::nvme);
  EXPECT_EQ(o.nvme_staging, 6u);
  ASSERT_EQ(o.warnings.size(), 3u) << ::testing::PrintToString(o.warnings);
  EXPECT_TRUE(has_warning(o, "zero_optimization.offload_param.buffer_size=100000000.0 has no effect: strata sizes "
                             "each staging buffer to the largest weight chunk"));
  EXPECT_TRUE(has_warning(o, "zero_optimization.offload_param.max_in_cpu=1000000000.0 has no effect: strata sizes "
                             "its pinned cache of NVMe-homed weights in bytes, not parameters: --param-cache SIZE"));
  EXPECT_TRUE(has_warning(o, "zero_optimization.offload_param.pin_memory=false has no effect: strata always pins"));
  // Flags override the file's section.
  o = expect_value(options_from_file(json, {{"--offload-param", "cpu"}, {"--nvme-staging", "2"}}));
  EXPECT_EQ(o.weight_home, Tier::cpu);
  EXPECT_TRUE(has_warning(o, "nvme_staging 2 (flag --nvme-staging) only applies to weights homed on NVMe"));
  // DeepSpeed's "none" and "cpu" are ours too.
  o = expect_value(options_from_file(R"({"zero_optimization": {"offload_param": {"device": "cpu"}}})"));
  EXPECT_EQ(o.weight_home, Tier::cpu);
  EXPECT_TRUE(o.warnings.empty()) << ::testing::PrintToString(o.warnings);
  o = expect_value(options_from_file(R"({"zero_optimization": {"offload_param": {"device": "none"}}})"));
  EXPECT_EQ(o.weight_home, Tier::device);
  // A key DeepSpeed's offload_param section does not have stays unknown.
  expect_error(options_from_file(R"({"zero_optimization": {"offload_param": {"buffer_cont": 4}}})"),
               Code::invalid_argument, {"unknown key 'zero_optimization.offload_param.buffer_cont'"});
}

TEST(TrainOptionsTest, WeightPlacementKeysAreInTheCliSchema) {
  const ConfigSchema schema = cli_schema();
  for (const char* name : {"offload_param", "param_slots", "prefetch_bytes", "nvme_staging", "trace"}) {
    ASSERT_NE(schema.find(name), nullptr) << name;
    EXPECT_EQ(schema.find_by_flag(ConfigSchema::flag_name(name)), schema.find(name)) << name;
    EXPECT_EQ(schema.find_by_env(ConfigSchema::env_name(name)), schema.find(name)) << name;
  }
  EXPECT_EQ(schema.find_by_file_path("zero_optimization.offload_param.device")->name, "offload_param");
  EXPECT_EQ(schema.find_by_file_path("zero_optimization.offload_param.buffer_count")->name, "nvme_staging");
  EXPECT_EQ(schema.find_by_file_path("zero_optimization.offload_param.nvme_path")->name, "nvme_path");
  EXPECT_NE(schema.ignored_file_path_reason("zero_optimization.offload_param.buffer_size"), nullptr);
  EXPECT_EQ(schema.ignored_file_path_reason("zero_optimization.offload_optimizer.buffer_count"), nullptr);
  EXPECT_NE(schema.ignored_file_path_reason("zero_optimization.offload_optimizer.pin_memory"), nullptr);
}

TEST(TrainOptionsTest, OptimizerPlacementKeys) {
  const ConfigSchema schema = cli_schema();
  for (const char* name : {"offload_optimizer", "optimizer_staging"}) {
    ASSERT_NE(schema.find(name), nullptr) << name;
    EXPECT_EQ(schema.find_by_flag(ConfigSchema::flag_name(name)), schema.find(name)) << name;
  }
  EXPECT_EQ(schema.find_by_file_path("zero_optimization.offload_optimizer.device")->name, "offload_optimizer");
  EXPECT_EQ(schema.find_by_file_path("zero_optimization.offload_optimizer.buffer_count")->name, "optimizer_staging");
  EXPECT_EQ(schema.find_by_file_path("zero_optimization.offload_optimizer.nvme_path")->name, "nvme_path");

  // Defaults: the optimizer on the CPU, its state in pinned memory.
  TrainOptions o = expect_value(options_from_file("{}", {}));
  EXPECT_TRUE(o.cpu_optimizer());
  EXPECT_EQ(o.optimizer_home, Tier::cpu);
  EXPECT_EQ(offload_value(o.optimizer_home), "cpu");
  // none is the optimizer on the device, as --optimizer-device device.
  o = expect_value(options_from_file("{}", {{"--offload-optimizer", "none"}}));
  EXPECT_EQ(o.optimizer_home, Tier::device);
  EXPECT_EQ(offload_value(o.optimizer_home), "none");
  o = expect_value(options_from_file("{}", {{"--optimizer-device", "device"}}));
  EXPECT_EQ(offload_value(o.optimizer_home), "none");
  o = expect_value(options_from_file("{}", {{"--offload-optimizer", "nvme"}, {"--nvme-path", "/tmp"}, {"--optimizer-staging", "6"}}));
  EXPECT_EQ(o.optimizer_home, Tier::nvme);
  EXPECT_EQ(o.optimizer_staging, 6u);
  // Contradictions and missing pieces are refused, naming the keys.
  expect_error(options_from_file("{}", {{"--offload-optimizer", "cpu"}, {"--optimizer-device", "device"}}),
               Code::invalid_argument, {"--optimizer-device", "--offload-optimizer", "disagree"});
  expect_error(options_from_file("{}", {{"--offload-optimizer", "none"}, {"--optimizer-device", "cpu"}}),
               Code::invalid_argument, {"disagree"});
  expect_error(options_from_file("{}", {{"--offload-optimizer", "nvme"}}), Code::invalid_argument,
               {"no nvme_path is given", "--nvme-path"});
  expect_error(options_from_file("{}", {{"--offload-optimizer", "nvme"}, {"--nvme-path", "/tmp"}, {"--optimizer-staging", "2"}}),
               Code::invalid_argument, {"at least 3 staging buffers"});
  // Staging buffers without an NVMe home: a warning, not an error.
  o = expect_value(options_from_file("{}", {{"--optimizer-staging", "8"}}));
  ASSERT_EQ(o.warnings.size(), 1u);
  EXPECT_NE(o.warnings[0].find("only applies to optimizer state homed on NVMe"), std::string::npos);
}

}  // namespace
}  // namespace strata::model
