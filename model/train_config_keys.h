// The config keys of `strata train`: model preset, data, batch shape, precision, optimizer and
// schedule, evaluation, logging, checkpoints and fp16 loss scaling, with DeepSpeed-style JSON
// aliases where DeepSpeed has the same setting (train_micro_batch_size_per_gpu, optimizer.params.lr,
// gradient_clipping, fp16.loss_scale_window, ...). Not the reading of the values into typed
// options, nor their cross-checks (train_options.h).
//
// DeepSpeed settings that do not map one-to-one:
//   bf16.enabled / fp16.enabled   booleans (keys bf16_enabled, fp16_enabled); true selects that
//                                 dtype (train_options.h resolves them against `dtype`).
//   fp16.initial_scale_power      a power of two: key loss_scale_initial_power (scale = 2^p).
//   fp16.loss_scale               0 = dynamic, > 0 = a fixed scale: key loss_scale.
//   optimizer.params.betas        an array [beta1, beta2]: its elements set keys beta1 and beta2
//                                 (indexed aliases betas[0], betas[1]); optimizer.params.beta1 and
//                                 .beta2 are accepted too.
//   optimizer.type                key optimizer_type (not `optimizer`: that path is DeepSpeed's
//                                 section). "Adam" is our `adam` (L2 weight decay); DeepSpeed's
//                                 Adam decouples the decay by default (adam_w_mode): our `adamw`.
#pragma once

#include <string_view>

#include "runtime/config_schema.h"

namespace strata::model {

// The preset a run with no model arguments trains (model_config.h defines it).
inline constexpr std::string_view kDefaultTrainPreset = "gpt2-tiny";

// Adds every key above to `schema` (once; a second call is a duplicate-key logic_error).
void add_train_config_keys(ConfigSchema& schema);

}  // namespace strata::model
