// A plan (model/plan/planner.h) for people and scripts: the text `strata plan` prints -- the model, the
// machine, the placement (or how far the closest one is from fitting), the bytes per state and
// tier, the step time with each rate's source, and what would make it fit -- and its JSON. `strata
// train` refuses a run that fits nowhere with the same text. Formatting only: no detection.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model/plan/planner.h"
#include "model/plan/plan_machine.h"

namespace strata::model {

// The whole report, lines ending in '\n'.
std::string plan_text(const model::Plan& plan, const Machine& machine);

// "does not fit: the closest placement (weights cpu, ...) needs 1.2 GB more cpu": the first line
// of a plan that fits nowhere.
std::string plan_shortfall(const model::Plan& plan);

// {"fits", "model", "params", "gpu_bytes", "cpu_bytes", "nvme_bytes", "step_s", "bottleneck",
//  "budgets", "missing", "described", "placement", "tiling" ({"summary", "flags", "mlp_tiles",
//  "vocab_tile", "vocab_tiles"}: the tiles the run takes), "bytes", "time", "traffic", "rates",
//  "rate_sources", "assumed_rates", "calibration", "suggestions", "untiled_alternatives" (each
//  {"change", "effect", "fits", "step_s"}), and across ranks (world.ranks > 1 only, so one rank's
//  document is today's) "world" ({"ranks", "nodes", "ranks_per_node", "scheme", "per_rank", "links",
//  "traffic", "time", "limit", "train_today" ({"runs", "text", "verdict"})}): then every byte figure is
//  one rank's}.
nlohmann::json plan_json(const model::Plan& plan, const Machine& machine);

}  // namespace strata::model
