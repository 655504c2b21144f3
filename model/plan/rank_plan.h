// One rank's share of a run across a world of N > 1 ranks (ZeRO-3, world.h): the device arena it
// takes and the bytes it moves per step, from the single-rank size functions (placement.h, the
// offload layers' *_bytes). planner.h's plan_bytes and plan_traffic call these for N > 1 and say
// what they count; one rank's figures are the planner's own. Also the fetch count both share.
// Pure arithmetic; not the planner's search and not the world's links (world.h).
#pragma once

#include <cstdint>

#include "model/net/model_config.h"
#include "model/net/param_layout.h"
#include "model/plan/placement.h"
#include "model/plan/planner.h"
#include "model/plan/world.h"
#include "model/train/train_options.h"

namespace strata::model {

// The weight bytes a step's forwards and backwards fetch of `layout`'s chunks when `paged` bytes of
// them page (every chunk's, across ranks: each is gathered): `fetched` per pass (the forward's, and
// again the backward's), `refetched` per micro-batch (MLP tiles under checkpointing), for
// options.grad_accum micro-batches under options.step_schedule (layer-major: once for all of them,
// but the tiles).
struct WeightFetches {
  uint64_t fetched = 0, refetched = 0;
  uint64_t acquired(uint64_t micro_batches) const { return 2 * fetched + refetched * micro_batches; }
};
WeightFetches weight_fetches(const ModelConfig& config, const ParamLayout& layout, const TrainOptions& options,
                             uint64_t paged);

// Inputs and targets of options.grad_accum micro-batches, int32.
uint64_t batch_bytes(const TrainOptions& options);

// The device arena of a rank whose share is `rank` (rank_options) across `ranks` > 1 (plan_bytes).
DeviceBytes rank_device_bytes(const ModelConfig& config, const TrainOptions& rank, uint32_t ranks);

// The bytes a rank whose share is `rank` moves per step across `world` (plan_traffic).
StepTraffic rank_traffic(const ModelConfig& config, const TrainOptions& rank, const World& world);

}  // namespace strata::model
