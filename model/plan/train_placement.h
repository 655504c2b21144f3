// Where a `strata train` run keeps its states (--offload auto), and the end-of-run comparison of
// the planner's prediction for that placement with what the run measured. The placement is the
// flags' unless the planner is asked (choose_train_placement); a placement the user chose is never
// changed, and placement never changes a bit of the training (the transparency tests). Not the
// planner (model/plan/planner.h) nor the preflight checks (train_preflight.h, train_offload.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/net/model_config.h"
#include "model/plan/planner.h"
#include "model/train/train_options.h"
#include "runtime/config.h"
#include "model/plan/plan_machine.h"

namespace strata::model {

// The choices `config` makes about placement (each key given by a flag, variable or file); with
// --offload off, every one.
model::PlanFixed plan_fixed_choices(const Config& config);

struct TrainPlacement {
  model::TrainOptions options;     // the run's options with the placement it trains
  // The planner's bytes and step time for that placement on `machine`; predicted.model is the
  // model as the run chunks it (its --vocab-tile / --mlp-tiles, auto resolved by model::with_tiling).
  model::PlanCandidate predicted;
  Machine machine;
  bool planned = false;            // the planner chose the placement (it logged one line saying so)
};

// The flags' placement -- --offload-param, --offload-optimizer / --optimizer-device, --offload-grad,
// --activation-checkpointing and their defaults -- unless
//   --offload auto is given: the planner's (model::make_plan) for the choices not given, always;
//   offload is not given and no placement key is (flag, STRATA_* variable or config file, DeepSpeed
//   keys included), and the flags' placement does not fit this machine's budgets (--gpu-mem or the
//   device's memory, --cpu-mem or MemAvailable, the free space of --nvme-path): the planner's.
// --offload off never plans; a given placement that does not fit is left to train's preflight
// checks to refuse. Logs one line when the planner chose (the placement, the flags it stands for,
// why: the bytes against the budgets, the predicted step time and bottleneck), and one when auto
// tiled the run (the tiles, their flags, the untiled and tiled device bytes against the budget).
// Errors: describe_machine's; model::check_tiling's; out_of_memory carrying the planner's report
// (`strata plan`'s text) when nothing fits, before anything is allocated.
StatusOr<TrainPlacement> choose_train_placement(const Config& config, const model::TrainOptions& o,
                                                const model::ModelConfig& model);

// What the run measured, for the comparison.
struct RunMeasured {
  uint64_t first_step = 0;  // the run's first step (1-based)
  uint64_t steps = 0;       // steps the run trained
  double mean_step_s = 0;   // of the steps after the first (the first alone when there is one)
  uint64_t gpu_peak = 0;    // the device arena's peak
  uint64_t cpu_peak = 0;    // the pinned pool's peak
};

// The end-of-run lines: predicted, measured and measured / predicted for the step time, the GPU
// arena peak and the pinned peak, then the rates the prediction used.
std::vector<std::string> prediction_lines(const TrainPlacement& placement, const RunMeasured& measured);
// {"prediction":true,"placement":..,"predicted_step_s":..,"measured_step_s":..,"step_ratio":..,
//  "measured_steps":..,"bottleneck":..,"predicted_gpu_bytes":..,"measured_gpu_peak_bytes":..,
//  "gpu_ratio":..,"predicted_cpu_bytes":..,"measured_cpu_peak_bytes":..,"cpu_ratio":..,
//  "rate_sources":{..}}: the --metrics file's last line.
std::string prediction_json_line(const TrainPlacement& placement, const RunMeasured& measured);

}  // namespace strata::model
