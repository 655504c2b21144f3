// The config keys of `strata train`: model preset, data, batch shape, precision, optimizer and
// schedule, weight placement (offload_param, param_slots, prefetch_bytes, nvme_staging), evaluation,
// logging and the trace, checkpoints and fp16 loss scaling, with DeepSpeed-style JSON
// aliases where DeepSpeed has the same setting (train_micro_batch_size_per_gpu, optimizer.params.lr,
// gradient_clipping, fp16.loss_scale_window, steps_per_print, ...). Not the reading of the values
// into typed options, nor their cross-checks (train_options.h). docs/CONFIG.md has the full
// DeepSpeed mapping.
//
// DeepSpeed settings that do not map one-to-one:
//   train_batch_size              key train_batch_size; = micro_batch x grad_accum (one GPU), and
//                                 derives the one of those two that is not given (train_options.h).
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
//                                 "AdamW8bit" (bitsandbytes' name) is our adamw8bit.
//   scheduler.type                key lr_schedule, whose choices include WarmupLR, WarmupDecayLR
//                                 and WarmupCosineLR; scheduler.params.* set warmup_steps,
//                                 warmup_type, warmup_min_lr, warmup_min_ratio, min_lr_fraction
//                                 (cos_min_ratio), lr_schedule_steps (total_num_steps) and lr
//                                 (warmup_max_lr: must equal optimizer.params.lr when both are given).
//   zero_optimization.offload_param.device
//                                 key offload_param (DeepSpeed's values none, cpu, nvme); the
//                                 section's buffer_count is key nvme_staging, its nvme_path key
//                                 nvme_path (offload/config_keys.h).
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/config_schema.h"

namespace strata::model {

// The preset a run with no model arguments trains (model_config.h defines it).
inline constexpr std::string_view kDefaultTrainPreset = "gpt2-tiny";

// The largest --micro-batch and --grad-accum the keys take (a suggestion never goes past them).
inline constexpr int64_t kMaxMicroBatch = 65536, kMaxGradAccum = 65536;

// Adds every key above to `schema` (once; a second call is a duplicate-key logic_error), and the
// ignored DeepSpeed paths below.
void add_train_config_keys(ConfigSchema& schema);

// DeepSpeed settings a config file may hold that have no effect on a single-GPU strata run; each
// is accepted with a warning that says why (ConfigSchema::ignore_file_paths, Config::
// ignored_file_warnings; train_options_from_config returns the warnings):
//   zero_optimization.stage                     nothing is partitioned on one GPU
//   zero_optimization.overlap_comm, reduce_bucket_size, allgather_bucket_size,
//     allgather_partitions, reduce_scatter      collectives between GPUs: none on one GPU
//   zero_optimization.contiguous_gradients, sub_group_size, stage3_prefetch_bucket_size,
//     stage3_param_persistence_threshold, stage3_max_live_parameters, stage3_max_reuse_distance
//                                               strata sizes chunks, prefetch and residency from its budgets
//   zero_optimization.stage3_gather_16bit_weights_on_model_save   checkpoints are always whole
//   zero_optimization.offload_optimizer.device  the optimizer's placement is --optimizer-device
//   zero_optimization.offload_optimizer.pin_memory, buffer_count, fast_init
//                                               strata always pins and sizes buffers from --cpu-mem
//   zero_optimization.offload_param.buffer_size staging buffers are sized by chunk
//   zero_optimization.offload_param.max_in_cpu  no partial CPU cache of NVMe-homed weights
//   zero_optimization.offload_param.pin_memory  host buffers are always pinned
//   aio.thread_count, aio.single_submit, aio.overlap_events       libaio tuning; strata uses io_uring
//   wall_clock_breakdown                        timing is in the progress line and --metrics
//   zero_allow_untested_optimizer               strata runs only its own Adam family
// Added by add_train_config_keys; separate so that the list is in one place (train_config_ignored.cc).
void add_ignored_deepspeed_paths(ConfigSchema& schema);

}  // namespace strata::model
