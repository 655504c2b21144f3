// GradientOffloader: the GradSink (chunk_source.h) that streams each layer's gradients off the
// device as soon as its backward is done and accumulates them in fp32 on the host across
// micro-batches, computing each chunk's share of the global norm as its last contribution of the
// step arrives. The fp32 accumulators live at home in pinned memory (one per chunk, home cpu) or in
// one NvmeStore extent per chunk, spilled through a few pinned buffers (home nvme). The backward
// writes into a few device slots per slot group (carved once at create), never into a gradient
// buffer per chunk. Accumulation and norm follow the one definition in
// kernels/cpu/grad_accumulate.h, so the result is the same bits whatever the home, the slot or
// spill buffer count, the pool size or the timing. Not an optimizer and not a clipper: it hands out
// the accumulated fp32 gradients and the global squared norm; the caller scales, clips and steps.
//
// Per release(c) the streams do:
//   compute: [backward writes slot]  record(slot filled)
//   d2h:     wait(filled)  copy slot -> staging  record(slot drained)  callback: accumulate
//            staging into chunk c's fp32 accumulator (+ chunk c's norm partial when it is the
//            step's last contribution)
// and the next acquire of that slot makes compute wait for its drained event, then zero it.
//
// Home nvme: a chunk's accumulator is in a spill buffer only from its acquire to its `last`
// release of a micro-batch (and after that while no other chunk needs the buffer). acquire(c)
// takes a buffer (a free one, else the one whose chunk closed longest ago: its write is waited
// for) and, if c already got a contribution this step and its value is in the extent, begins the
// extent read then, under the backward's compute. The callback finishes that read (or the
// buffer's previous write of c), accumulates as above, and at c's `last` contribution of the
// micro-batch begins the extent write. Who waits for what (no cycle, so no deadlock):
//   driving thread: for a released chunk's callback (event synchronize) and its write, when it
//                   reclaims that chunk's buffer; for reads it began itself (wait_read).
//   d2h callback:   only for I/O begun before it was queued (the read begun by acquire, the same
//                   buffer's previous write), never for the driving thread.
//
// Thread-safety: one thread (the one that drives the model) calls every method but stats() /
// reset_stats(), which are safe from any thread. The accumulation callbacks run on the backend's
// d2h stream thread (and the ThreadPool's workers, if given); finish_step synchronizes with them.
// Lifetime: the backend, the pinned pool, the store, the thread pool and the trace recorder (those
// given) outlive the offloader; the destructor waits for the d2h stream and every NVMe transfer
// before freeing memory and extents.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/grad_accumulate.h"
#include "kernels/cpu/half.h"
#include "offload/chunk_source.h"
#include "offload/nvme_store.h"
#include "offload/slot_group.h"
#include "offload/staging_ring.h"
#include "offload/sticky_error.h"
#include "offload/tier.h"
#include "runtime/backend.h"
#include "runtime/pinned_pool.h"
#include "runtime/status.h"

