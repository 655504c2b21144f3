// Memory-centric tiling of a run: which vocabulary tiles (ModelConfig::vocab_tile) and MLP tiles
// (ModelConfig::mlp_tiles) a run takes under a device budget -- how `strata train`, `strata plan`
// and --offload auto resolve --vocab-tile / --mlp-tiles auto -- and the tiling that would make a
// refused run fit, for its suggestions. Every candidate is sized with estimate_device_bytes
// (placement.h), the arena the run takes, so "fits" here is the run's own preflight check. Pure
// arithmetic; allocates nothing. Not the tiles' layout (param_layout.h) nor their slot groups
// (placement.h).
#pragma once

#include <cstdint>
#include <string>

#include "model/net/model_config.h"
#include "model/train/train_options.h"
#include "runtime/status.h"

namespace strata::model {

// --mlp-tiles auto never cuts finer, nor does a suggestion: a device that needs finer tiles cannot
// train the model anyway, and planning a large model in finer tiles costs seconds per placement (an
// explicit --mlp-tiles may go up to min(H, C)).
inline constexpr int64_t kMaxAutoMlpTiles = 64;

// A tiling of a run and the device arena it takes.
struct Tiling {
  int64_t vocab_tile = 0;     // ModelConfig::vocab_tile: rows per tile; 0 whole tables
  int64_t mlp_tiles = 0;      // ModelConfig::mlp_tiles: tiles per MLP weight; 0 whole MLPs
  uint64_t device_bytes = 0;  // estimate_device_bytes(...).total() with this tiling
  bool fits = false;          // device_bytes <= the budget searched for
  bool tiled() const { return vocab_tile > 0 || mlp_tiles > 1; }
};

// invalid_argument when a given --mlp-tiles (options.mlp_tiles >= 0) exceeds min(H, C) (a tile
// holds at least one row of each weight), naming the flag and the most the model takes, or a given
// tiling is otherwise invalid for `config` (validate, model_config.h).
Status check_tiling(const ModelConfig& config, const TrainOptions& options);

// The run's tiling: `config` with vocab_tile and mlp_tiles set. A given option (>= 0) is kept. auto
// (-1) tiles only when the weights are paged (offload_param cpu or nvme: resident weights hold
// every chunk on the device, tiled or not) and the run's untiled device working set exceeds
// `gpu_budget` (0: unknown, no tiling), and then only as far as needed: the fewest tiles that fit,
// counted as the chunks the tiling adds to the layout (an MLP in m tiles per weight adds 2m to
// every layer, a table in t tiles t - 1), MLP tiles 0 or 2 .. min(H, C, kMaxAutoMlpTiles),
// vocabulary tiles of whole kVocabTileBlock rows cut as evenly as whole blocks allow; on a tie the
// fewer MLP tiles (they regroup the MLP's input-gradient sums; vocabulary tiles change no fp32
// bit). When no tiling fits either, none is cut (the refusal names the tiles' own figures:
// fewest_fitting_tiles). Errors: check_tiling's.
StatusOr<ModelConfig> with_tiling(const ModelConfig& config, const TrainOptions& options, uint64_t gpu_budget);

// with_tiling's auto on both axes, the options' given tiling set aside: the tiling with the fewest
// tiles that fits `gpu_budget`, for a refusal's suggestions (a run given whole MLPs, or too few
// tiles, is told the tiles that fit); the untiled one when it fits or the weights are resident.
// When none fits, the one with the fewest device bytes (fits false): the tiled minimum.
Tiling fewest_fitting_tiles(const ModelConfig& config, const TrainOptions& options, uint64_t gpu_budget);

// "every layer's MLP in 3 tiles per weight and the token table in 4 tiles of 1024 rows"; "whole
// tables and MLPs" when untiled.
std::string tiling_summary(const ModelConfig& config);
// The flags that ask for `tiled`'s tiling where `given`'s options would not: an axis given another
// value, or left auto and tiled ("--mlp-tiles 3 --vocab-tile 1024"; "" when none).
std::string tiling_flags(const ModelConfig& tiled, const TrainOptions& given);

}  // namespace strata::model
