// The model a training run trains, before anything is allocated: --init-from's config.json (with
// explicit dimensions checked against it), a resumed checkpoint's config.json (--resume alone), or
// the preset with its overrides; and the check of --init-from's tensors against that model's
// layout. Logs the "init-from: ..." and "model: ..., from ..." lines. Not the model itself
// (model/net/transformer.h) nor its weights' loading (Transformer::load_hf_weights).
#pragma once

#include <optional>

#include "model/hf/hf_weights.h"
#include "model/net/model_config.h"
#include "model/train/train_options.h"
#include "runtime/config.h"
#include "runtime/status.h"

namespace strata::model {

// The model of a run of `o` under `config` (whose "preset" source says whether --preset was given).
// With --init-from, `init` receives the opened weights (mapped, nothing read), to be checked with
// check_init_weights once the model's size is known to fit the machine. Errors: invalid_argument
// for --preset beside an --init-from with a config.json, a dimension that disagrees with it, or an
// unknown preset; the file errors of HfWeights::open and read_hf_config.
StatusOr<ModelConfig> resolve_run_model(const Config& config, const TrainOptions& o, std::optional<HfWeights>& init);

// --init-from's tensors against the layout of `mc`: a missing tensor, a shape or a dtype is refused
// (HfWeights::check_layout's errors) before any data or memory is touched; a tensor the model has
// no place for is named in a warning (it is not loaded).
Status check_init_weights(const ModelConfig& mc, const HfWeights& weights);

}  // namespace strata::model