namespace strata {

class ThreadPool;
class TraceRecorder;

struct GradientOffloaderOptions {
  // Per chunk (ParamLayout::chunks order): bytes of its gradient in the working precision, padding
  // included (padded to 4 KiB by the layout; must be a multiple of the element size, > 0).
  std::vector<uint64_t> chunk_bytes;
  // Element format of the gradients the backward writes on the device.
  kernels::FloatFormat format = kernels::FloatFormat::f32;
  // Per chunk: its slot group (index into group_slots). Every group holds group_slots[g] device
  // buffers of its largest chunk's bytes. Typical: layers in one group of 2 slots (the next
  // layer's backward writes one while the previous one is copied out), embedding and head 1 each.
  std::vector<size_t> chunk_group;
  std::vector<size_t> group_slots;  // per group, >= 1
  // Per group, for allocation tags and messages ("layers", "embedding"); empty: "group <g>".
  std::vector<std::string> group_names;
  std::string name = "gradient";  // in messages, allocation tags, extent and trace span names
  // Where the fp32 accumulators live: cpu (pinned, one per chunk: 4 bytes per parameter) or nvme
  // (one NvmeStore extent per chunk, accumulated through spill_buffers pinned buffers).
  Tier home = Tier::cpu;
  // nvme: pinned fp32 accumulator buffers, buffer i the size of the i-th largest chunk's (so one
  // large embedding costs one large buffer, the rest are a layer's); a chunk takes the smallest
  // free buffer that holds it. >= 2: the tied embedding keeps one from the head's contribution to
  // its own, while the layers go through another (a chunk's buffer is taken back only after its
  // write). 3 or more let a chunk's write overlap the next chunk's read and accumulation.
  uint32_t spill_buffers = 3;
  // Keep each chunk's norm partial as its blocks too (block_partials): a rank of a partitioned run
  // gives its shards' blocks to the others (offload/gradient_exchange.h).
  bool block_partials = false;
};

// Device bytes create() allocates for `options`: per group, slots x its largest chunk (rounded to
// the arena's 256-byte alignment). For the planner's preflight. Options are not validated here.
uint64_t gradient_offloader_device_bytes(const GradientOffloaderOptions& options);
// Pinned host bytes create() takes from the pool: home cpu: each chunk's fp32 accumulator
// (chunk_bytes / element size floats); home nvme: spill_buffers buffers, buffer i the i-th
// largest chunk's accumulator padded to the store's alignment (plus that alignment where it
// exceeds 4 KiB); and
// one staging buffer of the largest chunk; each rounded up to 4 KiB.
uint64_t gradient_offloader_pinned_bytes(const GradientOffloaderOptions& options, uint32_t store_alignment = 4096);
// NVMe bytes of the extents create() allocates (home nvme: each chunk's fp32 accumulator padded to
// the store's alignment; 0 for home cpu), for a preflight against the store's reservation.
uint64_t gradient_offloader_nvme_bytes(const GradientOffloaderOptions& options, uint32_t store_alignment = 4096);

struct GradientOffloaderStats {
  uint64_t d2h_bytes = 0;           // bytes copied device -> host (queued by release)
  uint64_t contributions = 0;       // releases accumulated
  double accumulate_seconds = 0.0;  // host time in accumulate_widened (d2h callbacks)
  double partials_seconds = 0.0;    // host time in per-chunk sum of squares (callbacks + finish)
  // Home nvme: padded bytes moved between the spill buffers and the extents (during the step and
  // by the reads after it), and time spent finishing those transfers: reads (d2h callbacks,
  // wait_read, finish_step) and writes (a buffer taken back, a chunk's next contribution, finish_step).
  uint64_t nvme_read_bytes = 0;
  uint64_t nvme_write_bytes = 0;
  double nvme_read_wait_seconds = 0.0;
  double nvme_write_wait_seconds = 0.0;
};

class GradientOffloader final : public GradSink {
 public:
  // Validates `options` (invalid_argument naming what is wrong; home nvme needs `store` and
  // spill_buffers >= 2; a store given with home cpu is not used), then allocates every device slot
  // (backend.allocate, tags "<name> slot (<group>) i/n"), every extent (store.allocate, named
  // "<name> chunk <c>"; no_space names the chunk) and every pinned buffer (pool.acquire). Errors
  // name what failed; a failure frees what was taken. `pool` (optional) splits accumulation and
  // norm blocks over its workers; `trace` (optional) gets a "d2h" span per copy, a "host
  // accumulate" span per accumulation and, home nvme, a span per extent transfer on tracks
  // "grad nvme read" / "grad nvme write" (from begin to finish).
  static StatusOr<std::unique_ptr<GradientOffloader>> create(Backend& backend, PinnedPool& pinned,
                                                             const GradientOffloaderOptions& options,
                                                             ThreadPool* pool = nullptr,
                                                             TraceRecorder* trace = nullptr,
                                                             NvmeStore* store = nullptr);
  ~GradientOffloader() override;
  GradientOffloader(const GradientOffloader&) = delete;
  GradientOffloader& operator=(const GradientOffloader&) = delete;

  // ---- GradSink ---------------------------------------------------------------------------------
  // Starts a step: every chunk's accumulated gradient becomes zero (lazily: a chunk's first
  // contribution of the step is copied, not added; a chunk with none reads as zero after
  // finish_step). Waits for the d2h stream (a no-op after finish_step). Sets the last-micro-batch
  // flag to true (a step of one micro-batch needs no set_last_micro_batch call).
  Status begin_step() override;
  // A zeroed device buffer of chunk_bytes(c) in chunk c's format: the next free slot of c's group
  // (round-robin), ready for compute work queued after the call (compute waits for the slot's
  // previous copy-out, then zero-fills it). failed_precondition: outside a step, c already held,
  // or every slot of c's group held. Home nvme: also gives c a spill buffer unless it has one
  // (may block for an older chunk's callback and write, see the top) and begins the read of c's
  // extent when an earlier micro-batch's value is there; failed_precondition when every spill
  // buffer holds a chunk still open (acquired, or released with last = false).
  StatusOr<std::byte*> acquire(size_t c) override;
  // Queues the copy-out of c's slot and its accumulation into c's fp32 accumulator (see the top).
  // `last`: the backward's last contribution to c in this micro-batch; with the last-micro-batch
  // flag set, chunk c's norm partial is computed right after its accumulation.
  Status release(size_t c, bool last) override;

