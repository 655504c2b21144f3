// GradientExchange: the GradSink of a run across ranks whose optimizer is on the CPU (ZeRO-2 with
// the optimizer offloaded): each rank homes 1/N of every chunk's fp32 gradient sum in host memory
// (offload/chunk_shard.h: the same shards as the device path's DeviceGrads), and its CPU updates
// that shard.
//
// The backward writes a chunk's whole gradient into a device slot of this sink (working precision,
// zeroed, padded to ranks x stride elements). Its release queues, on Stream::compute:
//   all_to_all(slot -> received): block r of the slot (the elements rank r homes) goes to rank r;
//   received[r] is rank r's contribution to this rank's shard;
// and at the chunk's last release of the backward, hands every received block to `inner` (a
// GradientOffloader over this rank's padded shards, shard_options) in rank order, one acquire and
// release each, so `inner` accumulates them in fp32 on the host exactly as one rank accumulates the
// micro-batches of a step: acc = widen(x_0); acc += widen(x_1); ... A chunk released more than once
// per backward (GPT-2's tied table: the head's contribution, then the embedding's) keeps each
// release's blocks on the device until its last, then hands them over rank-major, release-minor
// (H0 E0 H1 E1 ...: the one-rank order, micro-batch r on rank r). The bytes moved are a
// reduce-scatter's, in the working precision.
// The norm: `inner` keeps its shards' block partials (kernels::sum_squares's blocks); finish_step
// all-gathers them and sums them per chunk in block order and over chunks in chunk order from
// +0.0: the one-rank definition (GradSink::finish_step), so N ranks give one rank's bits.
// Each rank may run several micro-batches a step, all ranks the same number, in rounds (round j:
// micro-batch j x N + r on rank r, model/data/rank_batches.h), a chunk's blocks handed over as
// above at its last release of the micro-batch, so `inner` adds the step's micro-batches in the
// one-rank order: round by round, rank by rank. The rounds are per chunk: micro-batch-major (round
// j of every chunk in backward j) and layer-major (Transformer::step_layer_major: a chunk's rounds
// in turn) give the same order.
//
// Thread-safety: one driving thread. Lifetime: the backend, the communicator and `inner` outlive
// the exchange; the destructor waits for the compute stream before returning its blocks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offload/chunk_shard.h"
#include "offload/chunk_source.h"
#include "offload/gradient_offloader.h"
#include "offload/slot_ring.h"
#include "runtime/backend.h"
#include "runtime/communicator.h"

namespace strata {

struct GradientExchangeOptions {
  // The whole chunks, as the one-rank GradientOffloader's options describe them: chunk_bytes,
  // format, chunk_group, group_slots and group_names (home, spill buffers and the rest are the
  // inner offloader's concern).
  GradientOffloaderOptions chunks;
  // Per chunk: its releases per backward (Transformer::gradient_releases), each >= 1.
  std::vector<uint32_t> releases;
};

// The inner offloader's options for rank `rank` of `ranks`: `whole` with every chunk cut to the
// rank's padded shard (stride elements: the shards of all ranks have one length, and a rank's empty
// shard is zeros) and block partials kept.
GradientOffloaderOptions gradient_shard_options(const GradientOffloaderOptions& whole, int ranks);

class GradientExchange final : public GradSink {
 public:
  // Validates (invalid_argument naming what is wrong: release counts of the
  // wrong length or zero, an `inner` whose chunks are not the shards) and allocates the slots, the
  // received blocks (one buffer the largest chunk's, plus a stack per chunk released more than
  // once) and the norm's exchange buffer; tags "<name> exchange ...". Over budget: the arena's
  // out_of_memory.
  static StatusOr<std::unique_ptr<GradientExchange>> create(Backend& backend, Communicator& comm,
                                                             GradientOffloader& inner,
                                                             const GradientExchangeOptions& options);
  // Device bytes create() allocates (each block rounded up to `align`), for the planner.
  static uint64_t device_bytes(const GradientExchangeOptions& options, int ranks, uint64_t align);
  ~GradientExchange() override;
  GradientExchange(const GradientExchange&) = delete;
  GradientExchange& operator=(const GradientExchange&) = delete;

  Status begin_step() override;
  // A slot of c's group, zeroed on Stream::compute. failed_precondition outside a step, c already
  // held, or every slot of its group held.
  StatusOr<std::byte*> acquire(size_t c) override;
  // Queues the all-to-all of c's slot; at `last`, hands the received blocks to `inner` (above).
  // failed_precondition for more releases of c than options.releases[c] in one backward.
  Status release(size_t c, bool last) override;
  // Whether this rank's backward that follows is its last of the step (the last round): passed to
  // `inner`, whose last round of hand-overs then finishes each chunk's sum and norm partials.
  void set_last_micro_batch(bool last) override { inner_.set_last_micro_batch(last); }
  // inner.finish_step(), then the global squared norm from every rank's block partials (above):
  // the same bits on every rank. A collective: every rank calls it. The communicator's sticky
  // error (a dead rank, a timeout) is returned.
  StatusOr<double> finish_step() override;

  const ChunkShard& shard(size_t c) const { return shards_[c]; }
  GradientOffloader& inner() { return inner_; }
  Communicator& communicator() { return comm_; }

 private:
  GradientExchange(Backend& backend, Communicator& comm, GradientOffloader& inner,
                   const GradientExchangeOptions& options);
  Status hand_over(size_t c, uint32_t releases);

  Backend& backend_;
  Communicator& comm_;
  GradientOffloader& inner_;
  const GradientExchangeOptions options_;
  std::vector<ChunkShard> shards_;  // per chunk: this rank's
  uint64_t element_bytes_ = 0;
  SlotRing slots_;                    // per group: ranks x stride elements of its largest chunk a slot
  std::byte* received_ = nullptr;     // ranks x stride elements of the largest chunk released once
  std::vector<std::byte*> stacks_;    // per chunk released more than once: releases x ranks x stride
  std::vector<uint32_t> released_;    // per chunk: releases this backward (0 again after its last)
  // The norm: every chunk's stride / kSumSquaresBlock block partials of this rank, then all ranks'.
  double* partials_ = nullptr;        // ranks x blocks_
  uint64_t blocks_ = 0;               // per rank: sum over chunks of stride / kSumSquaresBlock
  std::vector<double> gathered_;      // host copy of partials_
  std::vector<void*> blocks_owned_;   // everything allocated, released by the destructor
  bool in_step_ = false;
};

}  // namespace strata
