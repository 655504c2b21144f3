// Reading the train keys into TrainOptions, with the cross-key checks (see train_options.h).
#include "model/train/train_options.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include <fmt/format.h>

namespace strata::model {
namespace {

bool is_set(const Config& config, std::string_view key) {
  return config.source(key) != ConfigSource::default_value;
}

// "warmup_steps 300 (flag --warmup-steps)": a key, its value and where the value came from.
// nvme_path is an offload key: absent from a schema without them.
bool has_nvme_path(const Config& config) {
  return config.schema().find("nvme_path") != nullptr && !config.get_list("nvme_path").empty();
}

std::string describe(const Config& config, std::string_view key) {
  return fmt::format("{} {} ({})", key, config.text(key), config.describe_source(key));
}

uint64_t get_count(const Config& config, std::string_view key) {
  return static_cast<uint64_t>(config.get_int(key));  // ranges keep these >= 0
}

// `derived` (micro_batch or grad_accum, not given) = train_batch_size / `given` (the other one).
StatusOr<uint64_t> derive_from_train_batch(const Config& config, uint64_t train_batch, std::string_view given,
                                           std::string_view derived) {
  const uint64_t divisor = get_count(config, given);
  if (train_batch % divisor != 0)
    return error(Code::invalid_argument,
                 "{} is not a multiple of {}, so {} (not given, {} now) cannot be derived as their quotient; give a "
                 "train_batch_size that {} divides, or give {} as well",
                 describe(config, "train_batch_size"), describe(config, given), derived, config.text(derived), given,
                 derived);
  const uint64_t value = train_batch / divisor;
  const double max = config.schema().find(derived)->max;
  if (static_cast<double>(value) > max)
    return error(Code::invalid_argument, "{} / {} gives {} {}, above its maximum {}; give {} as well",
                 describe(config, "train_batch_size"), describe(config, given), derived, value, max, derived);
  return value;
}

// micro_batch and grad_accum, reconciled with DeepSpeed's train_batch_size (= B x its per-GPU
// accumulation x world size, which is B x K with strata's K, the step's micro-batches over all
// ranks): the one of B and K that is not given is derived, and when both are given the three must
// agree.
Status read_batch(const Config& config, TrainOptions& o) {
  o.micro_batch = get_count(config, "micro_batch");
  o.grad_accum = get_count(config, "grad_accum");
  const std::optional<int64_t> total = config.get_int_or_auto("train_batch_size");
  if (!total) return Status::ok();
  const auto train_batch = static_cast<uint64_t>(*total);
  if (!is_set(config, "grad_accum")) {
    STRATA_ASSIGN_OR_RETURN(o.grad_accum, derive_from_train_batch(config, train_batch, "micro_batch", "grad_accum"));
  } else if (!is_set(config, "micro_batch")) {
    STRATA_ASSIGN_OR_RETURN(o.micro_batch, derive_from_train_batch(config, train_batch, "grad_accum", "micro_batch"));
  } else if (o.micro_batch * o.grad_accum != train_batch) {
    return error(Code::invalid_argument,
                 "{} is not {} x {} = {}: train_batch_size (sequences per step) must equal micro_batch x "
                 "grad_accum, the step's micro-batches over all ranks (DeepSpeed's train_micro_batch_size_per_gpu "
                 "x gradient_accumulation_steps x world size); fix one of the three or drop train_batch_size",
                 describe(config, "train_batch_size"), describe(config, "micro_batch"), describe(config, "grad_accum"),
                 o.micro_batch * o.grad_accum);
  }
  return Status::ok();
}

void read_model_overrides(const Config& config, TrainOptions& o) {
  const std::string& arch = config.get_text("arch");
  if (arch != "preset") o.model.arch = arch == "llama" ? Arch::llama : Arch::gpt2;
  o.model.n_layer = config.get_int("n_layer");
  o.model.dim = config.get_int("dim");
  o.model.n_head = config.get_int("n_head");
  o.model.n_kv_head = config.get_int("n_kv_head");
  o.model.ffn_hidden = config.get_int("ffn_hidden");
  o.model.vocab = config.get_int("vocab");
  o.model.max_seq = config.get_int("max_seq");
}

Status read_data(const Config& config, TrainOptions& o) {
  o.data = config.get_list("data");
  o.text = config.get_text("text");
  if (!o.data.empty() && !o.text.empty())
    return error(Code::invalid_argument,
                 "{} and {} are both given; train on token files (--data) or on a text file (--text), not both",
                 describe(config, "data"), describe(config, "text"));
  o.random_tokens = config.get_size("random_tokens");
  if (o.random_tokens > 0 && (!o.data.empty() || !o.text.empty()))
    return error(Code::invalid_argument, "{} replaces the data, but {} is given too; pass one of them",
                 describe(config, "random_tokens"), describe(config, o.text.empty() ? "data" : "text"));
  const std::string& format = config.get_text("data_format");
  if (format != "auto") {
    STRATA_ASSIGN_OR_RETURN(o.data_format, parse_token_file_kind(format));
    if (!o.text.empty() && o.data_format != TokenFileKind::text)
      return error(Code::invalid_argument,
                   "{} does not apply to {}: a --text file is always read as bytes; drop --data-format or pass "
                   "the tokens with --data",
                   describe(config, "data_format"), describe(config, "text"));
  }
  o.val_data = config.get_list("val_data");
  o.val_fraction = config.get_real("val_fraction");
  if (!o.val_data.empty()) {
    if (is_set(config, "val_fraction") && o.val_fraction > 0.0)
      return error(Code::invalid_argument,
                   "{} and {} are both given; evaluate on the --val-data files or on a held-out fraction, not both",
                   describe(config, "val_data"), describe(config, "val_fraction"));
    o.val_fraction = 0.0;
  }
  if (o.val_fraction >= 0.5)
    return error(Code::invalid_argument,
                 "{} would hold out half the data or more; use a fraction below 0.5 (e.g. 0.05)",
                 describe(config, "val_fraction"));
  return Status::ok();
}

// dtype, reconciled with DeepSpeed's bf16.enabled / fp16.enabled.
Status read_dtype(const Config& config, TrainOptions& o) {
  const bool bf16 = config.get_bool("bf16_enabled");
  const bool fp16 = config.get_bool("fp16_enabled");
  if (bf16 && fp16)
    return error(Code::invalid_argument, "{} and {} are both true; enable one precision (or pass --dtype)",
                 describe(config, "bf16_enabled"), describe(config, "fp16_enabled"));
  std::string dtype = config.get_text("dtype");
  if (bf16 || fp16) {
    const std::string_view wanted = bf16 ? "bf16" : "fp16";
    const std::string_view flag_key = bf16 ? "bf16_enabled" : "fp16_enabled";
    if (is_set(config, "dtype") && dtype != wanted)
      return error(Code::invalid_argument, "{} contradicts {}; keep one of them", describe(config, "dtype"),
                   describe(config, flag_key));
    dtype = wanted;
  }
  STRATA_ASSIGN_OR_RETURN(o.dtype, parse_dtype(dtype));
  return Status::ok();
}

Status read_optimizer(const Config& config, TrainOptions& o) {
  o.optimizer = config.get_text("optimizer_type");
  o.adam_hyper.mode = o.optimizer == "adam" ? kernels::AdamMode::adam : kernels::AdamMode::adamw;
  o.adam_states = o.optimizer == "adamw8bit" ? AdamStates::q8 : AdamStates::f32;
  // offload_optimizer (DeepSpeed's offload_optimizer.device) and optimizer_device say the same
  // thing two ways: explicit values must agree.
  const std::string& offload = config.get_text("offload_optimizer");
  const bool device_set = is_set(config, "optimizer_device"), offload_set = is_set(config, "offload_optimizer");
  const bool on_device = config.get_text("optimizer_device") == "device";
  o.split_update = config.get_text("optimizer_device") == "split";
  if (o.split_update && offload == "none")
    return error(Code::invalid_argument,
                 "{} keeps the paged chunks' optimizer state on the host, but {} puts it on the device; pass "
                 "--offload-optimizer cpu or nvme (where the CPU part's state lives), or --optimizer-device device",
                 describe(config, "optimizer_device"), describe(config, "offload_optimizer"));
  if (device_set && offload_set && !o.split_update && on_device != (offload == "none"))
    return error(Code::invalid_argument,
                 "{} and {} disagree: offload_optimizer none is the optimizer on the device, cpu or nvme on the CPU; "
                 "pass one of them",
                 describe(config, "optimizer_device"), describe(config, "offload_optimizer"));
  o.optimizer_home = (device_set && !o.split_update ? on_device : offload == "none") ? Tier::device
                     : offload == "nvme"                         ? Tier::nvme
                                                                 : Tier::cpu;
  o.optimizer_staging = static_cast<uint32_t>(config.get_int("optimizer_staging"));
  o.sub_group_size = static_cast<uint64_t>(config.get_int("sub_group_size"));
  o.zero_stage = int(config.get_int("zero_stage"));
  const std::optional<int64_t> vocab_tile = config.get_int_or_auto("vocab_tile");
  o.vocab_tile = vocab_tile ? *vocab_tile : -1;
  if (o.vocab_tile > 0 && o.vocab_tile % kVocabTileBlock != 0)
    return error(Code::invalid_argument, "{}: a tile is a whole number of {}-row blocks; pass a multiple of {}, 0 "
                 "(whole tables) or auto", describe(config, "vocab_tile"), kVocabTileBlock, kVocabTileBlock);
  const std::optional<int64_t> mlp_tiles = config.get_int_or_auto("mlp_tiles");
  o.mlp_tiles = mlp_tiles ? *mlp_tiles : -1;
  if (o.optimizer_home == Tier::nvme) {
    if (o.optimizer_staging < 3)
      return error(Code::invalid_argument,
                   "{}: the optimizer state on NVMe needs at least 3 staging buffers: one read ahead, one updated, "
                   "one written behind; pass --optimizer-staging 3 or more",
                   describe(config, "optimizer_staging"));
    if (!has_nvme_path(config))
      return error(Code::invalid_argument,
                   "{} homes the optimizer state in NVMe swap files, but no nvme_path is given; pass --nvme-path DIR "
                   "or set zero_optimization.offload_optimizer.nvme_path",
                   describe(config, "offload_optimizer"));
  } else if (is_set(config, "optimizer_staging")) {
    o.warnings.push_back(fmt::format("{} only applies to optimizer state homed on NVMe and is ignored with {}",
                                     describe(config, "optimizer_staging"), describe(config, "offload_optimizer")));
  }
  o.overlap_optimizer = config.get_bool("overlap_optimizer");
  o.grad_home = config.get_text("offload_grad") == "nvme" ? Tier::nvme : Tier::cpu;
  if (o.grad_home == Tier::nvme) {
    if (o.optimizer_home == Tier::device)
      return error(Code::invalid_argument,
                   "{} spills the gradients the CPU optimizer reads, but the optimizer runs on the device ({}); pass "
                   "--optimizer-device cpu or --offload-grad cpu",
                   describe(config, "offload_grad"), describe(config, "optimizer_device"));
    if (!has_nvme_path(config))
      return error(Code::invalid_argument,
                   "{} spills the gradients to NVMe swap files, but no nvme_path is given; pass --nvme-path DIR",
                   describe(config, "offload_grad"));
  }
  const double lr = config.get_real("lr");
  if (!(lr > 0.0))
    return error(Code::invalid_argument, "{}: the learning rate must be above 0 (e.g. 6e-4)", describe(config, "lr"));
  o.adam_hyper.lr = static_cast<float>(lr);
  o.adam_hyper.beta1 = static_cast<float>(config.get_real("beta1"));
  o.adam_hyper.beta2 = static_cast<float>(config.get_real("beta2"));
  o.adam_hyper.eps = static_cast<float>(config.get_real("eps"));
  o.adam_hyper.weight_decay = static_cast<float>(config.get_real("weight_decay"));
  o.clip_grad_norm = config.get_real("clip_grad_norm");
  if (o.optimizer == "adam" && o.adam_hyper.weight_decay > 0.0f && config.source("optimizer_type") == ConfigSource::file)
    o.warnings.push_back(fmt::format(
        "{}: adam adds weight_decay {} to the gradient (L2); DeepSpeed's \"Adam\" decouples it by default "
        "(adam_w_mode), which is optimizer_type adamw here",
        describe(config, "optimizer_type"), config.text("weight_decay")));
  return Status::ok();
}

// Where the working weights live (offload_param) and how they are paged, with the checks that
// involve nvme_path (an offload key: absent from a schema without them) and optimizer_device.
Status read_weight_placement(const Config& config, TrainOptions& o) {
  const std::string& home = config.get_text("offload_param");
  o.weight_home = home == "nvme" ? Tier::nvme : home == "cpu" ? Tier::cpu : Tier::device;
  o.param_slots = static_cast<uint32_t>(config.get_int("param_slots"));
  o.resident_layers = config.get_int_or_auto("resident_layers").value_or(-1);
  o.prefetch_bytes = config.get_size("prefetch_bytes");
  o.nvme_staging = static_cast<uint32_t>(config.get_int("nvme_staging"));
  if (const std::optional<uint64_t> cache = config.get_size_or_auto("param_cache"))
    o.param_cache = int64_t(std::min<uint64_t>(*cache, uint64_t(INT64_MAX)));
  o.trace_path = config.get_text("trace");
  if (o.param_slots < 2)
    return error(Code::invalid_argument,
                 "{}: paged weights need at least two slots: one in use, one being fetched; pass --param-slots 2 or "
                 "more",
                 describe(config, "param_slots"));

  if (o.weight_home == Tier::device && o.split_update)
    return error(Code::invalid_argument,
                 "{} updates the resident layers of paged weights on the device and the paged ones on the CPU, but "
                 "{} keeps every layer resident; pass --optimizer-device device (the whole update on the device) or "
                 "--offload-param cpu|nvme",
                 describe(config, "optimizer_device"), describe(config, "offload_param"));
  if (o.weight_home == Tier::device) {
    std::string set_keys;
    for (std::string_view key : {"param_slots", "prefetch_bytes", "nvme_staging", "param_cache", "resident_layers"})
      if (is_set(config, key)) set_keys += (set_keys.empty() ? "" : ", ") + describe(config, key);
    if (!set_keys.empty())
      o.warnings.push_back(fmt::format("{} only apply to paged weights (offload_param cpu or nvme) and are ignored "
                                       "with {}: the weights stay resident on the device",
                                       set_keys, describe(config, "offload_param")));
    return Status::ok();
  }
  if (o.optimizer_home == Tier::device)
    return error(Code::invalid_argument,
                 "{} pages the working weights, but {} cannot run with them: the optimizer on the device updates "
                 "resident weights; pass --optimizer-device cpu (or --offload-param none)",
                 describe(config, "offload_param"), describe(config, "optimizer_device"));
  if (o.weight_home == Tier::nvme) {
    if (!has_nvme_path(config))
      return error(Code::invalid_argument,
                   "{} homes the working weights in NVMe swap files, but no nvme_path is given; pass --nvme-path DIR "
                   "or set zero_optimization.offload_param.nvme_path",
                   describe(config, "offload_param"));
  } else {
    for (std::string_view key : {"nvme_staging", "param_cache"})
      if (is_set(config, key))
        o.warnings.push_back(fmt::format("{} only applies to weights homed on NVMe and is ignored with {}",
                                         describe(config, key), describe(config, "offload_param")));
  }
  return Status::ok();
}

// DeepSpeed's learning-rate schedulers (lr_schedule's other choices) and the strata keys that
// their scheduler.params have no counterpart for: DeepSpeed refuses unknown params, so do we.
struct DeepSpeedScheduler {
  std::string_view name;
  LrDecay decay;
  std::string_view params;  // what DeepSpeed's scheduler takes, for the message
  std::vector<std::pair<std::string_view, std::string_view>> not_taken;  // (strata key, DeepSpeed name)
};

const DeepSpeedScheduler* find_deepspeed_scheduler(std::string_view name) {
  static const DeepSpeedScheduler kSchedulers[] = {
      {"WarmupLR", LrDecay::constant, "warmup_min_lr, warmup_max_lr, warmup_num_steps and warmup_type",
       {{"lr_schedule_steps", "total_num_steps"}, {"min_lr_fraction", "cos_min_ratio"},
        {"warmup_min_ratio", "warmup_min_ratio"}}},
      {"WarmupDecayLR", LrDecay::linear,
       "total_num_steps, warmup_min_lr, warmup_max_lr, warmup_num_steps and warmup_type (it decays to 0)",
       {{"min_lr_fraction", "cos_min_ratio"}, {"warmup_min_ratio", "warmup_min_ratio"}}},
      {"WarmupCosineLR", LrDecay::cosine,
       "total_num_steps, warmup_min_ratio, warmup_num_steps, cos_min_ratio and warmup_type (the peak is "
       "optimizer.params.lr)",
       {{"warmup_min_lr", "warmup_min_lr"}}},
  };
  for (const DeepSpeedScheduler& d : kSchedulers)
    if (d.name == name) return &d;
  return nullptr;
}

// DeepSpeed's WarmupCosineLR default cos_min_ratio.
constexpr double kDeepSpeedCosMinRatio = 1e-4;

// The learning-rate schedule: strata's (cosine, linear, constant) or one of DeepSpeed's, with its
// defaults (log warmup; WarmupDecayLR ends at 0; WarmupCosineLR at cos_min_ratio 0.0001).
Status read_schedule(const Config& config, TrainOptions& o) {
  LrScheduleOptions& s = o.lr_schedule;
  s.peak_lr = config.get_real("lr");  // read_optimizer checked it is above 0
  const std::string& name = config.get_text("lr_schedule");
  const DeepSpeedScheduler* deepspeed = find_deepspeed_scheduler(name);
  s.final_fraction = config.get_real("min_lr_fraction");
  if (deepspeed != nullptr) {
    for (const auto& [key, param] : deepspeed->not_taken)
      if (is_set(config, key))
        return error(Code::invalid_argument,
                     "{} (DeepSpeed's {}) does not apply to {}: DeepSpeed's {} takes {}; drop it, or pick "
                     "--lr-schedule cosine, linear or constant",
                     describe(config, key), param, describe(config, "lr_schedule"), name, deepspeed->params);
    s.decay = deepspeed->decay;
    if (deepspeed->decay == LrDecay::linear) s.final_fraction = 0.0;
    if (deepspeed->decay == LrDecay::cosine && !is_set(config, "min_lr_fraction"))
      s.final_fraction = kDeepSpeedCosMinRatio;
  } else {
    STRATA_ASSIGN_OR_RETURN(s.decay, parse_lr_decay(name));
  }
  const std::string& warmup_type = config.get_text("warmup_type");
  const std::string_view auto_warmup = deepspeed != nullptr ? "log" : "linear";  // DeepSpeed's default is log
  STRATA_ASSIGN_OR_RETURN(s.warmup, parse_lr_warmup(warmup_type == "auto" ? auto_warmup : warmup_type));

  if (is_set(config, "warmup_min_lr") && is_set(config, "warmup_min_ratio"))
    return error(Code::invalid_argument,
                 "{} and {} both say where the warmup starts; give the rate or the fraction of the peak, not both",
                 describe(config, "warmup_min_lr"), describe(config, "warmup_min_ratio"));
  s.warmup_start_fraction = config.get_real("warmup_min_ratio");
  if (is_set(config, "warmup_min_lr")) {
    const double min_lr = config.get_real("warmup_min_lr");
    if (min_lr > s.peak_lr)
      return error(Code::invalid_argument, "{} is above the peak {}; the warmup would go down: lower it",
                   describe(config, "warmup_min_lr"), describe(config, "lr"));
    s.warmup_start_fraction = min_lr / s.peak_lr;
  }

  // The schedule may span more (or fewer) steps than the run: DeepSpeed's total_num_steps.
  const std::optional<int64_t> schedule_steps = config.get_int_or_auto("lr_schedule_steps");
  s.total_steps = schedule_steps ? static_cast<uint64_t>(*schedule_steps) : o.steps;
  const std::string_view total_key = schedule_steps ? "lr_schedule_steps" : "steps";
  const std::optional<int64_t> warmup = config.get_int_or_auto("warmup_steps");
  s.warmup_steps = warmup ? static_cast<uint64_t>(*warmup) : s.total_steps / 10;
  if (s.warmup_steps > s.total_steps)
    return error(Code::invalid_argument, "{} is more than {}; shorten the warmup or lengthen the schedule",
                 describe(config, "warmup_steps"), describe(config, total_key));
  if (s.decay != LrDecay::constant && s.warmup_steps == s.total_steps)
    return error(Code::invalid_argument,
                 "{} equals {}, which leaves no steps for the {} decay; shorten the warmup, lengthen the schedule or "
                 "pass --lr-schedule constant",
                 describe(config, "warmup_steps"), describe(config, total_key), lr_decay_name(s.decay));
  STRATA_RETURN_IF_ERROR(LrSchedule::create(s).status().with_context("learning-rate schedule"));
  return Status::ok();
}

Status read_loss_scaling(const Config& config, TrainOptions& o) {
  static constexpr std::string_view kFp16Keys[] = {"loss_scale", "loss_scale_initial_power",
                                                   "loss_scale_window", "loss_scale_hysteresis",
                                                   "loss_scale_min", "loss_scale_consecutive_hysteresis",
                                                   "loss_scale_growth", "loss_scale_backoff"};
  LossScalerOptions& l = o.loss_scaler;
  const double fixed = config.get_real("loss_scale");
  l.dynamic = fixed == 0.0;
  l.initial_scale = l.dynamic ? std::ldexp(1.0, static_cast<int>(config.get_int("loss_scale_initial_power"))) : fixed;
  l.growth_interval = get_count(config, "loss_scale_window");
  l.hysteresis = static_cast<uint32_t>(config.get_int("loss_scale_hysteresis"));
  l.consecutive_hysteresis = config.get_bool("loss_scale_consecutive_hysteresis");
  l.min_scale = config.get_real("loss_scale_min");
  l.growth_factor = config.get_real("loss_scale_growth");
  l.backoff_factor = config.get_real("loss_scale_backoff");

  if (o.dtype != DType::f16) {
    std::string set_keys;
    for (std::string_view key : kFp16Keys)
      if (is_set(config, key)) set_keys += (set_keys.empty() ? "" : ", ") + describe(config, key);
    if (!set_keys.empty())
      o.warnings.push_back(fmt::format("{} only apply to fp16 training and are ignored with {}", set_keys,
                                       describe(config, "dtype")));
    return Status::ok();
  }
  if (!l.dynamic) {
    l.min_scale = std::min(l.min_scale, l.initial_scale);  // a fixed scale never backs off
  } else if (l.min_scale > l.initial_scale) {
    return error(Code::invalid_argument, "{} is above the initial loss scale 2^{} = {} ({}); lower one of them",
                 describe(config, "loss_scale_min"), config.text("loss_scale_initial_power"), l.initial_scale,
                 config.describe_source("loss_scale_initial_power"));
  }
  STRATA_RETURN_IF_ERROR(LossScaler::create(l).status().with_context("fp16 loss scaling"));
  return Status::ok();
}

}  // namespace

StatusOr<TrainOptions> train_options_from_config(const Config& config) {
  TrainOptions o;
  o.preset = config.get_text("preset");
  o.init_from = config.get_text("init_from");
  read_model_overrides(config, o);
  STRATA_RETURN_IF_ERROR(read_data(config, o));
  // A DeepSpeed file gives the schedule's length (total_num_steps) but not the run's: then the run
  // is as long as the schedule.
  const bool steps_from_schedule = !is_set(config, "steps") && config.get_int_or_auto("lr_schedule_steps");
  o.steps = get_count(config, steps_from_schedule ? "lr_schedule_steps" : "steps");
  o.seq = get_count(config, "seq");
  STRATA_RETURN_IF_ERROR(read_batch(config, o));
  STRATA_RETURN_IF_ERROR(read_dtype(config, o));
  o.tf32 = config.get_bool("tf32");
  o.activation_checkpointing = config.get_bool("activation_checkpointing");
  const std::string schedule = config.get_text("step_schedule");
  o.step_schedule = schedule == "layer-major"         ? StepSchedule::layer_major
                    : schedule == "micro-batch-major" ? StepSchedule::micro_batch_major
                                                      : StepSchedule::automatic;
  if (o.step_schedule == StepSchedule::layer_major && !o.activation_checkpointing)
    return error(Code::invalid_argument,
                 "{} keeps each layer's input for every micro-batch of the step and recomputes the layer in the "
                 "backward, so it needs activation checkpointing: pass --activation-checkpointing, or "
                 "--step-schedule auto",
                 describe(config, "step_schedule"));
  STRATA_RETURN_IF_ERROR(read_optimizer(config, o));
  STRATA_RETURN_IF_ERROR(read_weight_placement(config, o));
  STRATA_RETURN_IF_ERROR(read_schedule(config, o));
  STRATA_RETURN_IF_ERROR(read_loss_scaling(config, o));

  o.eval_every = get_count(config, "eval_every");
  o.eval_batches = get_count(config, "eval_batches");
  o.log_every = static_cast<uint64_t>(config.get_int_or_auto("log_every").value_or(0));
  o.metrics_path = config.get_text("metrics");
  o.tensorboard = config.get_bool("tensorboard_enabled");
  o.tensorboard_output_path = config.get_text("tensorboard_output_path");
  o.tensorboard_job_name = config.get_text("tensorboard_job_name");
  if (o.tensorboard && o.tensorboard_job_name.empty())
    return error(Code::invalid_argument,
                 "{} is empty: TensorBoard shows a run by its job name (the event directory's name); pass a name",
                 describe(config, "tensorboard_job_name"));
  o.bench = config.get_bool("bench");
  o.checkpoint_dir = config.get_text("checkpoint_dir");
  o.checkpoint_every = get_count(config, "checkpoint_every");
  o.resume_path = config.get_text("resume");
  o.keep_checkpoints = get_count(config, "keep_checkpoints");
  o.max_skipped_steps = get_count(config, "max_skipped_steps");
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty())
    return error(Code::invalid_argument, "{} needs a directory to write to; pass --checkpoint-dir",
                 describe(config, "checkpoint_every"));
  for (std::string& w : config.ignored_file_warnings()) o.warnings.push_back(std::move(w));
  for (const std::string& w : config.unknown_env_warnings()) o.warnings.push_back(w);
  return o;
}

std::string_view step_schedule_name(StepSchedule s) {
  switch (s) {
    case StepSchedule::micro_batch_major: return "micro-batch-major";
    case StepSchedule::layer_major: return "layer-major";
    case StepSchedule::automatic: break;
  }
  return "auto";
}

std::string_view offload_value(Tier home) {
  switch (home) {
    case Tier::device: return "none";
    case Tier::cpu: return "cpu";
    case Tier::nvme: return "nvme";
  }
  return "?";
}

StatusOr<TokenFileKind> data_format_for(const TrainOptions& options, std::string_view path) {
  if (options.data_format) return *options.data_format;
  if (path.ends_with(".bin")) return TokenFileKind::llmc_bin;
  if (path.ends_with(".txt")) return TokenFileKind::text;
  return error(Code::invalid_argument,
               "cannot tell the layout of token file {} from its name (auto knows .bin = llm.c shards and .txt = "
               "text); pass --data-format llmc, u16, u32 or text",
               path);
}

}  // namespace strata::model
