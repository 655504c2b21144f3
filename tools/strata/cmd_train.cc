// `strata train [config flags]`: trains a model preset on token files, a text file or (with no
// arguments) the built-in corpus (model/train/trainer.h) in fp32, bf16 or fp16 with fp32 masters and
// fp32 or 8-bit AdamW moments, updated on the CPU or on the device: on a terminal one live
// progress line and a summary line every tenth of the run, in a pipe a line per log_every steps
// (model/train/train_progress.h); the validation loss every eval_every steps, the --metrics JSONL file,
// TensorBoard event files (--tensorboard-enabled) and an end-of-run summary. Every train key is a
// flag, a STRATA_* variable or a config-file key (ConfigFlags). Exit 2 for bad flags, config or data arguments; 1 when the run itself fails.
// --checkpoint-dir keeps rotated step-N/ checkpoints (model/ckpt/checkpoint_store.h) written every
// checkpoint_every steps, after the last and on SIGINT/SIGTERM (train_signals.h); --resume DIR
// continues such a run bit-identically. Paths and disk room are checked before any work
// (train_preflight.h). --offload-param cpu|nvme homes the working weights in pinned memory or on
// NVMe and pages them through a few device slots (train_offload.h); with no placement given and a
// run that does not fit, or with --offload auto, the planner chooses it (train_placement.h), and
// the end of every run compares the planner's prediction with what it measured; --trace writes a
// Chrome trace; --bench prints each step's breakdown and lower bound after the run (train_bench.h).
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include "model/data/batch_loader.h"
#include "model/data/builtin_corpus.h"
#include "model/ckpt/checkpoint.h"
#include "model/ckpt/checkpoint_store.h"
#include "model/hf/hf_config.h"
#include "model/hf/hf_weights.h"
#include "model/train/metrics_log.h"
#include "model/net/model_config.h"
#include "model/plan/placement.h"
#include "model/train/tensorboard_writer.h"
#include "model/data/token_dataset.h"
#include "model/train/train_options.h"
#include "model/train/train_progress.h"
#include "model/train/trainer.h"
#include "model/net/transformer.h"
#include "runtime/backend.h"
#include "runtime/dir_lock.h"
#include "runtime/log.h"
#include "runtime/pinned_pool.h"
#include "runtime/splitmix64.h"
#include "runtime/status_line.h"
#include "runtime/thread_pool.h"
#include "tools/strata/command.h"
#include "tools/strata/config_flags.h"
#include "tools/strata/plan_machine.h"
#include "tools/strata/schema.h"
#include "tools/strata/train_bench.h"
#include "tools/strata/train_device_rates.h"
#include "tools/strata/train_offload.h"
#include "tools/strata/train_placement.h"
#include "tools/strata/train_preflight.h"
#include "tools/strata/train_signals.h"