  // ---- the step ---------------------------------------------------------------------------------
  // Whether the micro-batch whose backward follows is the step's last (the trainer calls it before
  // each backward).
  void set_last_micro_batch(bool last) override { last_micro_batch_ = last; }

  // Waits for every copy, accumulation and (home nvme) extent write of the step; chunks that got
  // no contribution read as zero; computes the partials that are missing (home nvme: reading the
  // extent back where the value is no longer in a spill buffer); returns the global squared norm:
  // sum over chunks in chunk order, starting from +0.0, of kernels::sum_squares of the chunk's
  // accumulated gradient (double), the same bits for both homes. Non-finite if any accumulated
  // element is. failed_precondition if a chunk is still held or no step began; a stream error of
  // the step, or an NVMe error or CRC mismatch (naming the chunk), is returned here and sticks.
  StatusOr<double> finish_step() override;

  // ---- reading the finished step's gradients (both homes) -------------------------------------
  // Between finish_step and the next begin_step, in any order: begin_read(c) .. wait_read(c) ..
  // end_read(c). Home cpu: no I/O; wait_read returns accumulated(c). Home nvme: begin_read takes a
  // spill buffer not held by another read (c's own if its value is still in one: no I/O) and
  // begins c's extent read (a chunk without contribution is zero-filled, no I/O), in the smallest
  // buffer that holds c and is free of reads (the largest chunk fits only the largest buffer). When
  // reads hold every such buffer, one not waited for yet gives its buffer up (its wait_read reads
  // it again); when wait_read has handed them all out, failed_precondition: it never waits. begin_read of a chunk already begun is a no-op; wait_read without begin_read
  // begins it; end_read of a chunk not begun is a no-op. failed_precondition during a step.
  Status begin_read(size_t c);
  // Chunk c's accumulated fp32 gradient (accumulated_count(c) floats, as accumulated()), valid
  // until end_read(c) (home cpu: until the next begin_step). A read error (io_error past the
  // store's retries, corruption on a CRC mismatch) names the chunk; it is not sticky (the read is
  // ended; a later wait_read tries again).
  StatusOr<const float*> wait_read(size_t c);
  void end_read(size_t c);

  // Home cpu only (nullptr for home nvme: use wait_read). Chunk c's accumulated fp32 gradient:
  // accumulated_count(c) floats, element i = element i of the chunk's working-precision layout
  // (padding included, zero). Valid from finish_step until the next begin_step. Precondition:
  // c < chunk_count().
  const float* accumulated(size_t c) const;
  size_t accumulated_count(size_t c) const;
  // Chunk c's squared-norm partial of the finished step (kernels::sum_squares of accumulated(c)).
  double partial(size_t c) const;
  // With options.block_partials: chunk c's partial as its blocks (kernels::sum_squares's b_k,
  // ceil(accumulated_count(c) / kSumSquaresBlock) of them; partial(c) is their ordered sum).
  // Valid from finish_step until the next begin_step; empty without the option.
  std::span<const double> block_partials(size_t c) const { return chunks_[c].blocks; }

  size_t chunk_count() const { return chunks_.size(); }
  uint64_t chunk_bytes(size_t c) const;
  kernels::FloatFormat format() const { return options_.format; }
  Tier home() const { return options_.home; }

  GradientOffloaderStats stats() const;
  void reset_stats();

