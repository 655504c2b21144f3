// The model a training run trains (run_model.h).
#include "model/train/run_model.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "model/ckpt/checkpoint.h"
#include "model/ckpt/checkpoint_store.h"
#include "model/hf/hf_config.h"
#include "model/net/param_layout.h"

namespace strata::model {

StatusOr<ModelConfig> resolve_run_model(const Config& config, const TrainOptions& o, std::optional<HfWeights>& init) {
  if (o.init_from.empty()) {
    // --resume alone: the checkpoint's config.json is the model (a run started with --init-from
    // resumes without it); explicit --preset or dimensions are compared by name as before.
    if (!o.resume_path.empty() && config.source("preset") == ConfigSource::default_value && !o.model.any()) {
      StatusOr<std::string> dir = resolve_checkpoint(o.resume_path);
      const std::string config_json = dir.is_ok() ? *dir + "/" + std::string(kHfConfigFile) : "";
      std::error_code ec;
      if (!config_json.empty() && std::filesystem::exists(config_json, ec)) {
        STRATA_ASSIGN_OR_RETURN(HfModelConfig hf, read_hf_config(config_json));
        spdlog::info("model: {}, from {}", hf.config.name, config_json);
        return hf.config;
      }
    }
    return model_config_with(o.preset, o.model);
  }
  STRATA_ASSIGN_OR_RETURN(HfWeights weights, HfWeights::open(o.init_from));
  ModelConfig mc;
  if (weights.config_path().empty()) {
    STRATA_ASSIGN_OR_RETURN(mc, model_config_with(o.preset, o.model));
    spdlog::info("init-from: {} has no {} beside it; the model is --preset {} ({})", o.init_from, kHfConfigFile,
                 o.preset, mc.name);
  } else {
    if (config.source("preset") != ConfigSource::default_value)
      return error(Code::invalid_argument,
                   "--preset {} ({}) and --init-from {} both choose the model; drop --preset (the model is {}'s)",
                   o.preset, config.describe_source("preset"), o.init_from, weights.config_path());
    STRATA_ASSIGN_OR_RETURN(HfModelConfig hf, read_hf_config(weights.config_path()));
    std::vector<std::string> notes = hf.notes;
    STRATA_ASSIGN_OR_RETURN(mc, apply_overrides_to_hf(hf, o.model, weights.config_path(), notes));
    spdlog::info("init-from: {} ({}): {} layers, dim {}, {} heads ({} kv), ffn {}, vocab {}, max_seq {}, {} head{}",
                 o.init_from, hf.model_type, mc.n_layer, mc.dim, mc.n_head, mc.n_kv_head, mc.ffn_hidden, mc.vocab,
                 mc.max_seq, mc.tied_head ? "tied" : "untied", mc.qkv_bias ? ", q/k/v biases" : "");
    for (const std::string& n : notes) spdlog::info("init-from: {}", n);
    for (const std::string& w : hf.warnings) spdlog::warn("init-from: {}", w);
  }
  init.emplace(std::move(weights));
  return mc;
}

Status check_init_weights(const ModelConfig& mc, const HfWeights& weights) {
  STRATA_ASSIGN_OR_RETURN(ParamLayout layout, build_param_layout(mc, 4));
  STRATA_RETURN_IF_ERROR(weights.check_layout(layout, mc.name));
  const UnusedTensors unused = weights.unused_tensors(layout);
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

}  // namespace strata::model
