// TrainOptions: the typed settings of one `strata train` run, read from a Config that holds the
// train keys (train_config_keys.h), with the checks that involve more than one key (data vs text,
// warmup vs steps, fp16 keys vs dtype, ...). Single-key ranges are checked when the Config is
// loaded. Not the model's dimensions (model_config.h: `preset` is resolved there) and not the
// trainer; runtime keys such as seed and device stay in the Config.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/adam.h"
#include "model/train/loss_scaler.h"
#include "model/net/model_config.h"
#include "model/train/lr_schedule.h"
#include "model/data/token_dataset.h"
#include "offload/cpu_adam.h"
#include "offload/tier.h"
#include "runtime/config.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

namespace strata::model {

// The order of one step's work over its grad_accum micro-batches (model/train/step_schedule.h):
//   micro_batch_major: each micro-batch's forward and backward in turn (every chunk acquired 2K
//                      times a step);
//   layer_major:       each chunk's forward for all K micro-batches, the head per micro-batch, then
//                      each chunk's backward for all K (Transformer::step_layer_major: every chunk
//                      acquired about twice a step); the same bits; needs activation checkpointing;
//   automatic:         layer_major where it pays and fits (choose_step_schedule), else micro_batch_major.
enum class StepSchedule : uint8_t { automatic, micro_batch_major, layer_major };
std::string_view step_schedule_name(StepSchedule s);  // "auto", "micro-batch-major", "layer-major"

struct TrainOptions {
  std::string preset;     // model preset name, e.g. "gpt2-tiny"
  ModelOverrides model;   // explicit dimensions over the preset (model_config_with() resolves both)
  std::string init_from;  // a Hugging Face model directory or .safetensors file; "" = random init

  // Data. Neither data nor text: the built-in corpus (builtin_corpus.h), one byte per token.
  std::vector<std::string> data;             // token file specs as given (may hold globs)
  std::string text;                          // a plain text file, one byte per token ("" = none)
  uint64_t random_tokens = 0;                // > 0: that many seeded uniform tokens instead of data
  std::optional<TokenFileKind> data_format;  // of data and val_data; nullopt = auto (data_format_for)
  std::vector<std::string> val_data;         // held-out token file specs; empty = hold out val_fraction
  double val_fraction = 0.05;                // in [0, 0.5); 0 when val_data is given

  // Shape: each optimizer step sees grad_accum micro-batches of (micro_batch, seq) tokens.
  uint64_t steps = 1000;
  uint64_t micro_batch = 16;  // B
  uint64_t seq = 64;         // T
  uint64_t grad_accum = 1;   // K
  StepSchedule step_schedule = StepSchedule::automatic;  // the key step_schedule
  // The world the run spreads over (mpirun's size; not a key): each rank runs one of the step's
  // grad_accum micro-batches and homes 1/ranks of the gradient sums and the optimizer's state
  // (offload/chunk_shard.h), on its device or in its host memory; estimate_device_bytes counts a
  // rank's share and the exchange buffers.
  int ranks = 1;
  // A world of one that runs the across-ranks path anyway (not a key: the run sets it when the key
  // comm asks for a communicator, local or nccl, on one rank): the gradient exchanged into a shard
  // that is the whole chunk, the state in one part, the updated weights gathered; the same bits as
  // without, which is what it shows. across_ranks(): the run exchanges through a communicator.
  bool solo_exchange = false;
  bool across_ranks() const { return ranks > 1 || solo_exchange; }
  // Across ranks (the key zero_stage): 3 partitions the working weights too (offload/sharded_weights.h),
  // 0-2 the gradient sums and the optimizer state only (ZeRO-2).
  int zero_stage = 2;
  bool partitions_weights() const { return across_ranks() && zero_stage == 3; }
  uint64_t tokens_per_step() const { return micro_batch * seq * grad_accum; }
  // This rank's micro-batches a step: grad_accum / ranks across ranks (a multiple: check_world_batch),
  // all of them on one rank (the planner's per-rank options, rank_options, say ranks 1 and theirs).
  uint64_t rank_micro_batches() const {
    return ranks > 1 ? std::max<uint64_t>(grad_accum / uint64_t(ranks), 1) : grad_accum;
  }

  DType dtype = DType::f32;  // f32, bf16 or f16: compute precision of weights and activations
  bool tf32 = false;
  bool activation_checkpointing = false;

