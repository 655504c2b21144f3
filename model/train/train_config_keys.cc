// Definitions of `strata train`'s config keys (see train_config_keys.h). The defaults make a run
// with no arguments train gpt2-tiny on the built-in corpus: 1000 steps of 16 x 64 byte tokens
// (1.02M tokens), about 30 s on 2 CPU cores, the loss falling from ~5.5 to ~2.4 (val ~2.35).
#include "model/train/train_config_keys.h"

#include <initializer_list>
#include <string>
#include <utility>

#include "model/net/model_config.h"

namespace strata::model {

void add_train_config_keys(ConfigSchema& schema) {
  constexpr double kMaxSteps = 1e12;
  // --- model and data ----------------------------------------------------------------------------
  schema.add({.name = "preset",
              .type = ValueType::text,
              .default_text = std::string(kDefaultTrainPreset),
              .help = "Model to train, by preset name (gpt2-tiny, gpt2-124m, llama-1b, ...; an unknown name lists them)"});
  schema.add({.name = "init_from",
              .type = ValueType::path,
              .help = "Start from a Hugging Face model: a directory (config.json + model.safetensors, or sharded "
                      "with model.safetensors.index.json) or one .safetensors file. Its config.json sets the "
                      "architecture and dimensions (gpt2, llama, mistral, qwen2); flags that contradict it are errors"});
  schema.add({.name = "arch",
              .type = ValueType::choice,
              .default_text = "preset",
              .help = "Model architecture over the preset's: gpt2 (LayerNorm, GELU, learned positions, tied head) "
                      "or llama (RMSNorm, SwiGLU, RoPE, GQA, untied head); preset: the preset's",
              .choices = {"preset", "gpt2", "llama"}});
  // Explicit dimensions: each replaces the preset's when above 0 (model_config.h: ModelOverrides),
  // up to its limit (kDimensionLimits).
  for (const auto& [name, help] : std::initializer_list<std::pair<const char*, const char*>>{
           {"n_layer", "Transformer layers (L) instead of the preset's; 0: the preset's"},
           {"dim", "Residual width (C) instead of the preset's (ffn_hidden follows unless given); 0: the preset's"},
           {"n_head", "Query heads (NH, dividing dim) instead of the preset's; 0: the preset's"},
           {"n_kv_head", "Key/value heads (NKV, dividing n_head; GPT-2: = n_head) instead of the preset's; 0: the "
                         "preset's"},
           {"ffn_hidden", "MLP width (H) instead of the preset's; 0: the preset's (or the one dim implies)"},
           {"vocab", "Vocabulary size (V) instead of the preset's; 0: the preset's"},
           {"max_seq", "Longest sequence (GPT-2: position rows) instead of the preset's; 0: the preset's"}}) {
    schema.add({.name = name, .type = ValueType::integer, .default_text = "0", .help = help, .min = 0,
                .max = double(dimension_limit(name))});
  }
  schema.add({.name = "data",
              .type = ValueType::path_list,
              .help = "Training token files (comma list; globs such as data/train_*.bin); neither this nor --text: "
                      "the built-in corpus"});
  schema.add({.name = "text",
              .type = ValueType::path,
              .help = "A plain text file to train on, one token per byte (instead of --data)"});
  schema.add({.name = "random_tokens",
              .type = ValueType::size,
              .default_text = "0",
              .help = "Train on this many uniformly random tokens (seeded by --seed; k/M/G count in 1024s) instead "
                      "of data, to measure throughput without a dataset, e.g. --random-tokens 16M; 0: off",
              .max = 1ull << 34});
  schema.add({.name = "data_format",
              .type = ValueType::choice,
              .default_text = "auto",
              .help = "Layout of the --data and --val-data files: llmc (llm.c .bin shards), u16 / u32 (bare token "
                      "arrays), text (bytes), auto (by extension: .bin is llmc, .txt is text)",
              .choices = {"auto", "llmc", "u16", "u32", "text"}});
  schema.add({.name = "val_data",
              .type = ValueType::path_list,
              .help = "Held-out token files for evaluation (comma list; globs); empty: hold out --val-fraction of "
                      "the training data"});
  // 5%: enough held-out tokens for a stable val loss on the built-in corpus (~19K tokens).
  schema.add({.name = "val_fraction",
              .type = ValueType::real,
              .default_text = "0.05",
              .help = "Fraction at the end of the training data held out for evaluation when --val-data is not "
                      "given (0: no evaluation); below 0.5",
              .min = 0.0,
              .max = 0.5});

  // --- batch shape -------------------------------------------------------------------------------
  schema.add({.name = "steps",
              .type = ValueType::integer,
              .default_text = "1000",  // gpt2-tiny on the built-in corpus: loss ~5.5 -> ~2.2 in ~30 s on 2 cores
              .help = "Optimizer steps to train for (the learning-rate schedule ends here unless "
                      "--lr-schedule-steps says otherwise; a config file's scheduler.params.total_num_steps is the "
                      "default then)",
              .min = 1,
              .max = kMaxSteps});
  schema.add({.name = "micro_batch",
              .type = ValueType::integer,
              .default_text = "16",
              .help = "Sequences per forward/backward pass (B)",
              .min = 1,
              .max = kMaxMicroBatch,
              .file_aliases = {"train_micro_batch_size_per_gpu"}});
  // 64: gpt2-tiny's context length.
  schema.add({.name = "seq",
              .type = ValueType::integer,
              .default_text = "64",
              .help = "Tokens per sequence (T); at most the model's context length",
              .min = 1,
              .max = 1 << 20});
  schema.add({.name = "grad_accum",
              .type = ValueType::integer,
              .default_text = "1",
              .help = "Micro-batches whose gradients are summed into one optimizer step, over all ranks (tokens per "
                      "step = B x T x this; under mpirun a multiple of the ranks, each running this / ranks)",
              .min = 1,
              .max = kMaxGradAccum,
              .file_aliases = {"gradient_accumulation_steps"}});
  // DeepSpeed's global batch: B x its per-GPU accumulation x world size = B x grad_accum.
  schema.add({.name = "train_batch_size",
              .type = ValueType::integer,
              .default_text = "auto",
              .help = "Sequences per optimizer step, DeepSpeed's train_batch_size: must equal micro_batch x grad_accum "
                      "(over all ranks); when one of those two is not given it is derived from the other (auto: B x K)",
              .min = 1,
              .max = 1LL << 32,
              .allow_auto = true});

  // --- precision ---------------------------------------------------------------------------------
  schema.add({.name = "dtype",
              .type = ValueType::choice,
              .default_text = "fp32",
              .help = "Precision of the weights, activations and gradients in compute (master weights stay fp32 "
                      "on the CPU); fp16 uses dynamic loss scaling",
              .choices = {"fp32", "bf16", "fp16"}});
  schema.add({.name = "bf16_enabled",
              .type = ValueType::boolean,
              .default_text = "false",
              .help = "DeepSpeed's bf16.enabled: true means --dtype bf16 (prefer --dtype)",
              .file_aliases = {"bf16.enabled"}});
  schema.add({.name = "fp16_enabled",
              .type = ValueType::boolean,
              .default_text = "false",
              .help = "DeepSpeed's fp16.enabled: true means --dtype fp16 (prefer --dtype)",
              .file_aliases = {"fp16.enabled"}});
  schema.add({.name = "tf32",
              .type = ValueType::boolean,
              .default_text = "false",
              .help = "Let fp32 matrix multiplies on the GPU use TF32 tensor cores (faster, ~3 fewer digits)"});
  schema.add({.name = "step_schedule",
              .type = ValueType::choice,
              .default_text = "auto",
              .help = "The order of a step's --grad-accum micro-batches: micro-batch-major (each one's forward and "
                      "backward in turn: paged weights are read 2K times a step), layer-major (each layer's forward "
                      "for all K, then each layer's backward for all K: paged weights cross about twice a step "
                      "whatever K; the same bits; needs --activation-checkpointing and K layer inputs of "
                      "device memory) or auto (layer-major when K > 1, the weights are paged, checkpointing is on "
                      "and it fits; the log says which and why)",
              .choices = {"auto", "micro-batch-major", "layer-major"}});
  schema.add({.name = "activation_checkpointing",
              .type = ValueType::boolean,
              .default_text = "false",
              .help = "Keep only each layer's input during forward and recompute the rest in backward (less "
                      "memory, ~1/3 more compute)"});

  // --- optimizer and schedule --------------------------------------------------------------------
  // Not named "optimizer": that JSON path is DeepSpeed's optimizer section (an object).
  schema.add({.name = "optimizer_type",
              .type = ValueType::choice,
              .default_text = "adamw",
              .help = "adamw (decoupled weight decay), adam (weight decay as L2 in the gradient) or adamw8bit "
                      "(adamw with 8-bit moment states: 1/4 of their memory)",
              .choices = {"adamw", "adam", "adamw8bit"},
              .file_aliases = {"optimizer.type"}});
  schema.add({.name = "optimizer_device",
              .type = ValueType::choice,
              .default_text = "cpu",
              .help = "Where the fp32 master weights and Adam states live and AdamW runs: cpu (pinned host memory, "
                      "the SIMD CPU kernels; the device holds only the working weights), device (beside the "
                      "weights, the backend's AdamW kernel: fastest when they fit) or split (paged "
                      "weights: the --resident-layers layers update on the device beside their weights, the paged "
                      "chunks on the CPU with their state where --offload-optimizer says; one rank)",
              .choices = {"cpu", "device", "split"}});
  schema.add({.name = "offload_optimizer",
              .type = ValueType::choice,
              .default_text = "cpu",
              .help = "Where the fp32 master weights and Adam states live: none (on the device, as --optimizer-device "
                      "device), cpu (pinned host memory) or nvme (swap files under --nvme-path, streamed through "
                      "--optimizer-staging buffers: read ahead, updated, written behind)",
              .choices = {"none", "cpu", "nvme"},
              .file_aliases = {"zero_optimization.offload_optimizer.device"}});
  schema.add({.name = "overlap_optimizer",
              .type = ValueType::boolean,
              .default_text = "true",
              .help = "With the optimizer on the CPU: run each step's AdamW under the next step's forward, chunk by "
                      "chunk just before the forward needs it (the same bits as after the backward; false: the whole "
                      "update runs between the steps)"});
  schema.add({.name = "zero_stage",
              .type = ValueType::integer,
              .default_text = "2",
              .help = "Across ranks (mpirun), what each rank homes 1/N of: 3 partitions the working weights too "
                      "(every chunk's shard on the rank's device, in its pinned memory or on NVMe as --offload-param "
                      "says, all-gathered one chunk ahead of the compute; needs the optimizer on the CPU); 0-2 "
                      "partition the gradient sums and the optimizer state (ZeRO-2; strata never replicates them, "
                      "which changes no bit). Ignored on one rank",
              .min = 0,
              .max = 3,
              .file_aliases = {"zero_optimization.stage"}});
  schema.add({.name = "offload_grad",
              .type = ValueType::choice,
              .default_text = "cpu",
              .help = "With the optimizer on the CPU: where the step's fp32 gradient sums live: cpu (pinned host memory, "
                      "4 bytes per parameter) or nvme (spilled per chunk to swap files under --nvme-path through three "
                      "pinned buffers, read back by the optimizer)",
              .choices = {"cpu", "nvme"}});
  // 4: DeepSpeed's default buffer_count; 3 is the least (read ahead | update | write behind).
  schema.add({.name = "optimizer_staging",
              .type = ValueType::integer,
              .default_text = "4",
              .help = "With --offload-optimizer nvme: pinned staging buffers (each the largest chunk's state) "
                      "between NVMe and the CPU optimizer, at least 3; more read further ahead (DeepSpeed's "
                      "offload_optimizer.buffer_count)",
              .min = 0,  // below 3 is train_options_from_config's error, which says why
              .max = 64,
              .file_aliases = {"zero_optimization.offload_optimizer.buffer_count"}});
  // 2^24: 201 MB per staging buffer with fp32 moments, large enough for the drive's full speed.
  schema.add({.name = "sub_group_size",
              .type = ValueType::integer,
              .default_text = "16777216",
              .help = "With the optimizer on the CPU: parameters per optimizer piece. A chunk's optimizer state "
                      "larger than this is read, updated and written in pieces of at most this many parameters, so "
                      "each --optimizer-staging buffer holds 12 bytes (fp32 moments) or 6 (8-bit) times this "
                      "(DeepSpeed's zero_optimization.sub_group_size)",
              .min = 256,
              .max = int64_t(1) << 40,
              .file_aliases = {"zero_optimization.sub_group_size"}});
  schema.add({.name = "vocab_tile",
              .type = ValueType::integer,
              .default_text = "auto",
              .help = "Memory-centric tiling: the token embedding and an untied head are cut into tiles of this many "
                      "vocabulary rows (a multiple of 1024), each its own chunk fetched, used and released in turn, "
                      "so the device holds about two tiles of a table; 0: whole tables; auto: when the weights are "
                      "paged and the untiled run does not fit --gpu-mem but a tiled one does, the fewest tiles that "
                      "fit (with --mlp-tiles auto: the fewest chunks in all). Same values and bits in fp32; auto on a "
                      "resume takes the checkpoint's tiles",
              .min = 0,
              .max = int64_t(1) << 31,
              .allow_auto = true});
  schema.add({.name = "mlp_tiles",
              .type = ValueType::integer,
              .default_text = "auto",
              .help = "Memory-centric tiling: every layer's MLP is cut into this many tiles per weight (the first "
                      "along its hidden units, the second along its output rows), each its own chunk fetched, used "
                      "and released in turn, so the device holds about two tiles of an MLP; 0 or 1: whole MLPs; "
                      "auto: when the weights are paged and the untiled run does not fit --gpu-mem but a tiled one "
                      "does, the fewest tiles that fit, at most 64 (with --vocab-tile auto: the fewest chunks in all). "
                      "The input gradients are then summed tile by tile (within fp32 rounding of untiled, not the "
                      "same bits); auto on a resume takes the checkpoint's tiles",
              .min = 0,
              .max = int64_t(1) << 20,
              .allow_auto = true});
  // 1e-3: gpt2-tiny learns the built-in corpus visibly within a few hundred steps at this rate.
  schema.add({.name = "lr",
              .type = ValueType::real,
              .default_text = "1e-3",
              .help = "Peak learning rate (reached at the end of warmup)",
              .min = 0.0,
              .max = 10.0,
              // A file that gives both must give the same value (config.h).
              .file_aliases = {"optimizer.params.lr", "scheduler.params.warmup_max_lr"}});
  schema.add({.name = "min_lr_fraction",
              .type = ValueType::real,
              .default_text = "0.1",
              .help = "The decay ends at this fraction of the peak learning rate (cosine, linear and WarmupCosineLR, "
                      "whose default is DeepSpeed's cos_min_ratio 0.0001)",
              .min = 0.0,
              .max = 1.0,
              .file_aliases = {"scheduler.params.cos_min_ratio"}});
  schema.add({.name = "warmup_steps",
              .type = ValueType::integer,
              .default_text = "auto",
              .help = "Steps of warmup to the peak learning rate (auto: 10% of the schedule's steps; DeepSpeed's "
                      "default of 1000 would swallow short runs)",
              .min = 0,
              .max = kMaxSteps,
              .allow_auto = true,
              .file_aliases = {"scheduler.params.warmup_num_steps"}});
  schema.add({.name = "lr_schedule",
              .type = ValueType::choice,
              .default_text = "cosine",
              .help = "Learning rate after warmup: cosine or linear decay to --min-lr-fraction, or constant; or "
                      "DeepSpeed's scheduler.type: WarmupLR (constant), WarmupDecayLR (linear to 0), WarmupCosineLR "
                      "(cosine to cos_min_ratio), each with DeepSpeed's defaults and parameters",
              .choices = {"cosine", "linear", "constant", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"},
              .file_aliases = {"scheduler.type"}});
  schema.add({.name = "lr_schedule_steps",
              .type = ValueType::integer,
              .default_text = "auto",
              .help = "Steps the learning-rate schedule spans, DeepSpeed's total_num_steps (auto: --steps); training "
                      "may stop before it ends, or run on at the final rate",
              .min = 1,
              .max = kMaxSteps,
              .allow_auto = true,
              .file_aliases = {"scheduler.params.total_num_steps"}});
  schema.add({.name = "warmup_type",
              .type = ValueType::choice,
              .default_text = "auto",
              .help = "Shape of the warmup: linear, or log (fast at first, then flattening); auto: log for the "
                      "DeepSpeed schedules (DeepSpeed's default), linear otherwise",
              .choices = {"auto", "linear", "log"},
              .file_aliases = {"scheduler.params.warmup_type"}});
  schema.add({.name = "warmup_min_lr",
              .type = ValueType::real,
              .default_text = "0",
              .help = "Learning rate the warmup starts from (DeepSpeed's WarmupLR/WarmupDecayLR warmup_min_lr)",
              .min = 0.0,
              .max = 10.0,
              .file_aliases = {"scheduler.params.warmup_min_lr"}});
  schema.add({.name = "warmup_min_ratio",
              .type = ValueType::real,
              .default_text = "0",
              .help = "Fraction of the peak learning rate the warmup starts from (DeepSpeed's WarmupCosineLR "
                      "warmup_min_ratio); give this or --warmup-min-lr",
              .min = 0.0,
              .max = 1.0,
              .file_aliases = {"scheduler.params.warmup_min_ratio"}});
  schema.add({.name = "beta1",
              .type = ValueType::real,
              .default_text = "0.9",
              .help = "Adam's decay rate of the gradient mean (first moment)",
              .min = 0.0,
              .max = 0.999999,
              .file_aliases = {"optimizer.params.beta1", "optimizer.params.betas[0]"}});
  // 0.95 (GPT-3, nanoGPT) rather than 0.999: steadier for transformers at high learning rates.
  schema.add({.name = "beta2",
              .type = ValueType::real,
              .default_text = "0.95",
              .help = "Adam's decay rate of the squared-gradient mean (second moment)",
              .min = 0.0,
              .max = 0.999999,
              .file_aliases = {"optimizer.params.beta2", "optimizer.params.betas[1]"}});
  schema.add({.name = "eps",
              .type = ValueType::real,
              .default_text = "1e-8",
              .help = "Adam's epsilon, added to the root of the second moment",
              .min = 1e-30,
              .max = 1.0,
              .file_aliases = {"optimizer.params.eps"}});
  schema.add({.name = "weight_decay",
              .type = ValueType::real,
              .default_text = "0.1",
              .help = "Weight decay per step, times the learning rate (0: none)",
              .min = 0.0,
              .max = 10.0,
              .file_aliases = {"optimizer.params.weight_decay"}});
  schema.add({.name = "clip_grad_norm",
              .type = ValueType::real,
              .default_text = "1.0",
              .help = "Scale the gradients down when their global L2 norm exceeds this (0: no clipping)",
              .min = 0.0,
              .file_aliases = {"gradient_clipping"}});

  // --- weight placement (Offload I: offload/tier_manager.h) ---------------------------------------
  // How the placement is chosen (model/plan/train_placement.h).
  schema.add({.name = "offload",
              .type = ValueType::choice,
              .default_text = "auto",
              .help = "How the placement (--offload-param, --offload-optimizer, --offload-grad, "
                      "--activation-checkpointing) is chosen: auto (when no placement is given and the default one "
                      "does not fit --gpu-mem / --cpu-mem / the --nvme-path space, the one `strata plan` picks; "
                      "given explicitly, always the planner's for the choices not given) or off (always the given "
                      "placement and the defaults, refused when it does not fit)",
              .choices = {"auto", "off"}});
  schema.add({.name = "offload_param",
              .type = ValueType::choice,
              .default_text = "none",
              .help = "Where the working weights live: none (resident on the device), cpu (homed in pinned host "
                      "memory) or nvme (in swap files under --nvme-path), paged through --param-slots device slots",
              .choices = {"none", "cpu", "nvme"},
              .file_aliases = {"zero_optimization.offload_param.device"}});
  // 2: one slot holds the layer being computed while the next layer is fetched into the other.
  schema.add({.name = "param_slots",
              .type = ValueType::integer,
              .default_text = "2",
              .help = "With paged weights: device slots for the transformer layers' weights, each one layer (at "
                      "least 2: one in use, one being fetched; more let the prefetch run further ahead)",
              .min = 0,  // below 2 is train_options_from_config's error, which says why
              .max = 1024});
  schema.add({.name = "resident_layers",
              .type = ValueType::integer,
              .default_text = "auto",
              .help = "With paged weights: this many transformer layers stay on the device for the whole run "
                      "(spread evenly over the depth; no PCIe or NVMe for them but their update's upload), the "
                      "others page; auto: as many as fit --gpu-mem beside the paged working set (what `strata "
                      "plan` shows); 0: every layer pages. Not with MLP tiles",
              .min = 0,
              .max = int64_t(1) << 20,
              .allow_auto = true});
  schema.add({.name = "prefetch_bytes",
              .type = ValueType::size,
              .default_text = "0",
              .help = "With paged weights: bytes of upcoming chunks fetched ahead of the compute, e.g. 512MiB "
                      "(always at least the next chunk); 0: what the free slots hold"});
  // 2: one staging buffer receives an NVMe read while the other is copied to the device.
  schema.add({.name = "nvme_staging",
              .type = ValueType::integer,
              .default_text = "2",
              .help = "With --offload-param nvme: pinned staging buffers (each the largest chunk) between NVMe and "
                      "the device; also the NVMe reads in flight (DeepSpeed's offload_param.buffer_count)",
              .min = 1,
              .max = 64,
              .file_aliases = {"zero_optimization.offload_param.buffer_count"}});
  schema.add({.name = "param_cache",
              .type = ValueType::size,
              .default_text = "auto",
              .help = "With --offload-param nvme: pinned RAM that keeps chunks of the weights read from (or "
                      "written to) NVMe, so a chunk still held is not read again, e.g. 8GiB (spent in buffers of "
                      "a layer's size, then of the larger chunks', at most one per chunk); auto: what --cpu-mem leaves beside the run's "
                      "other pinned memory, none without --cpu-mem; 0: none",
              .allow_auto = true});

  // --- evaluation, logging, checkpoints ----------------------------------------------------------
  schema.add({.name = "eval_every",
              .type = ValueType::integer,
              .default_text = "50",
              .help = "Evaluate on the held-out data every this many steps, and after the last (0: never)",
              .min = 0,
              .max = kMaxSteps});
  schema.add({.name = "eval_batches",
              .type = ValueType::integer,
              .default_text = "8",
              .help = "Micro-batches of held-out data per evaluation",
              .min = 1,
              .max = 1 << 20});
  schema.add({.name = "log_every",
              .type = ValueType::integer,
              .default_text = "auto",
              .help = "Print a full progress line every this many steps (auto: every step in a pipe or file; on a "
                      "terminal a live line redrawn every step and a full line every tenth of the run; the --metrics "
                      "file gets every step)",
              .min = 1,
              .max = kMaxSteps,
              .allow_auto = true,
              .file_aliases = {"steps_per_print"}});
  schema.add({.name = "metrics",
              .type = ValueType::path,
              .help = "Write one JSON object per step to this file (step, loss, lr, tokens_per_s, step_s, "
                      "peak_bytes, val_loss, ...)"});
  schema.add({.name = "tensorboard_enabled",
              .type = ValueType::boolean,
              .default_text = "false",
              .help = "Write TensorBoard event files of the run's scalars (loss, lr, held-out loss, tokens/s, norm, "
                      "peak memory) to --tensorboard-output-path/--tensorboard-job-name (DeepSpeed's tensorboard block)",
              .file_aliases = {"tensorboard.enabled"}});
  schema.add({.name = "tensorboard_output_path",
              .type = ValueType::path,
              .help = "The directory `tensorboard --logdir` is given; the event file goes into its job-name "
                      "subdirectory (empty: the working directory)",
              .file_aliases = {"tensorboard.output_path"}});
  schema.add({.name = "tensorboard_job_name",
              .type = ValueType::text,
              .default_text = "strata",
              .help = "The run's name in TensorBoard: the subdirectory of --tensorboard-output-path its events go to",
              .file_aliases = {"tensorboard.job_name"}});
  schema.add({.name = "trace",
              .type = ValueType::path,
              .help = "Write a Chrome trace-event JSON timeline of the run's transfers and compute to this file "
                      "(open it in ui.perfetto.dev); empty: none"});
  schema.add({.name = "bench",
              .type = ValueType::boolean,
              .default_text = "false",
              .help = "After the run, print each step's breakdown (compute, waits, optimizer, NVMe and PCIe bytes) "
                      "and its lower bound, max(compute, NVMe bytes / the disk bandwidth measured before training); "
                      "with --metrics also one bench JSON line at the end"});
  schema.add({.name = "checkpoint_dir",
              .type = ValueType::path,
              .help = "Directory for safetensors checkpoints (empty: none are written)"});
  schema.add({.name = "checkpoint_every",
              .type = ValueType::integer,
              .default_text = "0",
              .help = "Write a checkpoint every this many steps (0: only after the last step); needs "
                      "--checkpoint-dir",
              .min = 0,
              .max = kMaxSteps});
  schema.add({.name = "keep_checkpoints",
              .type = ValueType::integer,
              .default_text = "2",
              .help = "Checkpoints (step-N directories) kept in --checkpoint-dir; older ones are removed after each "
                      "save. 2 or more: a damaged newest one still leaves one to resume from",
              .min = 1,
              .max = 1000000});
  schema.add({.name = "resume",
              .type = ValueType::path,
              .help = "Continue from a checkpoint (its step, weights, optimizer state, data position): a "
                      "--checkpoint-dir (its latest complete checkpoint) or one of its step-N directories; the run "
                      "continues bit-identically"});
  // 50: fp16 runs skip a few steps while the loss scale settles; a NaN weight skips every step.
  schema.add({.name = "max_skipped_steps",
              .type = ValueType::integer,
              .default_text = "50",
              .help = "Stop the run (exit 1) when this many steps in a row were skipped for Inf/NaN gradients "
                      "(diverged weights or data); 0: never stop",
              .min = 0,
              .max = kMaxSteps});

  // --- fp16 loss scaling (used only with --dtype fp16) --------------------------------------------
  schema.add({.name = "loss_scale",
              .type = ValueType::real,
              .default_text = "0",
              .help = "fp16: 0 for dynamic loss scaling, or a fixed loss scale (> 0)",
              .min = 0.0,
              .max = 16777216.0,
              .file_aliases = {"fp16.loss_scale"}});
  // The scale is capped at 2^24 (model/train/loss_scaler.h), so the power is too.
  schema.add({.name = "loss_scale_initial_power",
              .type = ValueType::integer,
              .default_text = "16",
              .help = "fp16: the dynamic loss scale starts at 2 to this power",
              .min = 0,
              .max = 24,
              .file_aliases = {"fp16.initial_scale_power"}});
  schema.add({.name = "loss_scale_window",
              .type = ValueType::integer,
              .default_text = "1000",
              .help = "fp16: steps without overflow before the loss scale doubles",
              .min = 1,
              .max = 1e9,
              .file_aliases = {"fp16.loss_scale_window"}});
  schema.add({.name = "loss_scale_hysteresis",
              .type = ValueType::integer,
              .default_text = "2",
              .help = "fp16: overflowing steps tolerated before the loss scale halves (each is still skipped)",
              .min = 1,
              .max = 1000,
              .file_aliases = {"fp16.hysteresis"}});
  schema.add({.name = "loss_scale_consecutive_hysteresis",
              .type = ValueType::boolean,
              .default_text = "false",
              .help = "fp16: refill the hysteresis after every step without overflow, not only when the scale grows",
              .file_aliases = {"fp16.consecutive_hysteresis"}});
  schema.add({.name = "loss_scale_min",
              .type = ValueType::real,
              .default_text = "1",
              .help = "fp16: the dynamic loss scale never halves below this",
              .min = 1e-30,
              .max = 16777216.0,
              .file_aliases = {"fp16.min_loss_scale"}});
  // DeepSpeed fixes these at 2 and 0.5 (no config keys there); PyTorch's GradScaler exposes them.
  schema.add({.name = "loss_scale_growth",
              .type = ValueType::real,
              .default_text = "2",
              .help = "fp16: the dynamic loss scale is multiplied by this after loss_scale_window good steps",
              .min = 1.0001,
              .max = 1024});
  schema.add({.name = "loss_scale_backoff",
              .type = ValueType::real,
              .default_text = "0.5",
              .help = "fp16: the dynamic loss scale is multiplied by this on an overflow (after the hysteresis)",
              .min = 1e-6,
              .max = 0.9999});

  add_ignored_deepspeed_paths(schema);
}

}  // namespace strata::model
