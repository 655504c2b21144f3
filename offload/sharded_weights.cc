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
                                                                  const ShardedWeightsOptions& options,
                                                                  Communicator* ahead) {
  const std::string& name = options.name;
  const int ranks = comm.size();
  if (ahead != nullptr && (ahead->size() != ranks || ahead->rank() != comm.rank()))
    return error(Code::invalid_argument, "{}: the communicator for gathers ahead is rank {} of {}, not {} of {}", name,
                 ahead->rank(), ahead->size(), comm.rank(), ranks);
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
  std::unique_ptr<ShardedWeights> w(new ShardedWeights(backend, comm, inner, gather, options, ahead));
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
  w->pending_.assign(chunks, 0);
  w->update_due_.assign(chunks, 0);
  if (ahead != nullptr) {
    for (size_t c = 0; c < chunks; ++c) w->gathered_.push_back(backend.create_event());
    w->compute_mark_ = backend.create_event();
  }
  return w;
}

ShardedWeights::~ShardedWeights() {
  // The gathers ahead first, through their communicator: one stuck on a dead peer ends at its
  // timeout there (NCCL aborted), where the compute stream's wait on it would not.
  Status s = ahead_ != nullptr ? ahead_->synchronize(Stream::comm) : Status::ok();
  if (!s.is_ok()) spdlog::warn("{}: the gathers ahead: {}", options_.name, s);
  s = drop_all();
  if (!s.is_ok()) spdlog::warn("{}: dropping the gathers ahead: {}", options_.name, s);
  s = backend_.synchronize(Stream::compute);
  if (!s.is_ok()) spdlog::warn("{}: releasing the gathered slots after a failed stream: {}", options_.name, s);
  for (void* block : blocks_) {
    s = backend_.release(block);
    if (!s.is_ok()) spdlog::warn("{}: {}", options_.name, s);
  }
}

Status ShardedWeights::begin_sequence(std::string_view name) {
  STRATA_RETURN_IF_ERROR(inner_.begin_sequence(name));
  return ahead_ != nullptr ? order_.begin(name) : Status::ok();
}

// The host waits for the sequence's gathers ahead through their communicator (done before the
// compute reached its last chunks): a gather stuck on a dead peer is its error here, at its
// timeout, once a step.
Status ShardedWeights::end_sequence() {
  Status dropped = drop_all();
  Status synced = ahead_ != nullptr ? ahead_->synchronize(Stream::comm) : Status::ok();
  Status ended = ahead_ != nullptr ? order_.end() : Status::ok();
  Status inner = inner_.end_sequence();
  STRATA_RETURN_IF_ERROR(synced);
  STRATA_RETURN_IF_ERROR(dropped);
  STRATA_RETURN_IF_ERROR(ended);
  return inner;
}

StatusOr<std::byte*> ShardedWeights::acquire(size_t c) {
  if (c >= chunk_count())
    return error(Code::invalid_argument, "{}: chunk {} out of range ({} chunks)", options_.name, c, chunk_count());
  if (ahead_ != nullptr) order_.on_access(c);
  if (holds_[c] > 0) {  // held (the tied table, by the head): gathered already
    ++holds_[c];
    STRATA_RETURN_IF_ERROR(gather_next());
    return slots_.held(c);
  }
  if (pending_[c]) {
    STRATA_RETURN_IF_ERROR(take_ahead(c));
    STRATA_RETURN_IF_ERROR(gather_next());
    return slots_.held(c);
  }
  std::byte* slot = slots_.take(c);
  if (slot == nullptr) {
    // The group's free slots went to gathers ahead that the order did not use: dropped.
    for (size_t u = 0; u < chunk_count(); ++u)
      if (pending_[u] && options_.chunk_group[u] == options_.chunk_group[c]) STRATA_RETURN_IF_ERROR(drop(u));
    slot = slots_.take(c);
  }
  if (slot == nullptr)
    return error(Code::failed_precondition, "{}: every gathered slot of chunk {}'s group is held", options_.name, c);
  // The shard is ready for compute work queued from here (WeightSource's contract): the gather is
  // that work; its release after the gather is queued means the compute stream is done with it.
  StatusOr<std::byte*> shard = inner_.acquire(c);
  if (!shard.is_ok() && shard.status().code() == Code::failed_precondition &&
      std::find(pending_.begin(), pending_.end(), 1) != pending_.end()) {
    // The inner source's slots are held by the shards of gathers ahead the order did not use.
    const Status dropped = drop_all();
    shard = dropped.is_ok() ? inner_.acquire(c) : StatusOr<std::byte*>(dropped);
  }
  if (!shard.is_ok()) {
    slots_.put(c);
    return shard.status();
  }
  const uint64_t block = shards_[c].stride * options_.element_bytes;
  Status gathered = comm_.all_gather(*shard, slot, block, Stream::compute);
  const Status released = inner_.release(c);
  if (!gathered.is_ok() || !released.is_ok()) slots_.put(c);
  STRATA_RETURN_IF_ERROR(gathered);
  STRATA_RETURN_IF_ERROR(released);
  holds_[c] = 1;
  ++counts_.gathers;
  STRATA_RETURN_IF_ERROR(gather_next());
  return slot;
}