  // Optimizer. adam_hyper.lr is the peak rate (the schedule scales it per step); step and
  // grad_scale are the trainer's to fill per step.
  std::string optimizer = "adamw";  // "adamw", "adam" or "adamw8bit", for logs
  kernels::AdamHyper adam_hyper;    // lr, beta1, beta2, eps, weight_decay, mode
  AdamStates adam_states = AdamStates::f32;
  // Where the fp32 masters and Adam moments live and AdamW runs (offload/tier.h):
  //   device: the backend's memory, updated by its adam_update op (fp32 moments; weights resident);
  //   cpu:    pinned host memory, updated by the CPU AdamW (offload/cpu_adam.h);
  //   nvme:   one image per chunk in NVMe swap files under nvme_path, streamed through
  //           optimizer_staging pinned buffers (>= 3: one read ahead, one updated, one written
  //           behind) and updated by the CPU AdamW.
  // The keys optimizer_device (cpu, device) and offload_optimizer (none, cpu, nvme) both set it.
  Tier optimizer_home = Tier::cpu;
  bool cpu_optimizer() const { return optimizer_home != Tier::device; }
  // A split update (optimizer_device split; paged weights, one rank, fp32 moments): the layers kept
  // resident (resident_layers) are updated on the device beside their weights -- their fp32
  // masters, moments and gradient sums in device memory -- and the paged chunks by the CPU
  // optimizer, their state where optimizer_home (cpu or nvme) says (model/train/split_optimizer.h;
  // the chunks: device_update_mask, model/plan/placement.h).
  bool split_update = false;
  uint32_t optimizer_staging = 4;
  // Parameters per optimizer piece (DeepSpeed's sub_group_size): a chunk's state larger than this
  // is read, updated and written in pieces of at most this many fp32 elements (model/plan/placement.h), so
  // a staging buffer holds 12 (fp32 moments) or 6 (8-bit) bytes times this, whatever the chunk.
  uint64_t sub_group_size = uint64_t(1) << 24;
  // Memory-centric tiling: rows per tile of the (V, C) token table and untied head
  // (ModelConfig::vocab_tile, a multiple of kVocabTileBlock), 0 whole, -1 auto
  // (with_tiling, tiling.h: by the device budget when the weights are paged).
  int64_t vocab_tile = -1;
  // Memory-centric tiling of every layer's MLP into this many tiles per weight
  // (ModelConfig::mlp_tiles), 0 whole, -1 auto (with_tiling, tiling.h).
  int64_t mlp_tiles = -1;
  // With the optimizer on the CPU: where the fp32 gradient sums of a step live: one pinned buffer
  // per chunk (cpu), or NVMe extents accumulated through three pinned buffers (nvme: gradients
  // larger than RAM spill per chunk, the optimizer reads them back). Never device: with the
  // optimizer on the device the gradients stay there (DeviceGrads) whatever this says. The key
  // offload_grad sets it.
  Tier grad_home = Tier::cpu;
  // With the optimizer on the CPU: a step's update runs under the next step's forward, chunk c
  // just before the forward needs it (the same bits; Trainer::step says when weights are final).
  bool overlap_optimizer = false;
  double clip_grad_norm = 1.0;      // 0 = no clipping
  LrScheduleOptions lr_schedule;    // peak_lr, warmup, decay, total_steps (lr_schedule_steps or steps), ...

  // fp16 dynamic loss scaling (used only when dtype is f16).
  LossScalerOptions loss_scaler;

  // Where the working weights live (Offload I; the key offload_param): resident on the device
  // (device; the key's "none"), homed in pinned host memory (cpu) or in NVMe swap files under
  // nvme_path (nvme), paged through device slots.
  Tier weight_home = Tier::device;
  bool paged_weights() const { return weight_home != Tier::device; }
  uint32_t param_slots = 2;     // device slots for the transformer layers' weights (>= 2)
  // Paged weights: layers kept on the device for the whole run instead (model/plan/placement.h:
  // resident_chunk_mask); -1 = auto, as many as fit the device budget beside the working set
  // (resident_layers_for: `strata train` and `strata plan` resolve it before anything is allocated).
  int64_t resident_layers = -1;
  uint64_t prefetch_bytes = 0;  // bytes of upcoming chunks fetched ahead; 0 = derived from the slots
  uint32_t nvme_staging = 2;    // pinned staging buffers for NVMe-homed weights (>= 1)
  // NVMe-homed weights: the pinned read cache (TierManagerOptions::cache_chunks), in bytes, spent in
  // whole buffers of the size most chunks have (the layers'), then of the larger chunks', at most one
  // per paged chunk; 0 none; -1 = auto: what
  // --cpu-mem leaves beside the run's other pinned memory when --cpu-mem is given, else none
  // (param_cache_for, planner.h: `strata train` and `strata plan` resolve it). One rank only.
  int64_t param_cache = -1;
  std::string trace_path;       // Chrome trace-event JSON of the run's transfers and compute ("" = none)
  bool bench = false;           // print each step's breakdown and lower bound after the run (train_bench.h)

