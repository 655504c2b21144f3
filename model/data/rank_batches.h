// RankBatches: one rank's share of the training batches in a scale-out run. The loader's batches
// come in groups of one step (ranks x per_rank micro-batches, the order one rank with that many
// micro-batches per step reads them); rank r takes micro-batches r, r + ranks, r + 2 x ranks, ...
// of each group (round j of the step runs micro-batches [j x ranks, (j + 1) x ranks), one a rank:
// the order in which the gradient exchange adds them up) and passes over the others, so N ranks
// see, between them, exactly the batches of one rank. Deterministic: a pure function of the
// loader's order. Not a loader (it reads through a BatchLoader) and not a sampler.
// Thread-safety: as the BatchLoader's consumer (one thread). Lifetime: the loader outlives it.
#pragma once

#include <cstdint>

#include "model/data/batch_loader.h"
#include "runtime/status.h"

namespace strata::model {

class RankBatches {
 public:
  // invalid_argument unless 0 <= rank < ranks and per_rank >= 1. The loader must stand at a step
  // boundary (a fresh run's batch 0, or a checkpoint's position).
  static StatusOr<RankBatches> create(BatchLoader& loader, int rank, int ranks, uint64_t per_rank);

  // This rank's next micro-batch (BatchLoader::next's view and lifetime), passing over the
  // other ranks' batches before it.
  StatusOr<BatchView> next();
  // The loader position of the next step's first micro-batch (a checkpoint's position, the same
  // on every rank): between steps, it passes over the rest of this step's group first.
  StatusOr<LoaderPosition> step_position();

 private:
  RankBatches(BatchLoader& loader, uint64_t first, uint64_t ranks, uint64_t per_rank)
      : loader_(&loader), first_(first), ranks_(ranks), group_(ranks * per_rank), per_rank_(per_rank) {}
  Status pass_over(uint64_t batches);

  BatchLoader* loader_;
  uint64_t first_;     // this rank's first micro-batch within a group (its rank)
  uint64_t ranks_;     // between two of this rank's micro-batches: every rank's one of a round
  uint64_t group_;     // micro-batches per step, every rank's
  uint64_t per_rank_;  // this rank's micro-batches per step
  uint64_t read_ = 0;  // batches of the current group read from the loader so far (taken or passed)
  uint64_t taken_ = 0; // this rank's micro-batches taken in the current group
};

}  // namespace strata::model
