// GradientOffloader: the GradSink (chunk_source.h) that streams each layer's gradients off the
// device as soon as its backward is done and accumulates them in fp32 in pinned host memory across
// micro-batches, computing each chunk's share of the global norm as its last contribution of the
// step arrives. The backward writes into a few device slots per slot group (carved once at create),
// never into a gradient buffer per chunk. Accumulation and norm follow the one definition in
// kernels/cpu/grad_accumulate.h, so the result is the same bits whatever the slot count, the pool
// size or the timing. Not an optimizer and not a clipper: it hands out the accumulated fp32
// gradients and the global squared norm; the caller scales, clips and steps.
//
// Per release(c) the streams do:
//   compute: [backward writes slot]  record(ready)
//   d2h:     wait(ready)  copy slot -> staging  record(slot copied-out)  callback: accumulate
//            staging into chunk c's fp32 accumulator (+ chunk c's norm partial when it is the
//            step's last contribution)
// and the next acquire of that slot makes compute wait for its copied-out event, then zero it.
//
// Thread-safety: one thread (the one that drives the model) calls begin_step, set_last_micro_batch,
// acquire, release, finish_step and accumulated. The accumulation callbacks run on the backend's
// d2h stream thread (and the ThreadPool's workers, if given); finish_step synchronizes with them.
// stats()/reset_stats() are safe from any thread.
// Lifetime: the backend, the pinned pool, the thread pool and the trace recorder (those given)
// outlive the offloader; the destructor waits for the d2h stream before freeing memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/grad_accumulate.h"
#include "kernels/cpu/half.h"
#include "offload/chunk_source.h"
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
  std::string name = "gradient";  // in messages, allocation tags and trace span names
};

// Device bytes create() allocates for `options`: per group, slots x its largest chunk (rounded to
// the arena's 256-byte alignment). For the planner's preflight. Options are not validated here.
uint64_t gradient_offloader_device_bytes(const GradientOffloaderOptions& options);
// Pinned host bytes create() takes from the pool: each chunk's fp32 accumulator
// (chunk_bytes / element size floats) plus one staging buffer of the largest chunk, each rounded
// up to 4 KiB.
uint64_t gradient_offloader_pinned_bytes(const GradientOffloaderOptions& options);

struct GradientOffloaderStats {
  uint64_t d2h_bytes = 0;           // bytes copied device -> host (queued by release)
  uint64_t contributions = 0;       // releases accumulated
  double accumulate_seconds = 0.0;  // host time in accumulate_widened (d2h callbacks)
  double partials_seconds = 0.0;    // host time in per-chunk sum of squares (callbacks + finish)
};

class GradientOffloader final : public GradSink {
 public:
  // Validates `options`, then allocates every device slot (backend.allocate, tags
  // "<name> slot (<group>) i/n") and every pinned buffer (pool.acquire). Errors name what failed;
  // a failure frees what was taken. `pool` (optional) splits accumulation and norm blocks over
  // its workers; `trace` (optional) gets a "d2h" span per copy and a "host accumulate" span per
  // accumulation.
  static StatusOr<std::unique_ptr<GradientOffloader>> create(Backend& backend, PinnedPool& pinned,
                                                             const GradientOffloaderOptions& options,
                                                             ThreadPool* pool = nullptr,
                                                             TraceRecorder* trace = nullptr);
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
  // or every slot of c's group held.
  StatusOr<std::byte*> acquire(size_t c) override;
  // Queues the copy-out of c's slot and its accumulation into c's fp32 accumulator (see the top).
  // `last`: the backward's last contribution to c in this micro-batch; with the last-micro-batch
  // flag set, chunk c's norm partial is computed right after its accumulation.
  Status release(size_t c, bool last) override;

  // ---- the step ---------------------------------------------------------------------------------
  // Whether the micro-batch whose backward follows is the step's last (the trainer calls it before
  // each backward).
  void set_last_micro_batch(bool last) { last_micro_batch_ = last; }

  // Waits for every copy and accumulation of the step; zero-fills chunks that got no contribution;
  // computes the partials that are missing; returns the global squared norm: sum over chunks in
  // chunk order, starting from +0.0, of kernels::sum_squares(accumulated(c)) (double). Non-finite
  // if any accumulated element is. failed_precondition if a chunk is still held or no step began;
  // a stream error of the step is returned here.
  StatusOr<double> finish_step();

  // Chunk c's accumulated fp32 gradient: accumulated_count(c) floats, element i = element i of the
  // chunk's working-precision layout (padding included, zero). Valid from finish_step until the
  // next begin_step. Precondition: c < chunk_count().
  const float* accumulated(size_t c) const;
  size_t accumulated_count(size_t c) const;
  // Chunk c's squared-norm partial of the finished step (kernels::sum_squares of accumulated(c)).
  double partial(size_t c) const;

  size_t chunk_count() const { return chunks_.size(); }
  uint64_t chunk_bytes(size_t c) const;
  kernels::FloatFormat format() const { return options_.format; }

  GradientOffloaderStats stats() const;
  void reset_stats();

 private:
  struct Slot {
    std::byte* device = nullptr;
    uint64_t bytes = 0;
    std::unique_ptr<Event> ready;       // compute: the backward's writes are queued before it
    std::unique_ptr<Event> copied_out;  // d2h: the slot's last copy-out is queued before it
    long held_by = -1;                  // chunk holding it, or -1 (driving thread only)
  };
  struct Group {
    std::string name;
    std::vector<Slot> slots;
    size_t next = 0;  // round-robin cursor (driving thread only)
  };
  struct Chunk {
    uint64_t bytes = 0;
    size_t group = 0;
    long slot = -1;            // held slot, or -1 (driving thread only)
    PinnedBuffer accumulator;  // fp32, bytes / element size floats
    // Per step, written by the d2h callbacks; read by the driving thread after synchronize(d2h).
    bool touched = false;        // got a contribution this step
    bool partial_ready = false;  // partial holds the sum of squares of the step's final value
    double partial = 0.0;
  };

  GradientOffloader(Backend& backend, const GradientOffloaderOptions& options, ThreadPool* pool,
                    TraceRecorder* trace);
  // Runs on the d2h stream: accumulate staging into chunk c; the partial too when `final`.
  void accumulate_callback(size_t c, bool final);
  double chunk_sum_squares(size_t c);
  size_t elements(size_t c) const { return chunks_[c].bytes / kernels::float_format_size(options_.format); }

  Backend& backend_;
  const GradientOffloaderOptions options_;
  ThreadPool* const pool_;
  TraceRecorder* const trace_;
  std::vector<Group> groups_;
  std::vector<Chunk> chunks_;
  PinnedBuffer staging_;  // one chunk's working-precision gradient, the largest chunk's size
  kernels::ParallelFor parallel_for_;  // over pool_'s workers; empty without a pool
  bool in_step_ = false;            // driving thread only
  bool last_micro_batch_ = true;    // driving thread only; captured by value into each callback
  Status sticky_;                   // the first backend failure; every later call returns it

  std::atomic<uint64_t> d2h_bytes_{0};
  std::atomic<uint64_t> contributions_{0};
  std::atomic<uint64_t> accumulate_ns_{0};
  std::atomic<uint64_t> partials_ns_{0};
};

}  // namespace strata
