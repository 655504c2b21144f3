// The datasets one training run reads: its training tokens (--random-tokens, the built-in corpus,
// --text or --data files of one layout) and, when it evaluates, its validation tokens (--val-data
// or the tail --val-fraction splits off). Opening only: each open logs one "data: ..." line; the
// batches are drawn by model/data/batch_loader.h. Not the sampling nor the loaders.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "model/data/token_dataset.h"
#include "model/train/train_options.h"
#include "runtime/status.h"

namespace strata::model {

// Ownership: `random` holds the tokens of --random-tokens, which `train` and `val` view (no copy):
// keep it with them. Thread-safety: as TokenDataset's.
struct RunData {
  TokenDataset train;
  std::optional<TokenDataset> val;
  std::shared_ptr<const std::vector<uint32_t>> random;  // null unless --random-tokens
};

// The datasets of a run of `o` over a vocabulary of `vocab` tokens; `seed` draws --random-tokens.
// Errors: a missing or unreadable file (not_found, naming it), files of two layouts
// (invalid_argument), TokenDataset's.
StatusOr<RunData> open_run_data(const TrainOptions& o, uint32_t vocab, uint64_t seed);

}  // namespace strata::model
