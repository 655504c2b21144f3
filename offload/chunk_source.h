// The chunk source: how the model gets device memory for its parameter chunks (WeightSource) and
// where its gradients go (GradSink), at layer boundaries. The model never owns parameter memory:
// forward and backward acquire a chunk's device pointer, bind tensor pointers from the
// ParamLayout spec table for whatever address they got, queue their compute, and release it.
// Implementations: ResidentWeights (every chunk on the device, today's behaviour), TierManager
// (chunks homed on pinned CPU or NVMe, paged through a few device slots ahead of the compute);
// DeviceGrads (a gradient buffer per chunk on the device, accumulated in place) and
// GradientOffloader (gradients streamed to pinned host memory and accumulated in fp32 there).
// Chunks are numbered as ParamLayout::chunks; sizes are the working precision's padded bytes.
// The third chunk interface, the Optimizer (where and when each chunk's update lands), is
// offload/optimizer.h.
//
// Ordering: every device pointer a source hands out is ready for compute work queued after the
// call returns (the source makes Stream::compute wait for the data's arrival, the host need not
// block); a release means "the compute work queued so far is the last to touch it".
// Thread-safety: one thread (the one that drives the model) calls a source.
// Lifetime: a source outlives the model that uses it; pointers are valid from acquire to release.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/backend.h"
#include "runtime/status.h"

namespace strata {

class WeightSource {
 public:
  virtual ~WeightSource() = default;

  virtual size_t chunk_count() const = 0;
  virtual uint64_t chunk_bytes(size_t c) const = 0;

  // Names the access sequence that follows until end_sequence() ("train" for an optimizer step's
  // micro-batches, "eval" for evaluation): a paging source records each name's chunk order the
  // first time and prefetches from it later. Sequences do not nest.
  virtual Status begin_sequence(std::string_view name) = 0;
  virtual Status end_sequence() = 0;

  // Chunk c's working weights on the device until release(c). A chunk may be acquired again
  // while held (the tied embedding is used by the head too): each acquire needs its release.
  virtual StatusOr<std::byte*> acquire(size_t c) = 0;
  virtual Status release(size_t c) = 0;
  // acquire(c), the data ready for work queued on `reader` after the call instead of
  // Stream::compute (ZeRO-3's gather of a chunk's shard on Stream::comm, ahead of the compute).
  // release(c) keeps its meaning, so the caller orders Stream::compute after the reader's last use
  // (an event wait) before releasing. Default: acquire(c) for the compute stream; unavailable for
  // another (a source that cannot order one).
  virtual StatusOr<std::byte*> acquire_for(size_t c, Stream reader) {
    if (reader == Stream::compute) return acquire(c);
    return error(Code::unavailable, "this weight source orders its chunks for the compute stream only, not '{}'",
                 stream_name(reader));
  }

  // Writing new weights (load, init, the optimizer's update): update_buffer(c) is a host buffer of
  // chunk_bytes(c) to fill with chunk c's new working weights, valid until commit_update(c), which
  // makes them chunk c's value for every later acquire and read. One chunk at a time per caller:
  // at most one update buffer is outstanding. commit_update may return before the data reached
  // its home; flush() waits for every commit (and reports its errors).
  virtual StatusOr<std::byte*> update_buffer(size_t c) = 0;
  virtual Status commit_update(size_t c) = 0;
  virtual Status flush() = 0;
  // A hint from the writer of updates (the CPU optimizer, when its update begins): chunk c's
  // weights will be replaced by commit_update(c) before their next use, so a source that fetches
  // ahead does not fetch the bytes about to be replaced. commit_update(c) ends it, and so does
  // expect_update(c, false) (an update that ended early). acquire and read are not affected: they
  // return the current bytes. Default: ignored.
  virtual void expect_update(size_t c, bool expected) {}

  // Chunk c's current weights into `host` (chunk_bytes(c)); returns once copied. Not during a
  // sequence.
  virtual Status read(size_t c, std::byte* host) = 0;
};

class GradSink {
 public:
  virtual ~GradSink() = default;

  // Starts an optimizer step's gradient: every chunk's accumulated gradient becomes zero.
  virtual Status begin_step() = 0;
  // A device buffer of chunk_bytes(c) (working precision), ZEROED, that the backward writes chunk
  // c's gradient of this acquire into, until release(c); the sink adds what it holds at release
  // into the step's fp32 sums. Zeroed, so a tensor's first contribution may overwrite it
  // (GradStore::overwrite) and later ones add. `last` in release: this is the backward's last
  // contribution to chunk c (the tied embedding gets two per backward, each in its own acquire:
  // the head's, then the embedding's).
  virtual StatusOr<std::byte*> acquire(size_t c) = 0;
  virtual Status release(size_t c, bool last) = 0;
  // Whether the micro-batch whose backward follows is the step's last: the trainer says so before
  // each backward (a step of one micro-batch needs no call). A sink may finish a chunk's work (its
  // norm partial) at the chunk's last contribution of the step.
  virtual void set_last_micro_batch(bool last) {}
  // Ends the step's gradient: waits for every contribution, zeroes the chunks none reached, and
  // returns the global squared norm of the accumulated fp32 gradient: per chunk the blocked sum of
  // squares of kernels/cpu/grad_accumulate.h, summed over chunks in chunk order from +0.0 (the
  // same bits for every sink). Non-finite if any element is. failed_precondition while a chunk is
  // held; a stream or I/O error of the step is returned.
  virtual StatusOr<double> finish_step() = 0;
};

}  // namespace strata