  // Evaluation (0 = never), logging, checkpoints. "" = not set.
  uint64_t eval_every = 50;
  uint64_t eval_batches = 8;
  uint64_t log_every = 0;  // full progress lines every this many steps; 0 = auto (model/train/train_progress.h)
  std::string metrics_path;
  // TensorBoard event files (model/train/tensorboard_writer.h): OUTPUT_PATH/JOB_NAME when enabled.
  bool tensorboard = false;
  std::string tensorboard_output_path;
  std::string tensorboard_job_name = "strata";
  std::string checkpoint_dir;
  uint64_t checkpoint_every = 0;  // 0 = only after the last step (when checkpoint_dir is set)
  uint64_t keep_checkpoints = 2;  // step-N/ directories kept in checkpoint_dir (model/ckpt/checkpoint_store.h)
  std::string resume_path;        // a run directory (its latest checkpoint) or one checkpoint directory

  // Non-finite numbers: a step whose gradients are Inf/NaN is skipped (no update); this many
  // skipped in a row stop the run with an error naming the step (0: never stop).
  uint64_t max_skipped_steps = 50;

  // Things worth telling the user that are not errors (e.g. fp16 keys set while dtype is bf16).
  // Returned, not logged: the caller logs each with spdlog::warn.
  std::vector<std::string> warnings;

  bool uses_builtin_corpus() const { return data.empty() && text.empty() && random_tokens == 0; }
  bool evaluates() const { return eval_every > 0 && (!val_data.empty() || val_fraction > 0.0); }
};

// Reads the train keys of `config` (its schema must have them: add_train_config_keys). Errors are
// invalid_argument naming each key involved and where its value came from:
//   data and text both given, or random_tokens with either; with text, a data_format other than
//   auto or text;
//   val_data and an explicit val_fraction > 0 both given; val_fraction of 0.5;
//   train_batch_size not micro_batch x grad_accum when all three are given, or, when one of those
//   two is not given, not a multiple of the other (the missing one is derived as the quotient);
//   warmup_steps > the schedule's steps (>= for cosine/linear decay: nothing left to decay over);
//   warmup_min_lr and warmup_min_ratio both given, or warmup_min_lr above lr;
//   a DeepSpeed scheduler (lr_schedule WarmupLR, WarmupDecayLR, WarmupCosineLR) with a key its
//   scheduler.params have no counterpart for (e.g. cos_min_ratio with WarmupDecayLR);
//   bf16_enabled and fp16_enabled both true, or either contradicting an explicit dtype;
//   loss_scale_min above the initial loss scale; checkpoint_every without checkpoint_dir;
//   param_slots below 2; offload_param nvme without an nvme_path (or a schema without that key);
//   offload_param cpu or nvme with optimizer_device device (that optimizer updates resident weights).
// The schedule spans lr_schedule_steps (DeepSpeed's total_num_steps) when given, else steps; when
// only lr_schedule_steps is given, steps follows it. Training may stop before the schedule ends or
// run on past it at the final rate. DeepSpeed schedulers keep DeepSpeed's defaults: log warmup,
// WarmupDecayLR decays to 0, WarmupCosineLR to cos_min_ratio 0.0001.
// Warnings: fp16 loss-scale keys set while dtype is not fp16; optimizer_type adam with weight decay
// from a config file (DeepSpeed's "Adam" decouples decay, as our adamw does); each group of ignored
// DeepSpeed settings of the file (Config::ignored_file_warnings); each unknown STRATA_* variable
// (Config::unknown_env_warnings); param_slots, prefetch_bytes, resident_layers or
// nvme_staging set while offload_param is none, and nvme_staging set while it is cpu (no effect).
StatusOr<TrainOptions> train_options_from_config(const Config& config);

// "none" (device), "cpu", "nvme": the value of the offload_param / offload_optimizer key (DeepSpeed's
// offload_*.device) that homes a state on `home`.
std::string_view offload_value(Tier home);

// The layout of the token file `path`: options.data_format when set, else by extension (".bin":
// llmc_bin, ".txt": text). Any other name with auto is invalid_argument asking for --data-format.
StatusOr<TokenFileKind> data_format_for(const TrainOptions& options, std::string_view path);

}  // namespace strata::model