 private:
  struct Chunk {
    uint64_t bytes = 0;
    size_t group = 0;
    long slot = -1;            // held slot, or -1 (driving thread only)
    PinnedBuffer accumulator;  // home cpu: fp32, bytes / element size floats
    // Home nvme (driving thread only).
    ExtentId extent = 0;
    long spill = -1;         // spill buffer holding (or accumulating) its value, or -1
    bool open = false;       // acquired, or released with last = false: its buffer stays
    bool released = false;   // released this step: its value is in its buffer or its extent
    bool reading = false;    // between begin_read and end_read
    bool handed_out = false; // wait_read gave out its buffer (until end_read): the buffer stays
    // Per step, written by the d2h callbacks; read by the driving thread after synchronize(d2h).
    bool touched = false;        // got a contribution this step
    bool partial_ready = false;  // partial holds the sum of squares of the step's final value
    double partial = 0.0;
    std::vector<double> blocks;  // options.block_partials: the partial's blocks
  };
  // Home nvme: the policy's state of spill buffer b (spills_[b]; its holder is the chunk whose
  // value it holds, driving thread only, -1: free).
  struct SpillUse {
    uint64_t closed_at = 0;       // use_clock_ when its chunk last closed or was read (LRU)
    std::unique_ptr<Event> done;  // d2h: the buffer's last callback is queued before it
  };

  GradientOffloader(Backend& backend, const GradientOffloaderOptions& options, ThreadPool* pool,
                    TraceRecorder* trace, NvmeStore* store);
  Status carve_nvme(PinnedPool& pinned);
  // Runs on the d2h stream: accumulate staging into chunk c's accumulator (cpu) or spill buffer b
  // (nvme, then the extent write when `last`); the partial too when `final`.
  void accumulate_callback(size_t c, bool final);
  void spill_callback(size_t c, size_t b, bool final, bool last);
  void accumulate_into(size_t c, float* acc, bool final);
  double chunk_sum_squares(size_t c, const float* acc);
  size_t elements(size_t c) const { return chunks_[c].bytes / kernels::float_format_size(options_.format); }
  bool nvme() const { return options_.home == Tier::nvme; }

  // Home nvme helpers (driving thread unless noted).
  // The buffer for c: among those that hold it, free or holding a closed chunk not being read (not
  // `except`), the smallest; ties: a free one, else the one whose chunk closed longest ago. -1: none.
  long pick_spill(size_t c, long except) const;
  StatusOr<size_t> take_spill(size_t c);      // pick_spill's buffer, taken back from its chunk
  Status load_for_read(size_t c);             // a buffer holding c's value (its read begun), if it has none
  Status begin_extent_io(size_t c, size_t b, IoOp op);  // c's extent <-> spill b; any thread owning b
  float* spill_data(size_t b) const { return reinterpret_cast<float*>(spills_[b].data); }
  void detach(size_t b);                      // b free, its chunk without a buffer

  Backend& backend_;
  const GradientOffloaderOptions options_;
  ThreadPool* const pool_;
  TraceRecorder* const trace_;
  NvmeStore* const store_;  // home nvme only
  // Device slots per group (driving thread only). A slot's chunk: the one holding it (acquired,
  // not released), -1: free; `filled` (compute): the backward's writes are queued before it;
  // `drained` (d2h): its last copy-out is queued before it.
  std::vector<SlotGroup> groups_;
  std::vector<size_t> group_next_;  // per group, the round-robin cursor
  std::vector<Chunk> chunks_;
  // Home nvme: the fp32 spill buffers (buffer i the i-th largest chunk's accumulator) and their
  // transfers. A buffer's transfer belongs to the d2h thread while a callback for the buffer is
  // queued (between a release and its `done` mark), else to the driving thread; the stream order
  // and the event synchronize hand it over.
  StagingRing spills_;
  std::vector<SpillUse> spill_use_;  // per spill buffer
  uint64_t use_clock_ = 0;      // driving thread only
  PinnedBuffer staging_;  // one chunk's working-precision gradient, the largest chunk's size
  kernels::ParallelFor parallel_for_;  // over pool_'s workers; empty without a pool
  bool in_step_ = false;            // driving thread only
  bool last_micro_batch_ = true;    // driving thread only; captured by value into each callback
  // The first failure, of the driving thread or a d2h callback; every later call returns it.
  StickyError sticky_;

  std::atomic<uint64_t> d2h_bytes_{0};
  std::atomic<uint64_t> contributions_{0};
  std::atomic<uint64_t> accumulate_ns_{0};
  std::atomic<uint64_t> partials_ns_{0};
  std::atomic<uint64_t> spill_wait_ns_{0};  // taking a buffer back: its last callback (a write wait)
};

}  // namespace strata
