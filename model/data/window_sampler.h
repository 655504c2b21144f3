// WindowSampler: which token windows make up batch b of epoch e -- a pure function of (dataset
// shape, B, T, seed, e, b), so a run that seeks to a saved position resumes bit-identically.
// Not a loader (batch_loader.h does the copying, on its own thread).
//
// Sampling. A row is T+1 consecutive tokens starting at a multiple of T within its segment
// (inputs = row[0..T), targets = row[1..T]); a segment of n tokens has (n-1)/T rows. A batch is
// B rows. Segments are the shards (per_shard: rows never cross a shard boundary, as llm.c) or the
// whole dataset as one sequence. Each epoch walks the segments in order; a segment contributes
// floor(rows/B) batches, the leftover rows of the epoch are dropped.
//   sequential: segments in file order, rows in order: batch b of a segment is exactly llm.c's
//               contiguous B*T+1-token window at offset b*B*T.
//   shuffled:   the segment order and the rows within each segment are permuted, afresh each
//               epoch, by a keyed bijection (a 4-round Feistel network on the index, cycle-walked
//               into range) seeded from (seed, epoch, segment): no permutation table is stored,
//               the dropped tail differs from epoch to epoch, and the same seed gives the same
//               order on every machine.
// Thread-safety: none (a per-epoch table is cached); use one sampler per thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/data/token_dataset.h"
#include "runtime/status.h"

namespace strata::model {

// Where a loader is: the next batch to be produced is batch `batch` of epoch `epoch`.
struct LoaderPosition {
  uint64_t epoch = 0;
  uint64_t batch = 0;  // < batches_per_epoch
  bool operator==(const LoaderPosition&) const = default;
};

// A bijection of [0, n) keyed by `key`: permute(i) for i < n is a permutation of [0, n).
class IndexPermutation {
 public:
  IndexPermutation(uint64_t n, uint64_t key);
  uint64_t operator()(uint64_t i) const;

 private:
  uint64_t n_;
  uint64_t key_;
  unsigned half_bits_ = 0;
};

struct WindowSamplerOptions {
  uint32_t batch_size = 0;  // B rows per batch
  uint32_t seq_len = 0;     // T tokens per row (each row reads T+1)
  bool shuffle = false;
  uint64_t seed = 0;
  bool per_shard = true;    // rows stay within one shard (llm.c); false: the dataset is one sequence
};

class WindowSampler {
 public:
  // invalid_argument when B or T is 0, or when a segment is too short for one batch: per_shard
  // names the shard's file and its token count (it needs B*T+1 tokens); otherwise the dataset.
  static StatusOr<WindowSampler> create(const TokenDataset& dataset, const WindowSamplerOptions& options);

  uint64_t batches_per_epoch() const { return batches_per_epoch_; }
  // The position after `p`: the next batch, rolling into the next epoch.
  LoaderPosition advance(LoaderPosition p) const;
  // out_of_range when p.batch >= batches_per_epoch().
  Status check(LoaderPosition p) const;

  // The first token (index in the dataset's sequence) of each of the B rows of batch p.
  // Precondition: check(p) is ok and row_starts.size() == B.
  void row_starts(LoaderPosition p, std::span<uint64_t> row_starts);

 private:
  struct Segment {
    uint64_t first_token;
    uint64_t rows;
    uint64_t batches;
  };
  WindowSampler() = default;
  void prepare_epoch(uint64_t epoch);

  WindowSamplerOptions options_;
  std::vector<Segment> segments_;
  uint64_t batches_per_epoch_ = 0;
  // Cache for the epoch last used: order_[k] = the segment walked k-th, cumulative_[k] = batches
  // before it.
  uint64_t cached_epoch_ = UINT64_MAX;
  std::vector<uint32_t> order_;
  std::vector<uint64_t> cumulative_;
};

}  // namespace strata::model