namespace strata::cli {
namespace {

using model::TokenDataset;
using model::TrainOptions;

// A setup error the user fixes with other flags or files (exit 2), or a run-time failure (exit 1).
int exit_code_for(const Status& s) {
  switch (s.code()) {
    case Code::invalid_argument:
    case Code::not_found:
    case Code::out_of_range:
    case Code::permission_denied:
    case Code::no_space:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

// The test seam of the kill tests: STRATA_TEST_KILL_AT="<point>[:<n>]" sends this process SIGKILL
// the n-th time (default 1st) a checkpoint save reaches <point> (CheckpointStore::save's names);
// "<point>:enospc[:<n>]" fails the save there with an injected ENOSPC instead. Unset: no hook.
model::CheckpointHook test_checkpoint_hook() {
  const char* env = std::getenv("STRATA_TEST_KILL_AT");
  if (env == nullptr || *env == '\0') return {};
  std::string spec = env;
  bool enospc = false;
  uint64_t nth = 1;
  std::string point = spec.substr(0, spec.find(':'));
  std::string rest = spec.find(':') == std::string::npos ? "" : spec.substr(spec.find(':') + 1);
  if (rest.starts_with("enospc")) {
    enospc = true;
    rest = rest.size() > 7 ? rest.substr(7) : "";
  }
  if (!rest.empty()) nth = std::strtoull(rest.c_str(), nullptr, 10);
  auto seen = std::make_shared<uint64_t>(0);
  return [point, nth, enospc, seen](std::string_view at) -> Status {
    if (at != point || ++*seen != nth) return Status::ok();
    if (enospc) return errno_status(ENOSPC, fmt::format("injected at '{}' by STRATA_TEST_KILL_AT", at));
    ::raise(SIGKILL);
    return Status::ok();
  };
}

// The built-in corpus as a text-token dataset over its static bytes (no copy).
StatusOr<TokenDataset> open_builtin_corpus(uint32_t vocab) {
  const std::string_view text = model::builtin_corpus();
  return TokenDataset::from_memory("built-in corpus", std::as_bytes(std::span(text.data(), text.size())),
                                   {.kind = model::TokenFileKind::text, .vocab_size = vocab});
}

// Every path of the comma/glob specs, which must share one layout.
StatusOr<TokenDataset> open_token_files(const TrainOptions& o, const std::vector<std::string>& specs,
                                        uint32_t vocab) {
  std::vector<std::string> paths;
  for (const std::string& spec : specs) {
    STRATA_ASSIGN_OR_RETURN(std::vector<std::string> expanded, model::expand_token_paths(spec));
    paths.insert(paths.end(), expanded.begin(), expanded.end());
  }
  STRATA_ASSIGN_OR_RETURN(model::TokenFileKind kind, model::data_format_for(o, paths.front()));
  for (const std::string& p : paths) {
    STRATA_ASSIGN_OR_RETURN(model::TokenFileKind k, model::data_format_for(o, p));
    if (k != kind)
      return error(Code::invalid_argument, "{} is {} but {} is {}: pass files of one layout (or --data-format)", p,
                   model::token_file_kind_name(k), paths.front(), model::token_file_kind_name(kind));
  }
  return TokenDataset::open(paths, {.kind = kind, .vocab_size = vocab});
}

struct Datasets {
  TokenDataset train;
  std::optional<TokenDataset> val;
  std::shared_ptr<const std::vector<uint32_t>> random;  // the tokens of --random-tokens, which the datasets use
};

// `count` tokens uniform over [0, vocab), from SplitMix64 seeded with `seed`: the same for a seed.
std::shared_ptr<const std::vector<uint32_t>> random_tokens(uint64_t count, uint32_t vocab, uint64_t seed) {
  auto tokens = std::make_shared<std::vector<uint32_t>>(count);
  SplitMix64 bits(seed ^ 0x5eed5eed5eed5eedull);
  for (uint32_t& t : *tokens) t = uint32_t(bits.next() % vocab);
  return tokens;
}

StatusOr<Datasets> open_datasets(const TrainOptions& o, uint32_t vocab, uint64_t seed) {
  std::optional<TokenDataset> all;
  std::shared_ptr<const std::vector<uint32_t>> random;
  if (o.random_tokens > 0) {
    random = random_tokens(o.random_tokens, vocab, seed);
    STRATA_ASSIGN_OR_RETURN(all, TokenDataset::from_memory("random tokens", std::as_bytes(std::span(*random)),
                                                           {.kind = model::TokenFileKind::raw_u32, .vocab_size = vocab}));
    spdlog::info("data: {} random tokens, uniform over the vocabulary of {} (seed {})", all->size(), vocab, seed);
  } else if (o.uses_builtin_corpus()) {
    STRATA_ASSIGN_OR_RETURN(all, open_builtin_corpus(vocab));
    spdlog::info("data: the built-in corpus, {} ({} byte tokens)", model::builtin_corpus_name(), all->size());
  } else if (!o.text.empty()) {
    STRATA_ASSIGN_OR_RETURN(all, TokenDataset::open({o.text}, {.kind = model::TokenFileKind::text, .vocab_size = vocab}));
    spdlog::info("data: {} ({} byte tokens)", o.text, all->size());
  } else {
    STRATA_ASSIGN_OR_RETURN(all, open_token_files(o, o.data, vocab));
    spdlog::info("data: {} file(s), {} tokens", all->shards().size(), all->size());
  }
  if (!o.val_data.empty()) {
    STRATA_ASSIGN_OR_RETURN(TokenDataset val, open_token_files(o, o.val_data, vocab));
    return Datasets{std::move(*all), std::move(val), random};
  }
  if (o.val_fraction > 0.0) {
    STRATA_ASSIGN_OR_RETURN(auto split, all->split_tail(o.val_fraction));
    return Datasets{std::move(split.first), std::move(split.second), random};
  }
  return Datasets{std::move(*all), std::nullopt, random};
}

StatusOr<std::unique_ptr<Backend>> make_train_backend(const Config& config, const TrainOptions& o) {
  BackendOptions bo;
  bo.tf32 = o.tf32;
  bo.device_index = int(config.get_int("gpu_index"));
  bo.memory_budget = config.get_size_or_auto("gpu_mem").value_or(0);
  std::string why;
  bo.kind = train_backend_kind(config, &why);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_backend(bo));
  spdlog::info("device: {} backend, {} ({})", backend_kind_name(backend->kind()), backend->device().name, why);
  return backend;
}

model::TierBytes tier_bytes(const Backend& backend, const PinnedPool& pinned, bool peak) {
  const ArenaStats a = backend.memory();
  const PinnedPoolStats p = pinned.stats();
  return model::TierBytes{.gpu = peak ? a.peak : a.in_use, .cpu = peak ? p.peak : p.in_use, .nvme = 0};
}

// The model to train: --init-from's config.json (explicit dimensions must agree with it; a
// .safetensors file without one beside it takes the preset's), else the preset with overrides.
// With --init-from, `init` holds the opened weights (mapped, nothing read), to be checked against
// the model's layout (check_init_weights) once the model's size is known to fit the machine.
StatusOr<model::ModelConfig> resolve_model(const Config& config, const TrainOptions& o,
                                           std::optional<model::HfWeights>& init) {
  if (o.init_from.empty()) {
    // --resume alone: the checkpoint's config.json is the model (a run started with --init-from
    // resumes without it); explicit --preset or dimensions are compared by name as before.
    if (!o.resume_path.empty() && config.source("preset") == ConfigSource::default_value && !o.model.any()) {
      StatusOr<std::string> dir = model::resolve_checkpoint(o.resume_path);
      const std::string config_json = dir.is_ok() ? *dir + "/" + std::string(model::kHfConfigFile) : "";
      std::error_code ec;
      if (!config_json.empty() && std::filesystem::exists(config_json, ec)) {
        STRATA_ASSIGN_OR_RETURN(model::HfModelConfig hf, model::read_hf_config(config_json));
        spdlog::info("model: {}, from {}", hf.config.name, config_json);
        return hf.config;
      }
    }
    return model::model_config_with(o.preset, o.model);
  }
  STRATA_ASSIGN_OR_RETURN(model::HfWeights weights, model::HfWeights::open(o.init_from));
  model::ModelConfig mc;
  if (weights.config_path().empty()) {
    STRATA_ASSIGN_OR_RETURN(mc, model::model_config_with(o.preset, o.model));
    spdlog::info("init-from: {} has no {} beside it; the model is --preset {} ({})", o.init_from, model::kHfConfigFile,
                 o.preset, mc.name);
  } else {
    if (config.source("preset") != ConfigSource::default_value)
      return error(Code::invalid_argument,
                   "--preset {} ({}) and --init-from {} both choose the model; drop --preset (the model is {}'s)",
                   o.preset, config.describe_source("preset"), o.init_from, weights.config_path());
    STRATA_ASSIGN_OR_RETURN(model::HfModelConfig hf, model::read_hf_config(weights.config_path()));
    std::vector<std::string> notes = hf.notes;
    STRATA_ASSIGN_OR_RETURN(mc, model::apply_overrides_to_hf(hf, o.model, weights.config_path(), notes));
    spdlog::info("init-from: {} ({}): {} layers, dim {}, {} heads ({} kv), ffn {}, vocab {}, max_seq {}, {} head{}",
                 o.init_from, hf.model_type, mc.n_layer, mc.dim, mc.n_head, mc.n_kv_head, mc.ffn_hidden, mc.vocab,
                 mc.max_seq, mc.tied_head ? "tied" : "untied", mc.qkv_bias ? ", q/k/v biases" : "");
    for (const std::string& n : notes) spdlog::info("init-from: {}", n);
    for (const std::string& w : hf.warnings) spdlog::warn("init-from: {}", w);
  }
  init.emplace(std::move(weights));
  return mc;
}

// --init-from's tensors against the model's layout: a missing tensor, a shape or a dtype is
// refused before any data or memory is touched; a tensor the model has no place for is named in
// a warning (it is not loaded).
Status check_init_weights(const model::ModelConfig& mc, const model::HfWeights& weights) {
  STRATA_ASSIGN_OR_RETURN(model::ParamLayout layout, model::build_param_layout(mc, 4));
  STRATA_RETURN_IF_ERROR(weights.check_layout(layout, mc.name));
  const model::UnusedTensors unused = weights.unused_tensors(layout);
  spdlog::info("init-from: {} tensors in {} file(s), every one the model needs present with its shape",
               weights.tensor_count(), weights.files().size());
  if (!unused.buffers.empty())
    spdlog::info("init-from: {} non-parameter buffer(s) not loaded ({}: transformers' attention masks and "
                 "rotary tables, which strata computes)", unused.buffers.size(), unused.buffers.front());
  if (!unused.tensors.empty())
    spdlog::warn("init-from: {} tensor(s) of {} are not loaded: model {} has no place for them: {}{}; check that "
                 "config.json describes these weights (a tied head, the layer count)",
                 unused.tensors.size(), weights.path(), mc.name,
                 fmt::join(unused.tensors.begin(), unused.tensors.begin() + std::min<size_t>(unused.tensors.size(), 8),
                           ", "),
                 unused.tensors.size() > 8 ? fmt::format(" and {} more", unused.tensors.size() - 8) : "");
  return Status::ok();
}

// What a run stopped by a failure (a corrupt swap file, an I/O error) can do: resume from the
// last checkpoint of --checkpoint-dir, named with its command, or say there is none.
std::string resume_advice(const TrainOptions& o) {
  if (o.checkpoint_dir.empty())
    return "no --checkpoint-dir was set, so this run left no checkpoint to resume from";
  const auto all = model::list_checkpoints(o.checkpoint_dir);
  if (all.empty()) return fmt::format("{} holds no earlier checkpoint to resume from", o.checkpoint_dir);
  return fmt::format("the last checkpoint is {} (step {}); resume from it with:\n  {}", all.back().second,
                     all.back().first, resume_command(o.checkpoint_dir));
}

// The run's last lines: where its pictures are (a --metrics file for `strata plot`, TensorBoard's
// event file), or, when none was asked for, how to get them (the trace: train_offload.h says so).
std::vector<std::string> where_to_look(const TrainOptions& o, const std::string& tensorboard_file) {
  std::vector<std::string> lines;
  if (!o.metrics_path.empty())
    lines.push_back(fmt::format("metrics: {} (draw it: strata plot {} -o run.png)", o.metrics_path, o.metrics_path));
  if (!tensorboard_file.empty())
    lines.push_back(fmt::format("tensorboard: {} (view it: tensorboard --logdir {})", tensorboard_file,
                                o.tensorboard_output_path.empty() ? "." : o.tensorboard_output_path));
  if (lines.empty() && o.trace_path.empty())
    lines.push_back("to look at a run: --metrics FILE, then `strata plot FILE -o run.png`; --tensorboard-enabled "
                    "for TensorBoard; --trace FILE for a timeline of its compute and transfers "
                    "(https://ui.perfetto.dev)");
  return lines;
}

// The whole run after the config is read; returns the exit code. `live`: the terminal's status
// line, or null where stderr is not a terminal.
int train(const Config& config, std::shared_ptr<StatusLine> live) {
  StatusOr<TrainOptions> parsed = model::train_options_from_config(config);
  if (!parsed.is_ok()) return report_error(parsed.status().message(), kExitUsage);
  const TrainOptions& o = *parsed;
  for (const std::string& w : o.warnings) spdlog::warn("{}", w);
  if (Status s = model::check_trainer_options(o); !s.is_ok()) return report_error(s.message(), kExitUsage);
  std::optional<model::HfWeights> init_weights;
  StatusOr<model::ModelConfig> mc = resolve_model(config, o, init_weights);
  if (!mc.is_ok()) return report_error(mc.status().message(), exit_code_for(mc.status()));
  if (int64_t(o.seq) > mc->max_seq)
    return report_error(fmt::format("--seq {} is longer than {}'s {} positions; pass --seq {} or less", o.seq,
                                    mc->name, mc->max_seq, mc->max_seq),
                        kExitUsage);
  auto fail = [](const Status& s) { return report_error(s.message(), exit_code_for(s)); };
  const uint64_t seed = uint64_t(config.get_int("seed"));

  // Preflight: every path, the checkpoint directory's lock and the room for its rotation, the
  // model's size against the machine, before data, memory or a step.
  if (Status s = check_nvme_paths(config.get_list("nvme_path")); !s.is_ok()) return fail(s);
  std::optional<DirLock> checkpoint_lock;  // one writer per --checkpoint-dir, for the run's life
  std::optional<model::CheckpointStore> store;
  if (!o.checkpoint_dir.empty()) {
    StatusOr<std::optional<DirLock>> lock = lock_checkpoint_dir(o.checkpoint_dir);
    if (!lock.is_ok())
      return report_error(lock.status().message(),
                          lock.status().code() == Code::unavailable ? kExitUsage : exit_code_for(lock.status()));
    checkpoint_lock = std::move(*lock);
    StatusOr<model::CheckpointStore> st = model::CheckpointStore::open(
        o.checkpoint_dir, {.keep = uint32_t(o.keep_checkpoints), .hook = test_checkpoint_hook()});
    if (!st.is_ok()) return fail(st.status());
    for (const std::string& r : st->removed()) spdlog::info("checkpoint: removed {}, left by a killed save", r);
    const CheckpointRotation rotation{.one = estimate_checkpoint_bytes(*mc, o.adam_states),
                                      .keep = o.keep_checkpoints,
                                      .present = model::list_checkpoints(o.checkpoint_dir).size()};
    if (Status s = check_checkpoint_room(o.checkpoint_dir, rotation, mc->name); !s.is_ok()) return fail(s);
    store.emplace(std::move(*st));
  }
  // The host memory the flags' own placement needs (when the planner will not choose one), then
  // whether any placement could hold the model at all: both closed-form, before any layout.
  const model::PlanFixed fixed = plan_fixed_choices(config);
  const bool explicit_auto =
      config.get_text("offload") == "auto" && config.source("offload") != ConfigSource::default_value;
  const bool flags_placement = !explicit_auto && (fixed.weights || fixed.optimizer || fixed.gradients);
  const auto check_memory = [&](const TrainOptions& run) -> int {
    StatusOr<std::vector<std::string>> memory =
        check_host_memory(*mc, run.adam_states, run.optimizer_device == TrainOptions::OptimizerDevice::device,
                          run.optimizer_home == TrainOptions::OptimizerHome::nvme,
                          config.get_size_or_auto("cpu_mem").value_or(0));
    if (!memory.is_ok()) return report_error(memory.status().message(), kExitUsage);
    for (const std::string& w : *memory) spdlog::warn("{}", w);
    return kExitOk;
  };
  if (flags_placement)
    if (const int code = check_memory(o); code != kExitOk) return code;
  if (Status s = check_size_fits_machine(config, o, *mc, MachineFor::train); !s.is_ok())
    return report_error(s.message(), kExitUsage);
  if (init_weights)
    if (Status s = check_init_weights(*mc, *init_weights); !s.is_ok()) return fail(s);
  std::optional<model::CheckpointState> resumed;
  std::string resume_dir;
  std::optional<DirLock> resume_lock;  // a reader's lock on the resumed run's directory, until it is read
  if (!o.resume_path.empty()) {
    StatusOr<std::string> dir = model::resolve_checkpoint(o.resume_path);
    if (!dir.is_ok()) return fail(dir.status());
    resume_dir = *dir;
    std::error_code ec;
    const std::string parent = std::filesystem::path(resume_dir).parent_path().string();
    const bool own_dir = !o.checkpoint_dir.empty() &&
                         (std::filesystem::equivalent(o.resume_path, o.checkpoint_dir, ec) ||
                          std::filesystem::equivalent(parent, o.checkpoint_dir, ec));
    if (!own_dir) {  // this run's own directory is locked already
      StatusOr<std::optional<DirLock>> lock = lock_resume_source(o.resume_path, resume_dir);
      if (!lock.is_ok())
        return report_error(lock.status().message(),
                            lock.status().code() == Code::unavailable ? kExitUsage : exit_code_for(lock.status()));
      resume_lock = std::move(*lock);
    }
    StatusOr<model::CheckpointState> st = model::read_checkpoint_state(resume_dir, mc->name);
    if (!st.is_ok() && st.status().code() == Code::corruption) {
      // Name the other checkpoints of the run, newest first, that a resume can use instead.
      std::string others;
      const auto all = model::list_checkpoints(std::filesystem::path(resume_dir).parent_path().string());
      for (auto it = all.rbegin(); it != all.rend(); ++it)
        if (it->second != resume_dir) others += (others.empty() ? "" : ", ") + it->second;
      if (!others.empty())
        return report_error(fmt::format("{}; other checkpoints of this run (pass one to --resume): {}",
                                        st.status().message(), others));
    }
    if (!st.is_ok()) return fail(st.status());
    if (st->step >= o.steps)
      return report_error(fmt::format("{} has already trained {} steps; pass --steps above {} to continue",
                                      resume_dir, st->step, st->step),
                          kExitUsage);
    if (st->seed != seed)
      spdlog::warn("{} was trained with --seed {}, this run has {}: the data order changes from here on",
                   resume_dir, st->seed, seed);
    const model::CheckpointState mine{.micro_batch = o.micro_batch, .seq = o.seq, .grad_accum = o.grad_accum,
                                      .dtype = std::string(dtype_name(o.dtype))};
    StatusOr<std::vector<std::string>> warnings = model::check_resume_compatible(*st, mine, resume_dir);
    if (!warnings.is_ok()) return fail(warnings.status());
    for (const std::string& w : *warnings) spdlog::warn("{}", w);
    resumed = *st;
  }
  if (resumed && (o.vocab_tile < 0 || o.mlp_tiles < 0)) {
    // Tiling auto on a resume: the checkpoint's (its moments are stored per chunk), whatever this
    // machine's budget would choose.
    if (parsed->vocab_tile < 0) parsed->vocab_tile = resumed->vocab_tile;
    if (parsed->mlp_tiles < 0) parsed->mlp_tiles = resumed->mlp_tiles > 1 ? resumed->mlp_tiles : 0;
    spdlog::info("resume: tiled as the checkpoint was (--vocab-tile {} --mlp-tiles {})", o.vocab_tile, o.mlp_tiles);
  }
  // The placement: the flags', or the planner's (--offload auto; train_placement.h), refused here
  // when nothing fits. From here `o` is the run's, with the placement it trains.
  StatusOr<TrainPlacement> placement = choose_train_placement(config, o, *mc);
  if (!placement.is_ok()) return report_error(placement.status().message(), kExitUsage);
  *parsed = placement->options;
  // Memory-centric tiling (--vocab-tile, --mlp-tiles): the run's chunking, the one its placement was
  // planned with, for every layout from here on.
  *mc = placement->predicted.model;
  if (mc->mlp_tiles > 1)
    spdlog::info("model: every layer's MLP in {} tiles per weight (--mlp-tiles {})", mc->mlp_tiles,
                 o.mlp_tiles < 0 ? "auto" : std::to_string(o.mlp_tiles));
  if (mc->vocab_tile > 0)
    spdlog::info("model: the {}x{} token table{} in {} tiles of {} rows (--vocab-tile {})", mc->vocab, mc->dim,
                 mc->tied_head ? "" : " and the head", model::vocab_tiles(*mc), mc->vocab_tile,
                 o.vocab_tile < 0 ? "auto" : std::to_string(o.vocab_tile));
  if (!flags_placement)  // the planner's placement (the flags' was checked above)
    if (const int code = check_memory(o); code != kExitOk) return code;
  if (store) {
    // A fresh run (or one resumed from elsewhere) must not mix its checkpoints with another run's.
    const std::vector<std::pair<uint64_t, std::string>> held = model::list_checkpoints(o.checkpoint_dir);
    std::error_code ec;
    const bool same_run = resumed && (std::filesystem::equivalent(resume_dir, o.checkpoint_dir, ec) ||
                                      std::filesystem::equivalent(std::filesystem::path(resume_dir).parent_path(),
                                                                  o.checkpoint_dir, ec));
    if (!held.empty() && !same_run)
      return report_error(fmt::format("--checkpoint-dir {} already holds checkpoints of another run (up to step {}); "
                                      "pass --resume {} to continue that run, or another --checkpoint-dir",
                                      o.checkpoint_dir, held.back().first, o.checkpoint_dir),
                          kExitUsage);
    if (resumed && !held.empty() && held.back().first > resumed->step)
      spdlog::warn("{} also holds checkpoints after step {} (up to step {}); this run continues from step {} and "
                   "leaves them until you remove them",
                   o.checkpoint_dir, resumed->step, held.back().first, resumed->step);
  }
  StatusOr<Datasets> data = open_datasets(o, uint32_t(mc->vocab), seed);
  if (!data.is_ok()) return fail(data.status());
  StatusOr<std::unique_ptr<Backend>> backend = make_train_backend(config, o);
  if (!backend.is_ok()) return fail(backend.status());
  if (Status s = check_device_budget(*mc, o, **backend, placement->machine.hardware.rates); !s.is_ok())
    return report_error(s.message(), kExitUsage);
  StatusOr<std::unique_ptr<PinnedPool>> pinned = PinnedPool::create(
      {.capacity = config.get_size_or_auto("cpu_mem").value_or(0), .allow_cuda = (*backend)->kind() == BackendKind::cuda});
  if (!pinned.is_ok()) return fail(pinned.status());
  // From here a signal stops the run cleanly: during the setup (which may write a model's weights
  // and optimizer state to NVMe for minutes) at the next phase's end, nothing trained; returning
  // unwinds the run, which removes its swap directories.
  install_stop_signals();
  const auto stopped_in_setup = [](std::string_view while_doing) {
    const int sig = stop_signal();
    if (sig != 0)
      spdlog::warn("{}: stopped while {}, before the first step: nothing was trained or saved", signal_name(sig),
                   while_doing);
    return sig != 0 ? 128 + sig : 0;
  };
  StatusOr<std::unique_ptr<TrainOffload>> offload = TrainOffload::create(config, o, *mc, **backend, **pinned);
  if (!offload.is_ok()) return fail(offload.status());
  if (std::getenv("STRATA_TEST_SIGNAL_IN_SETUP") != nullptr) ::raise(SIGTERM);  // the signal tests' seam
  if (const int code = stopped_in_setup("creating the offload tiers")) return code;
  // --bench: the disk measured before any training I/O; the recorder the compute spans go to.
  std::optional<TrainBench> bench;
  if (o.bench) {
    StatusOr<std::optional<DiskBandwidth>> disk = measure_run_disk(config, **offload);
    if (!disk.is_ok()) return fail(disk.status());
    bench.emplace(**offload, std::move(*disk));
  }
  StatusOr<std::unique_ptr<ThreadPool>> pool =
      ThreadPool::create({.threads = int(config.get_int("threads")), .name = "adam"});
  if (!pool.is_ok()) return fail(pool.status());

  model::BatchLoaderOptions lo;
  lo.sampling = {.batch_size = uint32_t(o.micro_batch), .seq_len = uint32_t(o.seq), .shuffle = true, .seed = seed};
  if (resumed) lo.start = resumed->loader;
  StatusOr<std::unique_ptr<model::BatchLoader>> train_loader = model::BatchLoader::create(data->train, **pinned, lo);
  if (!train_loader.is_ok()) return fail(train_loader.status());
  std::unique_ptr<model::BatchLoader> val_loader;
  if (o.evaluates() && data->val) {
    lo.sampling.shuffle = false;
    lo.start = {};  // the checkpoint's position is the training loader's; evaluation always starts at batch 0
    StatusOr<std::unique_ptr<model::BatchLoader>> v = model::BatchLoader::create(*data->val, **pinned, lo);
    if (!v.is_ok()) return fail(v.status());
    val_loader = std::move(*v);
  }

  StatusOr<std::unique_ptr<model::Transformer>> net = model::Transformer::create(
      **backend, *mc,
      {.batch = int64_t(o.micro_batch),
       .seq_len = int64_t(o.seq),
       .checkpoint_layers = o.activation_checkpointing,
       .dtype = o.dtype,
       // A CPU optimizer streams gradients to the host: no full set of them on the device.
       .device_grads = o.optimizer_device == model::TrainOptions::OptimizerDevice::device},
      {.weights = (*offload)->weights(), .pinned = pinned->get()});
  if (!net.is_ok()) return fail(net.status());
  (*net)->set_trace(bench ? bench->trace() : (*offload)->trace());
  if (resumed && init_weights)
    spdlog::info("init-from: resuming from {}, so its weights are used; {} gave the model's configuration only",
                 resume_dir, o.init_from);
  if (Status s = resumed        ? model::load_checkpoint_weights(resume_dir, **net)
                 : init_weights ? (*net)->load_hf_weights(*init_weights)
                                : (*net)->init(seed);
      !s.is_ok())
    return fail(s);
  init_weights.reset();  // unmap the Hugging Face files
  if (const int code = stopped_in_setup("writing the model's weights")) return code;
  StatusOr<std::unique_ptr<model::Trainer>> trainer =
      model::Trainer::create(**backend, **net, **pinned, pool->get(), o,
                             {.trace = (*offload)->trace(), .store = (*offload)->store()});
  if (!trainer.is_ok()) return fail(trainer.status());
  if (const int code = stopped_in_setup("writing the optimizer state")) return code;
  if (resumed) {
    if (Status s = model::load_checkpoint_optimizer(resume_dir, **trainer); !s.is_ok()) return fail(s);
    spdlog::info("resumed from {} at step {}", resume_dir, resumed->step);
    resume_lock.reset();  // read: its run may go on
  }
  std::optional<model::MetricsLog> metrics;
  if (!o.metrics_path.empty()) {
    if (resumed) {
      StatusOr<uint64_t> dropped = model::truncate_metrics_after(o.metrics_path, resumed->step);
      if (!dropped.is_ok()) return fail(dropped.status());
      if (*dropped > 0)
        spdlog::info("metrics: dropped {} line(s) of {} after step {} (trained after the checkpoint, trained again now)",
                     *dropped, o.metrics_path, resumed->step);
    }
    StatusOr<model::MetricsLog> m = model::MetricsLog::open(
        o.metrics_path, resumed ? model::MetricsLog::Mode::append : model::MetricsLog::Mode::truncate);
    if (!m.is_ok()) return fail(m.status());
    metrics.emplace(std::move(*m));
  }
  std::optional<model::TensorBoardWriter> tensorboard;
  if (o.tensorboard) {
    StatusOr<model::TensorBoardWriter> tb =
        model::TensorBoardWriter::open(o.tensorboard_output_path, o.tensorboard_job_name);
    if (!tb.is_ok()) return fail(tb.status());
    tensorboard.emplace(std::move(*tb));
  }
  spdlog::info("model: {} ({} parameters, {}{}), {} steps of {} x {} x {} tokens, {} lr {:.2e} ({})", mc->name,
               model::parameter_count(*mc), dtype_name(o.dtype), o.dtype == DType::f32 && o.tf32 ? " with TF32" : "",
               o.steps, o.grad_accum, o.micro_batch, o.seq, o.optimizer, o.lr_schedule.peak_lr,
               model::lr_decay_name(o.lr_schedule.decay));
  const TrainDeviceRates rates(**backend, *mc, o, config.get_real("peak_tflops"));

  const model::NextBatch next_train = [&]() { return (*train_loader)->next(); };
  const model::NextBatch next_val = [&]() { return val_loader->next(); };
  uint64_t saved_step = resumed ? resumed->step : ~uint64_t{0};
  // Writes the checkpoint of the steps done so far (once per step).
  auto save = [&]() -> Status {
    const uint64_t step = (*trainer)->steps_done();
    if (!store || saved_step == step) return Status::ok();
    const model::CheckpointState state{.step = step,
                                       .loader = (*train_loader)->position(),
                                       .seed = seed,
                                       .preset = mc->name,
                                       .micro_batch = o.micro_batch,
                                       .seq = o.seq,
                                       .grad_accum = o.grad_accum,
                                       .dtype = std::string(dtype_name(o.dtype))};
    StatusOr<std::string> dir = store->save(**net, **trainer, state);
    if (!dir.is_ok()) return dir.status();
    saved_step = step;
    spdlog::info("checkpoint: step {} written to {}", step, *dir);
    return Status::ok();
  };
  // A stop signal: the checkpoint, then the command that resumes; exit 128 + signal.
  auto stop_for_signal = [&](int sig) {
    const uint64_t step = (*trainer)->steps_done();
    if (!store) {
      spdlog::warn("{}: stopped after step {} of {}; no --checkpoint-dir was set, so this run cannot be resumed",
                   signal_name(sig), step, o.steps);
      return 128 + sig;
    }
    if (Status s = save(); !s.is_ok())
      return report_error(fmt::format("{}: stopped after step {}, but {}", signal_name(sig), step, s.message()),
                          128 + sig);
    spdlog::warn("{}: stopped after step {} of {}; resume with:\n  {}", signal_name(sig), step, o.steps,
                 resume_command(o.checkpoint_dir));
    return 128 + sig;
  };
  model::RunSummary summary;
  summary.device_label =
      (*backend)->kind() == BackendKind::cpu ? model::kCpuBackendTierLabel : model::kGpuTierLabel;
  model::TrainProgress progress(
      {.total_steps = o.steps, .log_every = o.log_every, .device_label = summary.device_label}, std::move(live));
  const auto run_start = std::chrono::steady_clock::now();
  const uint64_t first_step = (*trainer)->steps_done();
  double first_s = 0, steady_s = 0;  // the run's first step and the steps after it (the prediction's comparison)
  uint64_t skipped_in_a_row = 0;
  for (uint64_t i = first_step; i < o.steps; ++i) {
    if (const int sig = stop_signal(); sig != 0) return stop_for_signal(sig);
    const auto t0 = std::chrono::steady_clock::now();
    if (bench) bench->begin_step(**trainer);
    StatusOr<model::StepResult> r = (*trainer)->step(next_train);
    if (!r.is_ok())
      return report_error(fmt::format("step {}: {}; {}", i + 1, r.status().message(), resume_advice(o)), kExitFailure);
    if (bench) bench->end_step(**trainer, r->step);
    const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    model::StepMetrics m;
    m.step = r->step;
    m.loss = r->loss;
    m.lr = r->lr;
    m.step_s = step_s;
    m.tokens_per_s = step_s > 0 ? double(r->tokens) / step_s : 0.0;
    m.grad_norm = r->grad_norm;
    m.loss_scale = r->loss_scale;
    m.skipped = r->skipped;
    rates.fill(m, step_s);
    if (val_loader && (m.step % o.eval_every == 0 || m.step == o.steps)) {
      if (Status s = val_loader->seek({}); !s.is_ok()) return fail(s);  // the same val batches each time
      StatusOr<double> val = (*trainer)->evaluate(next_val, o.eval_batches);
      if (!val.is_ok())
        return report_error(
            fmt::format("evaluation at step {}: {}; {}", m.step, val.status().message(), resume_advice(o)));
      m.val_loss = *val;
      summary.last_val_loss = *val;
      summary.last_val_step = m.step;
    }
    m.transfers = (*offload)->step_transfers(**trainer, step_s);
    m.bytes = tier_bytes(**backend, **pinned, false);
    m.peak_bytes = tier_bytes(**backend, **pinned, true);
    m.bytes.nvme = m.peak_bytes.nvme = (*offload)->nvme_bytes();
    if (metrics) {
      if (Status s = metrics->write(m); !s.is_ok()) return fail(s);
    }
    if (tensorboard) {
      if (Status s = tensorboard->write_step(m, o.micro_batch * o.grad_accum); !s.is_ok()) return fail(s);
    }
    progress.step(m);
    skipped_in_a_row = r->skipped ? skipped_in_a_row + 1 : 0;
    if (o.max_skipped_steps > 0 && skipped_in_a_row >= o.max_skipped_steps)
      return report_error(
          fmt::format("step {}: {} steps in a row were skipped for Inf/NaN gradients (loss {:.4f}): the weights "
                      "or the data have diverged (fp16: or a fixed --loss-scale is too high), so no checkpoint is "
                      "written; resume from an earlier checkpoint with a lower --lr (or raise --max-skipped-steps)",
                      m.step, skipped_in_a_row, m.loss),
          kExitFailure);
    const bool save_now = store && (m.step == o.steps || (o.checkpoint_every > 0 && m.step % o.checkpoint_every == 0));
    if (save_now) {
      if (Status s = save(); !s.is_ok())
        return report_error(fmt::format("checkpoint at step {}: {}; {}{}", m.step, s.message(),
                                        s.code() == Code::no_space ? "free space there, then: " : "",
                                        resume_advice(o)));
    }
    if (i == first_step) summary.first_loss = m.loss;
    (i == first_step ? first_s : steady_s) += step_s;
    summary.last_loss = m.loss;
    summary.steps = m.step - first_step;
    summary.tokens += r->tokens;
    summary.skipped_steps += r->skipped;
    summary.peak_bytes = m.peak_bytes;
  }
  // The last step's update (overlapped updates wait for a next forward that never comes).
  if (bench) bench->begin_final_update(**trainer);
  if (Status s = (*trainer)->finish_update(); !s.is_ok())
    return report_error(fmt::format("the update of step {}: {}; {}", o.steps, s.message(), resume_advice(o)),
                        kExitFailure);
  if (bench) bench->end_final_update(**trainer);
  progress.finish();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  summary.mean_mfu = rates.run_mfu(summary.steps, summary.seconds);
  spdlog::info("{}", model::format_run_summary(summary));
  if (const std::string s = (*offload)->summary(summary.seconds); !s.empty()) spdlog::info("{}", s);
  const RunMeasured measured{.first_step = first_step + 1,
                             .steps = summary.steps,
                             .mean_step_s = summary.steps > 1 ? steady_s / double(summary.steps - 1) : first_s,
                             .gpu_peak = summary.peak_bytes.gpu,
                             .cpu_peak = summary.peak_bytes.cpu};
  for (const std::string& line : prediction_lines(*placement, measured)) spdlog::info("{}", line);
  metrics.reset();  // closed after its last step line; the bench and prediction lines follow it
  if (bench) {
    StatusOr<BenchReport> report = bench->finish(**trainer);
    if (!report.is_ok()) return fail(report.status());
    fmt::print("{}", bench_table(*report));
    std::fflush(stdout);
    if (!o.metrics_path.empty())
      if (Status s = append_line(o.metrics_path, bench_json_line(*report)); !s.is_ok()) return fail(s);
  }
  if (!o.metrics_path.empty())
    if (Status s = append_line(o.metrics_path, prediction_json_line(*placement, measured)); !s.is_ok()) return fail(s);
  if (Status s = (*offload)->write_trace(o.trace_path); !s.is_ok()) return fail(s);
  for (const std::string& line : where_to_look(o, tensorboard ? tensorboard->path() : "")) spdlog::info("{}", line);
  return kExitOk;
}

}  // namespace

void add_train_command(CLI::App& root, CommandRegistry& registry) {
  CLI::App* app = root.add_subcommand(
      "train",
      "Train a model preset (default: gpt2-tiny on the built-in corpus) in fp32, bf16 or fp16 with AdamW, "
      "its state and update on the CPU or on the device, weights, gradients and optimizer state paged to pinned "
      "memory or NVMe when the model does not fit.\n"
      "Every setting is a flag, a STRATA_* variable or a --config file key; see `strata config`.");
  auto flags = std::make_shared<ConfigFlags>(*app, strata_config_schema());
  registry.add(app, [flags]() {
    StatusOr<Config> config = flags->resolve(environ);
    if (!config.is_ok()) return report_error(config.status().message(), kExitUsage);
    StatusOr<spdlog::level::level_enum> level = parse_log_level(config->get_text("log_level"));
    if (!level.is_ok()) return report_error(level.status().message(), kExitUsage);
    // A terminal gets a live progress line under the log; at warn or above there is nothing to show.
    std::shared_ptr<StatusLine> live;
    if (stderr_is_terminal() && *level <= spdlog::level::info) {
      live = StatusLine::install(*level);
    } else {
      init_logging(*level);
    }
    return train(*config, std::move(live));
  });
}

}  // namespace strata::cli
