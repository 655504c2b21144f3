// ShardedWeights: the WeightSource of a ZeRO-3 run across ranks: each rank homes 1/N of every
// chunk's working weights (offload/chunk_shard.h: the elements its gradient sum and optimizer state
// hold too) in an inner WeightSource over those padded shards -- resident on its device
// (ResidentWeights) or paged from its own pinned memory or NVMe (TierManager, which prefetches the
// shards as it would whole chunks) -- and every rank computes with the whole chunk: acquire(c)
// all-gathers c's shards into a device slot of c's group (a chunk acquired again while held, as the
// tied table is by the head, is gathered once). The bytes a rank homes and updates divide by N; the
// forward and backward see the same bytes as a rank holding the whole chunk, so nothing changes a
// bit.
// Gathered ahead: with a second communicator (`ahead`, Communicator::duplicate), the access order of
// each named sequence is recorded the first time it runs (offload/prefetcher.h), and when it
// replays, acquire(c) also begins the gather of the next chunk of the order into a free slot of its
// group, on Stream::comm through `ahead`, so it runs while c computes; the acquire of that chunk
// then only makes Stream::compute wait for it. The rule is a function of the call order alone (the
// trace, the slots held, the updates announced), never of timing, so every rank issues the same
// gathers in the same order on each communicator. Not gathered ahead: a chunk whose update is due
// (expect_update) or held; with no free slot in its group, or none in the inner source's. A gather ahead that the order does not
// use (the sequence departs from its trace, an update is announced for it, the group's slots or the
// inner source's are needed, the sequence ends) is dropped: waited for and its slot freed. Without `ahead`, every
// gather is queued on Stream::compute at its acquire through `comm`.
// Writes (init, load, the optimizer's update): update_buffer(c) is a whole chunk's host buffer;
// commit_update(c) keeps this rank's shard of it and commits that to the inner source (a CPU
// optimizer of a partitioned state writes only its shard there: nothing is gathered after an
// update). read(c) gathers the whole chunk to the host (ShardGather).
// Collectives: acquire of a chunk not held and read are collectives; every rank runs the same
// model, so they come in the same order on every rank.
// Thread-safety: one driving thread (WeightSource's). Lifetime: the backend, the communicators, the
// inner source, the gather and the pinned pool outlive it; the destructor waits for the comm
// stream through `ahead`, drops the gathers ahead and waits for the compute stream before
// returning its slots.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offload/chunk_shard.h"
#include "offload/chunk_source.h"
#include "offload/compute_wait_clock.h"
#include "offload/prefetcher.h"
#include "offload/shard_gather.h"
#include "offload/slot_ring.h"
#include "runtime/backend.h"
#include "runtime/communicator.h"
#include "runtime/pinned_pool.h"

namespace strata {

struct ShardedWeightsOptions {
  std::vector<uint64_t> chunk_bytes;  // the whole chunks, working precision
  uint64_t element_bytes = 2;
  // The gathered slots: chunk c is gathered into a slot of group chunk_group[c] (group_slots[g]
  // slots, each ranks x stride of its largest chunk); a chunk held by the model keeps its slot.
  std::vector<size_t> chunk_group;
  std::vector<size_t> group_slots;
  std::vector<std::string> group_names;
  std::string name = "weights";
};

// What the gathers of a run did (ShardedWeights::stats).
struct ShardedWeightsStats {
  uint64_t gathers = 0;         // acquires that gathered a chunk (on demand or ahead)
  uint64_t ahead = 0;           // of them, gathered ahead on Stream::comm
  uint64_t dropped = 0;         // gathers ahead not used (see the top): not counted in `ahead`
  uint64_t late = 0;            // gathers ahead the compute stream waited on longer than kLateArrivalSeconds
  double compute_wait_seconds = 0;  // the compute stream's waits on gathers ahead, in all
};

// Chunk c's shard bytes in the inner source: the padded shard (stride x element bytes).
std::vector<uint64_t> weight_shard_bytes(const std::vector<uint64_t>& chunk_bytes, uint64_t element_bytes, int ranks);

class ShardedWeights final : public WeightSource {
 public:
  // Validates (invalid_argument: an inner source whose chunks are not the
  // shards, groups of the wrong length or without slots, an `ahead` of another size) and allocates
  // the slots (tags "<name> gathered (<group>) i/n") and one pinned whole-chunk update buffer. Over
  // budget: the arena's out_of_memory. `ahead` (may be null: no gathering ahead): a duplicate of
  // `comm`, driven on Stream::comm only; the inner source must support acquire_for(c, Stream::comm).
  static StatusOr<std::unique_ptr<ShardedWeights>> create(Backend& backend, Communicator& comm, WeightSource& inner,
                                                          ShardGather& gather, PinnedPool& pinned,
                                                          const ShardedWeightsOptions& options,
                                                          Communicator* ahead = nullptr);
  // Device bytes of the slots create() allocates (each rounded up to `align`), for the planner.
  static uint64_t slot_bytes(const ShardedWeightsOptions& options, int ranks, uint64_t align);
  ~ShardedWeights() override;
  ShardedWeights(const ShardedWeights&) = delete;
  ShardedWeights& operator=(const ShardedWeights&) = delete;

