// The step schedule a run uses (TrainOptions::step_schedule, train_options.h), resolved once
// before the model is created: micro-batch-major or layer-major, and why, for the log. Not the
// schedule itself: Trainer::step runs it (Transformer::forward / backward per micro-batch, or
// Transformer::step_layer_major), and the planner counts its memory (estimate_device_bytes).
#pragma once

#include <cstdint>
#include <string>

#include "model/net/model_config.h"
#include "model/train/train_options.h"
#include "runtime/status.h"

namespace strata::model {

struct ScheduleChoice {
  StepSchedule schedule = StepSchedule::micro_batch_major;  // never automatic
  std::string why;                                          // one sentence for the run's log
};

// auto is layer-major where it pays and fits: more than one micro-batch per rank per step (K =
// grad_accum / world_size), weights paged (homed on cpu or nvme: resident weights cross nothing) or,
// across ranks, partitioned (ZeRO-3: each chunk gathered per use), activation checkpointing on (else
// every activation would be kept K times), and estimate_device_bytes with layer-major (its K a
// rank's: options.ranks is the world) within `device_budget`; else micro-batch-major, saying which
// condition failed and what would change it. An explicit choice is kept (layer-major with one
// micro-batch per rank is micro-batch-major: the same work). Across ranks the exchange keeps the
// one-rank order either way (each chunk's contributions round by round: DeviceGrads,
// GradientExchange). Error, saying what to pass instead: an explicit layer-major over
// `device_budget`, out_of_memory.
StatusOr<ScheduleChoice> choose_step_schedule(const ModelConfig& config, const TrainOptions& options, int world_size,
                                              uint64_t device_budget);

}  // namespace strata::model
