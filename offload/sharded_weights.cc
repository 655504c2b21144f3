// ShardedWeights: ZeRO-3's partitioned weights, gathered on acquire (see sharded_weights.h).
#include "offload/sharded_weights.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "offload/slot_group.h"

namespace strata {

std::vector<uint64_t> weight_shard_bytes(const std::vector<uint64_t>& chunk_bytes, uint64_t element_bytes, int ranks) {
  std::vector<uint64_t> out;
  for (uint64_t b : chunk_bytes) out.push_back(shard_stride_bytes(b, element_bytes, ranks));
  return out;
}

uint64_t ShardedWeights::slot_bytes(const ShardedWeightsOptions& options, int ranks, uint64_t align) {
  const auto aligned = [align](uint64_t b) { return (b + align - 1) / align * align; };
  std::vector<uint64_t> widest(options.group_slots.size(), 0);
  for (size_t c = 0; c < options.chunk_bytes.size(); ++c) {
    uint64_t& w = widest.at(options.chunk_group.at(c));
    w = std::max(w, uint64_t(ranks) * shard_stride_bytes(options.chunk_bytes[c], options.element_bytes, ranks));
  }
  uint64_t bytes = 0;
  for (size_t g = 0; g < widest.size(); ++g)
    if (widest[g] > 0) bytes += uint64_t(options.group_slots[g]) * aligned(widest[g]);
  return bytes;
}

StatusOr<std::unique_ptr<ShardedWeights>> ShardedWeights::create(Backend& backend, Communicator& comm,
                                                                  WeightSource& inner, ShardGather& gather,
                                                                  PinnedPool& pinned,
                                                                  const ShardedWeightsOptions& options) {
  const std::string& name = options.name;
  const int ranks = comm.size();
  const size_t chunks = options.chunk_bytes.size();
  if (chunks == 0 || options.chunk_group.size() != chunks)
    return error(Code::invalid_argument, "{}: {} chunks but {} groups", name, chunks, options.chunk_group.size());
  if (inner.chunk_count() != chunks)
    return error(Code::invalid_argument, "{}: the inner source has {} chunks, not {}", name, inner.chunk_count(), chunks);
  const std::vector<uint64_t> shard_bytes = weight_shard_bytes(options.chunk_bytes, options.element_bytes, ranks);
  for (size_t c = 0; c < chunks; ++c) {
    if (inner.chunk_bytes(c) != shard_bytes[c])
      return error(Code::invalid_argument, "{}: the inner source's chunk {} has {} bytes, not the shard's {}", name, c,
                   inner.chunk_bytes(c), shard_bytes[c]);
    if (options.chunk_group[c] >= options.group_slots.size() || options.group_slots[options.chunk_group[c]] == 0)
      return error(Code::invalid_argument, "{}: chunk {} is in group {}, which has no slots", name, c,
                   options.chunk_group[c]);
  }
  std::unique_ptr<ShardedWeights> w(new ShardedWeights(backend, comm, inner, gather, options));
  std::vector<uint64_t> widest(options.group_slots.size(), 0);
  uint64_t largest = 0;
  for (size_t c = 0; c < chunks; ++c) {
    w->shards_.push_back(chunk_shard(options.chunk_bytes[c] / options.element_bytes, ranks, comm.rank()));
    uint64_t& g = widest[options.chunk_group[c]];
    g = std::max(g, uint64_t(ranks) * w->shards_[c].stride * options.element_bytes);
    largest = std::max(largest, options.chunk_bytes[c]);
  }
  w->slots_ = SlotRing(widest.size(), options.chunk_group);
  for (size_t g = 0; g < widest.size(); ++g) {
    if (widest[g] == 0) continue;
    const std::string group_name = slot_group_name(options.group_names, g);
    for (size_t s = 0; s < options.group_slots[g]; ++s) {
      STRATA_ASSIGN_OR_RETURN(void* slot, backend.allocate(widest[g], fmt::format("{} gathered ({}) {}/{}", name,
                                                                                   group_name, s + 1,
                                                                                   options.group_slots[g])));
      w->blocks_.push_back(slot);
      w->slots_.add_slot(g, static_cast<std::byte*>(slot));
    }
  }
  STRATA_ASSIGN_OR_RETURN(w->update_, pinned.acquire(largest));
  w->holds_.assign(chunks, 0);
  return w;
}

ShardedWeights::~ShardedWeights() {
  Status s = backend_.synchronize(Stream::compute);
  if (!s.is_ok()) spdlog::warn("{}: releasing the gathered slots after a failed stream: {}", options_.name, s);
  for (void* block : blocks_) {
    s = backend_.release(block);
    if (!s.is_ok()) spdlog::warn("{}: {}", options_.name, s);
  }
}

StatusOr<std::byte*> ShardedWeights::acquire(size_t c) {
  if (c >= chunk_count())
    return error(Code::invalid_argument, "{}: chunk {} out of range ({} chunks)", options_.name, c, chunk_count());
  if (holds_[c] > 0) {  // held (the tied table, by the head): gathered already
    ++holds_[c];
    return slots_.held(c);
  }
  std::byte* slot = slots_.take(c);
  if (slot == nullptr)
    return error(Code::failed_precondition, "{}: every gathered slot of chunk {}'s group is held", options_.name, c);
  // The shard is ready for compute work queued from here (WeightSource's contract): the gather is
  // that work; its release after the gather is queued means the compute stream is done with it.
  STRATA_ASSIGN_OR_RETURN(std::byte* shard, inner_.acquire(c));
  const uint64_t block = shards_[c].stride * options_.element_bytes;
  Status gathered = comm_.all_gather(shard, slot, block, Stream::compute);
  const Status released = inner_.release(c);
  if (!gathered.is_ok() || !released.is_ok()) slots_.put(c);
  STRATA_RETURN_IF_ERROR(gathered);
  STRATA_RETURN_IF_ERROR(released);
  holds_[c] = 1;
  return slot;
}

Status ShardedWeights::release(size_t c) {
  if (c >= chunk_count() || holds_[c] == 0)
    return error(Code::failed_precondition, "{}: release of chunk {}, which is not held", options_.name, c);
  if (--holds_[c] > 0) return Status::ok();
  // Stream order: the compute work queued so far is the last to read the slot; the next gather
  // into it is queued after.
  slots_.put(c);
  return Status::ok();
}

StatusOr<std::byte*> ShardedWeights::update_buffer(size_t c) {
  if (c >= chunk_count())
    return error(Code::invalid_argument, "{}: chunk {} out of range ({} chunks)", options_.name, c, chunk_count());
  if (updating_ >= 0)
    return error(Code::failed_precondition, "{}: update buffer of chunk {} asked for while chunk {}'s is out",
                 options_.name, c, updating_);
  updating_ = int64_t(c);
  return update_.data();
}

Status ShardedWeights::commit_update(size_t c) {
  if (updating_ != int64_t(c))
    return error(Code::failed_precondition, "{}: commit of chunk {} without its update buffer", options_.name, c);
  updating_ = -1;
  const ChunkShard& shard = shards_[c];
  const uint64_t eb = options_.element_bytes;
  STRATA_ASSIGN_OR_RETURN(std::byte* mine, inner_.update_buffer(c));
  std::memcpy(mine, update_.data() + shard.begin * eb, shard.elements() * eb);
  std::memset(mine + shard.elements() * eb, 0, (shard.stride - shard.elements()) * eb);
  return inner_.commit_update(c);
}

Status ShardedWeights::read(size_t c, std::byte* host) {
  if (c >= chunk_count())
    return error(Code::invalid_argument, "{}: chunk {} out of range ({} chunks)", options_.name, c, chunk_count());
  const ChunkShard& shard = shards_[c];
  const uint64_t eb = options_.element_bytes;
  shard_host_.resize(shard.stride * eb);
  STRATA_RETURN_IF_ERROR(inner_.read(c, shard_host_.data()));
  return gather_.gather(shard_host_.data(), shard.elements() * eb, shard.stride * eb, host, chunk_bytes(c));
}

}  // namespace strata