  size_t chunk_count() const override { return options_.chunk_bytes.size(); }
  uint64_t chunk_bytes(size_t c) const override { return options_.chunk_bytes.at(c); }
  Status begin_sequence(std::string_view name) override;
  // Drops the gathers ahead still unused and waits for the comm stream through `ahead` (its
  // timeout ends a gather stuck on a dead peer: the error is returned).
  Status end_sequence() override;
  StatusOr<std::byte*> acquire(size_t c) override;
  Status release(size_t c) override;
  StatusOr<std::byte*> update_buffer(size_t c) override;
  Status commit_update(size_t c) override;  // drops a gather ahead of c
  Status flush() override { return inner_.flush(); }
  void expect_update(size_t c, bool expected) override;  // expected: drops a gather ahead of c
  Status read(size_t c, std::byte* host) override;

  const ChunkShard& shard(size_t c) const { return shards_[c]; }
  bool gathers_ahead() const { return ahead_ != nullptr; }
  ShardedWeightsStats stats() const;

 private:
  ShardedWeights(Backend& backend, Communicator& comm, WeightSource& inner, ShardGather& gather,
                 const ShardedWeightsOptions& options, Communicator* ahead)
      : backend_(backend), comm_(comm), ahead_(ahead), inner_(inner), gather_(gather), options_(options) {}

  // The gather ahead of the chunk after the current access in the replayed order, if the rule at
  // the top allows it.
  Status gather_next();
  // The model acquires chunk c, gathered ahead: the compute stream waits for the gather (timed), and
  // the inner shard is released (the compute stream is now after its last reader).
  Status take_ahead(size_t c);
  // A gather ahead of c not used: waited for by the compute stream, c's shard and slot freed.
  Status drop(size_t c);
  Status drop_all();

  Backend& backend_;
  Communicator& comm_;
  Communicator* const ahead_;  // null: no gathering ahead
  WeightSource& inner_;
  ShardGather& gather_;
  const ShardedWeightsOptions options_;
  std::vector<ChunkShard> shards_;  // per chunk: this rank's
  SlotRing slots_;                 // per group: ranks x stride elements of its largest chunk a slot
  std::vector<uint32_t> holds_;    // per chunk: acquires not yet released
  PinnedBuffer update_;            // the largest chunk's bytes
  int64_t updating_ = -1;          // the chunk update_buffer handed out, -1: none
  std::vector<std::byte> shard_host_;  // read's shard on the host
  std::vector<void*> blocks_;
  // Gathering ahead (with ahead_ only).
  Prefetcher order_;                               // each sequence's access order
  std::vector<uint8_t> pending_;                   // per chunk: gathered ahead, not yet acquired
  std::vector<uint8_t> update_due_;                // per chunk: expect_update(c, true) not yet ended
  std::vector<std::unique_ptr<Event>> gathered_;   // per chunk: its gather ahead's end on Stream::comm
  std::unique_ptr<Event> compute_mark_;            // Stream::comm waits for the compute stream's end
  // The compute stream's waits on gathers ahead.
  std::shared_ptr<ComputeWaitClock> wait_clock_ = std::make_shared<ComputeWaitClock>();
  ShardedWeightsStats counts_;                     // gathers, ahead, dropped (the waits: wait_clock_)
};

}  // namespace strata