Status ShardedWeights::gather_next() {
  if (ahead_ == nullptr || !order_.replaying()) return Status::ok();
  const std::vector<size_t> next = order_.upcoming(1, options_.chunk_bytes);  // the next chunk only
  if (next.empty()) return Status::ok();
  const size_t u = next.front();
  if (holds_[u] > 0 || pending_[u] || update_due_[u] || updating_ == int64_t(u)) return Status::ok();
  std::byte* slot = slots_.take(u);
  if (slot == nullptr) return Status::ok();  // every slot of its group held: gathered on demand
  // The gather starts after the compute work queued so far: the slot's last reader among it.
  Status s = backend_.record(*compute_mark_, Stream::compute);
  if (s.is_ok()) s = backend_.wait(Stream::comm, *compute_mark_);
  StatusOr<std::byte*> shard = s.is_ok() ? inner_.acquire_for(u, Stream::comm) : StatusOr<std::byte*>(s);
  if (!shard.is_ok()) {
    slots_.put(u);
    // The inner source has no slot for it now (all held): gathered on demand instead. Its state is
    // the call order's, so every rank skips the same gather.
    if (shard.status().code() == Code::failed_precondition) return Status::ok();
    return shard.status();
  }
  const uint64_t block = shards_[u].stride * options_.element_bytes;
  s = ahead_->all_gather(*shard, slot, block, Stream::comm);
  if (s.is_ok()) s = backend_.record(*gathered_[u], Stream::comm);
  if (!s.is_ok()) {
    // Nothing more runs on a broken communicator; the compute stream is ordered after the comm
    // stream before the shard and the slot go back.
    (void)backend_.synchronize(Stream::comm);
    (void)inner_.release(u);
    slots_.put(u);
    return s;
  }
  pending_[u] = 1;
  return Status::ok();
}

Status ShardedWeights::take_ahead(size_t c) {
  const Event& gathered = *gathered_[c];
  // Done already as the host queues: nothing to order. Else the compute stream's wait is timed.
  if (!backend_.query(gathered)) STRATA_RETURN_IF_ERROR(timed_compute_wait(backend_, gathered, wait_clock_));
  pending_[c] = 0;
  holds_[c] = 1;
  ++counts_.gathers;
  ++counts_.ahead;
  return inner_.release(c);
}

Status ShardedWeights::drop(size_t c) {
  pending_[c] = 0;
  ++counts_.dropped;
  Status waited = backend_.wait(Stream::compute, *gathered_[c]);
  if (!waited.is_ok()) waited = backend_.synchronize(*gathered_[c]);  // ordered on the host instead
  const Status released = inner_.release(c);
  slots_.put(c);
  STRATA_RETURN_IF_ERROR(waited);
  return released;
}

Status ShardedWeights::drop_all() {
  Status first;
  for (size_t c = 0; c < pending_.size(); ++c) {
    if (!pending_[c]) continue;
    Status s = drop(c);
    if (first.is_ok()) first = s;
  }
  return first;
}

void ShardedWeights::expect_update(size_t c, bool expected) {
  if (c < update_due_.size()) {
    update_due_[c] = expected ? 1 : 0;
    if (expected && pending_[c]) {
      const Status s = drop(c);  // its bytes are about to be replaced
      if (!s.is_ok()) spdlog::warn("{}: dropping the gather ahead of chunk {}: {}", options_.name, c, s);
    }
  }
  inner_.expect_update(c, expected);
}

ShardedWeightsStats ShardedWeights::stats() const {
  ShardedWeightsStats s = counts_;
  s.late = wait_clock_->late.load();
  s.compute_wait_seconds = wait_clock_->seconds();
  return s;
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
  if (pending_[c]) STRATA_RETURN_IF_ERROR(drop(c));
  update_due_[c] = 0;
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
  STRATA_RETURN_IF_ERROR(drop_all());
  const ChunkShard& shard = shards_[c];
  const uint64_t eb = options_.element_bytes;
  shard_host_.resize(shard.stride * eb);
  STRATA_RETURN_IF_ERROR(inner_.read(c, shard_host_.data()));
  return gather_.gather(shard_host_.data(), shard.elements() * eb, shard.stride * eb, host, chunk_bytes(c));
}

}  // namespace strata
