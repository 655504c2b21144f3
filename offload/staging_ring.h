// StagingRing: a fixed set of pinned host buffers between an owner's chunks and their NvmeStore
// extents -- the NVMe staging of TierManager, the fp32 spill buffers of GradientOffloader, the
// state ring of OptimizerPipeline. Each buffer is carved once from a PinnedPool (its size given,
// its start aligned to the store's alignment), names the chunk whose bytes it holds for its owner
// (or none), and carries at most one NVMe transfer in flight: begin() starts it against the store,
// finish() waits for it, counts its bytes and wait, and records a trace span from begin to finish.
// Not a policy: which buffer to take, when to reuse one and what a buffer's bytes mean stay with
// the owner (LRU for the spills, round robin for the tier manager, the walk for the optimizer).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "offload/nvme_store.h"
#include "runtime/pinned_pool.h"
#include "runtime/status.h"

namespace strata {

class TraceRecorder;  // offload/trace.h

struct StagingRingOptions {
  std::string name = "staging";               // the owner, first in every message ("weights")
  std::string what = "NVMe staging buffer";   // one buffer, in allocation errors
  std::string read_track = "nvme read";       // trace tracks of the transfers
  std::string write_track = "nvme write";
  // How a transfer of chunk c is named (default, both: "chunk <c>"): `span_name` in the trace, and
  // `subject` in errors, "<name>: NVMe read of <subject>" ("the state of chunk 3").
  std::function<std::string(size_t chunk)> span_name;
  std::function<std::string(size_t chunk)> subject;
};

// Since creation or reset_stats(): bytes moved by transfers that finished ok (as given to begin),
// and the time finish() spent waiting, every transfer counted.
struct StagingRingStats {
  uint64_t read_bytes = 0;
  uint64_t write_bytes = 0;
  uint64_t read_wait_ns = 0;
  uint64_t write_wait_ns = 0;
};

// Ownership: the ring owns its pinned buffers (returned to the pool when it dies); the store and
// the trace recorder are borrowed and outlive it. Every transfer begun must be finished before the
// ring (and the extent) goes: the owner's destructor finishes them.
// Thread-safety: a buffer (its holder, bytes and transfer) belongs to one thread at a time, the one
// the owner hands it to (GradientOffloader's d2h callbacks finish and begin transfers of the buffer
// they were queued for); different buffers may be used from different threads at once. stats() and
// reset_stats() are safe from any thread. carve() runs once, before any other use.
class StagingRing {
 public:
  struct Buffer {
    std::byte* data = nullptr;  // aligned to the store's alignment; `bytes` long
    uint64_t bytes = 0;         // the size carve() was given for it
    int64_t holder = -1;        // the chunk whose bytes it holds, by the owner's policy; -1: none
    bool pending() const { return pending_; }
    IoOp op() const { return op_; }              // of the transfer pending (or the last one)
    size_t chunk() const { return chunk_; }       // of the transfer pending (or the last one)

   private:
    friend class StagingRing;
    PinnedBuffer memory_;
    ExtentIo io_;
    bool pending_ = false;
    IoOp op_ = IoOp::read;
    size_t chunk_ = 0;
    uint64_t io_bytes_ = 0;
    double begin_us_ = 0;
  };

  // Pinned bytes carve() takes for buffers of `sizes`: each rounded up to 4 KiB (the pool's
  // granule), plus `alignment` where it exceeds 4 KiB (the slack that aligns the start). Pure.
  static uint64_t pinned_bytes(std::span<const uint64_t> sizes, uint64_t alignment);

  // `store` may be null for a ring that stays empty (a cpu home); `trace` is optional.
  StagingRing(NvmeStore* store, TraceRecorder* trace, StagingRingOptions options);
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // One buffer per entry of `sizes` (bytes it must hold; the caller pads them as its transfers
  // need: a transfer moves store.padded_size of its extent). out_of_memory from the pool names the
  // buffer ("<name>: pinned <what> 2 of 3") and the pinned bytes all of them need. Needs the store.
  Status carve(PinnedPool& pool, std::span<const uint64_t> sizes);

  size_t size() const { return buffers_.size(); }
  Buffer& operator[](size_t b) { return buffers_[b]; }
  const Buffer& operator[](size_t b) const { return buffers_[b]; }
  uint64_t pinned_bytes() const;  // as carved (the pool's block sizes)

  // Begins moving `extent` (chunk `chunk`'s) between buffer b and the store; `bytes` is what the
  // stats count for it once it finishes ok. Precondition: nothing pending in b. A begin error
  // (failed_precondition, no_space...) is returned with "<name>: NVMe read of <subject>" in front,
  // nothing pending.
  Status begin(size_t b, IoOp op, ExtentId extent, size_t chunk, uint64_t bytes);
  // Finishes b's pending transfer (ok when none): waits, counts, records the span (args chunk,
  // bytes, ok), and returns the store's error (io_error past its retries, corruption on a CRC
  // mismatch) with the context above. Nothing is pending afterwards, whatever the outcome.
  Status finish(size_t b);
  // True when finish(b) would not wait for the device: nothing pending, or its transfer completed
  // (NvmeStore::done). Never blocks.
  bool done(size_t b) const;

  StagingRingStats stats() const;
  void reset_stats();

 private:
  std::string describe(IoOp op, size_t chunk) const;

  NvmeStore* const store_;
  TraceRecorder* const trace_;
  const StagingRingOptions options_;
  std::vector<Buffer> buffers_;
  std::atomic<uint64_t> read_bytes_{0};
  std::atomic<uint64_t> write_bytes_{0};
  std::atomic<uint64_t> read_wait_ns_{0};
  std::atomic<uint64_t> write_wait_ns_{0};
};

}  // namespace strata
