// BatchLoader: a loader thread that assembles (inputs, targets) int32 batches of shape (B, T)
// ahead of the training step into a ring of `depth` pinned buffers (strata::PinnedPool), so the
// step waits for data only when the loader is behind. Which windows make a batch is
// WindowSampler's pure function of (seed, epoch, batch), so position()/seek() resume a run
// bit-identically. Train/validation: give each its own loader over its own TokenDataset (a
// separate file set, or TokenDataset::split_tail for the last fraction of the tokens).
// Not a tokenizer and not a device copy: the trainer copies the pinned batch to the device.
// Thread-safety: one consumer thread calls next()/position()/seek()/stop(); the loader thread is
// internal. Lifetime: the pool outlives the loader; the destructor stops and joins the thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "model/data/token_dataset.h"
#include "model/data/window_sampler.h"
#include "runtime/mutex.h"
#include "runtime/pinned_pool.h"
#include "runtime/status.h"

namespace strata::model {

struct BatchLoaderOptions {
  WindowSamplerOptions sampling;  // B, T, shuffle, seed, per_shard
  uint32_t depth = 4;             // pinned batch buffers in the ring (>= 2): depth-1 are filled ahead
  LoaderPosition start;           // the first batch next() returns
};

// Pinned bytes create() takes for the ring: depth buffers of 2 * B * T int32 (inputs and
// targets), each rounded up to the pool's 4 KiB blocks. For the planner (model/plan/planner.h).
uint64_t batch_loader_pinned_bytes(const BatchLoaderOptions& options);

// A batch in pinned memory. Valid until the next call to next() or seek()-then-next() -- that is
// when its buffer goes back to the ring -- or until the loader is destroyed.
struct BatchView {
  const int32_t* inputs = nullptr;   // (B, T) row-major
  const int32_t* targets = nullptr;  // (B, T): targets[b][t] = inputs[b][t+1] of the same window
  uint32_t batch_size = 0;
  uint32_t seq_len = 0;
  LoaderPosition position;           // which batch this is
};

class BatchLoader {
 public:
  // Errors: the sampler's (B or T zero, data too short for one batch), depth < 2
  // (invalid_argument), a start position outside the epoch (out_of_range), and the pool's
  // out_of_memory for the ring (depth * 2 * B * T * 4 bytes).
  static StatusOr<std::unique_ptr<BatchLoader>> create(TokenDataset dataset, PinnedPool& pool,
                                                       const BatchLoaderOptions& options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The next batch in order; blocks only while the loader has not finished it. Returns the
  // previously returned buffer to the ring. failed_precondition after stop().
  StatusOr<BatchView> next() EXCLUDES(mu_);

  // The position of the batch the next call to next() returns (save this in a checkpoint).
  LoaderPosition position() const EXCLUDES(mu_);
  // Makes the next call to next() return batch `p`; batches filled ahead are discarded.
  // out_of_range when p.batch >= batches_per_epoch().
  Status seek(LoaderPosition p) EXCLUDES(mu_);

  uint64_t batches_per_epoch() const { return batches_per_epoch_; }
  // Stops and joins the loader thread; idempotent. Afterwards next() fails.
  void stop() EXCLUDES(mu_);

 private:
  struct Ready {
    uint32_t buffer;
    LoaderPosition position;
  };
  BatchLoader(TokenDataset dataset, WindowSampler sampler, const BatchLoaderOptions& options);
  void run() EXCLUDES(mu_);
  void fill(uint32_t buffer, LoaderPosition p, std::vector<uint64_t>& starts, std::vector<int32_t>& row);

  // Constant once create() has returned (a buffer's bytes belong to whoever holds its number).
  const TokenDataset dataset_;
  // Its const advance()/check() are called from both threads; row_starts(), which caches, only
  // from the loader thread.
  WindowSampler sampler_;
  const uint32_t batch_size_;
  const uint32_t seq_len_;
  const uint64_t batches_per_epoch_;
  std::vector<PinnedBuffer> buffers_;  // each: inputs (B*T int32) then targets (B*T int32)

  // State below is protected by mu_.
  mutable Mutex mu_;
  CondVar cv_;  // a buffer freed, a batch ready, a seek, or stopping_
  std::deque<uint32_t> free_buffers_ GUARDED_BY(mu_);
  std::deque<Ready> ready_ GUARDED_BY(mu_);
  int64_t held_buffer_ GUARDED_BY(mu_) = -1;  // buffer of the batch last returned by next()
  LoaderPosition fill_position_ GUARDED_BY(mu_);  // next batch the loader thread fills
  LoaderPosition next_position_ GUARDED_BY(mu_);  // next batch next() returns
  uint64_t generation_ GUARDED_BY(mu_) = 0;       // bumped by seek(): fills of an older generation are dropped
  bool stopping_ GUARDED_BY(mu_) = false;

  std::thread thread_;  // started last by create(); joined by stop()
};

}  // namespace strata::model
