// ShardedWeights: the WeightSource of a ZeRO-3 run across ranks: each rank homes 1/N of every
// chunk's working weights (offload/chunk_shard.h: the elements its gradient sum and optimizer state
// hold too) in an inner WeightSource over those padded shards -- resident on its device
// (ResidentWeights) or paged from its own pinned memory or NVMe (TierManager, which prefetches the
// shards as it would whole chunks) -- and every rank computes with the whole chunk: acquire(c)
// takes c's shard from the inner source and all-gathers it into a device slot of c's group (queued
// on Stream::compute; a chunk acquired again while held, as the tied table is by the head, is
// gathered once). The bytes a rank homes and updates divide by N; the forward and backward see the
// same bytes as a rank holding the whole chunk, so nothing changes a bit.
// Writes (init, load, the optimizer's update): update_buffer(c) is a whole chunk's host buffer;
// commit_update(c) keeps this rank's shard of it and commits that to the inner source (a CPU
// optimizer of a partitioned state writes only its shard there: nothing is gathered after an
// update). read(c) gathers the whole chunk to the host (ShardGather).
// Collectives: acquire of a chunk not held and read are collectives; every rank runs the same
// model, so they come in the same order on every rank.
// Thread-safety: one driving thread (WeightSource's). Lifetime: the backend, the communicator, the
// inner source, the gather and the pinned pool outlive it; the destructor waits for the compute
// stream before returning its slots.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offload/chunk_shard.h"
#include "offload/chunk_source.h"
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

// Chunk c's shard bytes in the inner source: the padded shard (stride x element bytes).
std::vector<uint64_t> weight_shard_bytes(const std::vector<uint64_t>& chunk_bytes, uint64_t element_bytes, int ranks);

class ShardedWeights final : public WeightSource {
 public:
  // Validates (invalid_argument: an inner source whose chunks are not the
  // shards, groups of the wrong length or without slots) and allocates the slots (tags "<name>
  // gathered (<group>) i/n") and one pinned whole-chunk update buffer. Over budget: the arena's
  // out_of_memory.
  static StatusOr<std::unique_ptr<ShardedWeights>> create(Backend& backend, Communicator& comm, WeightSource& inner,
                                                          ShardGather& gather, PinnedPool& pinned,
                                                          const ShardedWeightsOptions& options);
  // Device bytes of the slots create() allocates (each rounded up to `align`), for the planner.
  static uint64_t slot_bytes(const ShardedWeightsOptions& options, int ranks, uint64_t align);
  ~ShardedWeights() override;
  ShardedWeights(const ShardedWeights&) = delete;
  ShardedWeights& operator=(const ShardedWeights&) = delete;

  size_t chunk_count() const override { return options_.chunk_bytes.size(); }
  uint64_t chunk_bytes(size_t c) const override { return options_.chunk_bytes.at(c); }
  Status begin_sequence(std::string_view name) override { return inner_.begin_sequence(name); }
  Status end_sequence() override { return inner_.end_sequence(); }
  StatusOr<std::byte*> acquire(size_t c) override;
  Status release(size_t c) override;
  StatusOr<std::byte*> update_buffer(size_t c) override;
  Status commit_update(size_t c) override;
  Status flush() override { return inner_.flush(); }
  void expect_update(size_t c, bool expected) override { inner_.expect_update(c, expected); }
  Status read(size_t c, std::byte* host) override;

  const ChunkShard& shard(size_t c) const { return shards_[c]; }

 private:
  ShardedWeights(Backend& backend, Communicator& comm, WeightSource& inner, ShardGather& gather,
                 const ShardedWeightsOptions& options)
      : backend_(backend), comm_(comm), inner_(inner), gather_(gather), options_(options) {}

  Backend& backend_;
  Communicator& comm_;
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
};

}  // namespace strata
