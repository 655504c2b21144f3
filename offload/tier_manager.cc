// TierManager: slots, homes, staging and the fetch/prefetch/update paths (see tier_manager.h).
// Staging buffers (nvme home, a StagingRing: the nvme_staging buffers and the read cache alike)
// cycle idle -> reading -> idle (its H2D queued, `staging_copied_` marks its end) or idle -> update
// -> writing -> idle; a buffer is taken again only once that H2D completed. The ring's holder of a
// buffer is the chunk whose committed bytes it still stands for (a finished read or a write), its
// copy, until the buffer is taken for other bytes or the chunk is committed anew.
#include "offload/tier_manager.h"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "offload/trace.h"
#include "runtime/align.h"
#include "runtime/units.h"

namespace strata {

namespace {

std::string group_name(const TierManagerOptions& o, size_t g) { return slot_group_name(o.group_names, g); }

// Per group: slots of its largest 4 KiB-padded chunk (0 bytes for a group without chunks).
std::vector<SlotGroupSpec> slot_specs(const TierManagerOptions& o) {
  return slot_group_specs(o.chunk_bytes, o.chunk_group, o.group_slots, o.group_names, kHostPage);
}

uint64_t max_chunk(const TierManagerOptions& o) {
  uint64_t m = 0;
  for (uint64_t b : o.chunk_bytes) m = std::max(m, b);
  return m;
}

// A buffer for `bytes` of a chunk: padded as the store pads it, then to 4 KiB.
uint64_t buffer_size(uint64_t bytes, uint64_t store_alignment) {
  return round_up(round_up(bytes, store_alignment), kHostPage);
}
// NVMe staging: buffers of the largest chunk (any chunk's transfer fits one).
uint64_t staging_size(const TierManagerOptions& o, uint64_t store_alignment) {
  return buffer_size(max_chunk(o), store_alignment);
}
// The read cache's first `count` buffers (at most one per chunk): first one of the size most
// chunks have (the layers'; ties the larger) for each chunk it holds, so any layer fits any of
// them; then the larger chunks' own sizes, smallest first. A model whose token table dwarfs its
// layers caches layers in buffers of a layer's size, the table once every layer has a buffer.
std::vector<uint64_t> cache_sizes(const TierManagerOptions& o, uint64_t store_alignment, size_t count) {
  std::vector<uint64_t> all;
  for (uint64_t b : o.chunk_bytes) all.push_back(buffer_size(b, store_alignment));
  std::sort(all.begin(), all.end());
  uint64_t common = 0;
  size_t most = 0;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j] == all[i]) j++;
    if (j - i >= most) most = j - i, common = all[i];
    i = j;
  }
  std::vector<uint64_t> sizes;
  for (uint64_t b : all) sizes.push_back(b <= common ? common : b);
  sizes.resize(std::min(count, sizes.size()));
  return sizes;
}
std::vector<uint64_t> staging_sizes(const TierManagerOptions& o, uint64_t store_alignment) {
  std::vector<uint64_t> sizes(o.nvme_staging, staging_size(o, store_alignment));
  for (uint64_t b : cache_sizes(o, store_alignment, o.cache_chunks)) sizes.push_back(b);
  return sizes;
}

StagingRingOptions staging_options(const std::string& name) {
  StagingRingOptions r;  // tracks "nvme read" / "nvme write", spans "chunk <c>"
  r.name = name;
  return r;
}

// ---- trace wiring: the H2D spans (the ring records the NVMe ones) -------------------------------
Status traced_h2d(Backend& b, TraceRecorder* t, size_t c, uint64_t bytes, const std::function<Status()>& enqueue) {
  if (!t) return enqueue();
  return t->stream_span(b, Stream::h2d, "h2d", fmt::format("chunk {}", c), enqueue,
                        {{"chunk", static_cast<int64_t>(c)}, {"bytes", static_cast<int64_t>(bytes)}});
}

}  // namespace

Status check_tier_options(const TierManagerOptions& o, bool have_store) {
  const std::string& n = o.name;
  if (o.chunk_bytes.empty()) return error(Code::invalid_argument, "{}: no chunks to page", n);
  if (o.chunk_group.size() != o.chunk_bytes.size())
    return error(Code::invalid_argument, "{}: {} chunk sizes but {} chunk groups (one per chunk)", n,
                 o.chunk_bytes.size(), o.chunk_group.size());
  if (o.group_slots.empty()) return error(Code::invalid_argument, "{}: no slot groups", n);
  if (!o.group_names.empty() && o.group_names.size() != o.group_slots.size())
    return error(Code::invalid_argument, "{}: {} group names for {} groups", n, o.group_names.size(), o.group_slots.size());
  std::vector<uint32_t> members(o.group_slots.size(), 0);
  for (size_t c = 0; c < o.chunk_bytes.size(); c++) {
    if (o.chunk_bytes[c] == 0) return error(Code::invalid_argument, "{}: chunk {} has 0 bytes", n, c);
    if (o.chunk_group[c] >= o.group_slots.size())
      return error(Code::invalid_argument, "{}: chunk {} is in group {}, but there are only {} groups", n, c,
                   o.chunk_group[c], o.group_slots.size());
    members[o.chunk_group[c]]++;
  }
  for (size_t g = 0; g < o.group_slots.size(); g++) {
    if (o.group_slots[g] == 0)
      return error(Code::invalid_argument, "{}: slot group '{}' has 0 slots (a chunk needs at least one to be used)", n,
                   group_name(o, g));
    if (members[g] == 0)
      return error(Code::invalid_argument, "{}: slot group '{}' has no chunk (its slots would be wasted)", n, group_name(o, g));
  }
  if (o.home != Tier::cpu && o.home != Tier::nvme)
    return error(Code::invalid_argument, "{}: home tier must be cpu or nvme, not {} (device-resident weights need no paging)",
                 n, tier_name(o.home));
  if (o.home == Tier::nvme && !have_store)
    return error(Code::invalid_argument, "{}: weights homed on nvme need an NVMe store (none was given)", n);
  if (o.home == Tier::cpu && o.cache_chunks > 0)
    return error(Code::invalid_argument, "{}: a read cache ({} chunks) is for weights homed on nvme; a cpu home is in "
                 "pinned memory already", n, o.cache_chunks);
  if (o.home == Tier::nvme && o.nvme_staging == 0)
    return error(Code::invalid_argument, "{}: weights homed on nvme need at least one pinned staging buffer (nvme_staging is 0)", n);
  return Status::ok();
}

uint64_t tier_device_bytes(const TierManagerOptions& o) { return slot_groups_device_bytes(slot_specs(o)); }

uint64_t tier_staging_buffer_bytes(const TierManagerOptions& o, uint32_t store_alignment) {
  if (o.home != Tier::nvme || o.chunk_bytes.empty()) return 0;
  const uint64_t a = std::max<uint64_t>(store_alignment, 1);
  const uint64_t one = staging_size(o, a);
  return StagingRing::pinned_bytes(std::span<const uint64_t>(&one, 1), a);
}

uint32_t tier_cache_chunks(const TierManagerOptions& o, uint64_t cache_bytes, uint32_t store_alignment) {
  if (o.home != Tier::nvme || o.chunk_bytes.empty()) return 0;
  const uint64_t a = std::max<uint64_t>(store_alignment, 1);
  uint64_t spent = 0;
  uint32_t n = 0;
  for (uint64_t b : cache_sizes(o, a, o.chunk_bytes.size())) {
    spent += StagingRing::pinned_bytes(std::span<const uint64_t>(&b, 1), a);
    if (spent > cache_bytes) break;
    n++;
  }
  return n;
}

uint64_t tier_cache_bytes(const TierManagerOptions& o, uint32_t chunks, uint32_t store_alignment) {
  if (o.home != Tier::nvme || chunks == 0) return 0;
  const uint64_t a = std::max<uint64_t>(store_alignment, 1);
  return StagingRing::pinned_bytes(cache_sizes(o, a, chunks), a);
}

uint64_t tier_pinned_bytes(const TierManagerOptions& o, uint32_t store_alignment) {
  if (o.home == Tier::nvme) {
    const uint64_t a = std::max<uint64_t>(store_alignment, 1);
    return StagingRing::pinned_bytes(staging_sizes(o, a), a);
  }
  uint64_t total = 0;
  for (uint64_t b : o.chunk_bytes) total += round_up(b, kHostPage);
  return total;
}

// ---- state ---------------------------------------------------------------------------------------

struct TierManager::Chunk {
  uint32_t group = 0;
  int slot = -1;                     // slot of its group holding the current weights, -1: none
  PinnedBuffer home;                 // cpu home
  std::unique_ptr<Event> home_read;  // cpu home: Stream::h2d, the end of the last copy from home
  ExtentId extent = 0;               // nvme home
  int reading = -1;                  // staging buffer with a read of this chunk in flight
  int writing = -1;                  // staging buffer with a write of this chunk in flight
  int copy = -1;                     // staging buffer still holding this chunk's current committed bytes
  bool copy_read = false;            // that copy is a finished read (else the chunk's last write)
  Status read_error;                 // a failed prefetch, returned by the next acquire of the chunk
  bool update_due = false;           // expect_update: new bytes come before the next use; not fetched ahead
};

// ---- lifetime ------------------------------------------------------------------------------------

TierManager::TierManager(Backend& backend, PinnedPool& pool, NvmeStore* store, TraceRecorder* trace,
                         TierManagerOptions options)
    : backend_(backend), pool_(pool), store_(store), trace_(trace), options_(std::move(options)),
      staging_(store, trace, staging_options(options_.name)),
      wait_clock_(std::make_shared<ComputeWaitClock>()) {}

StatusOr<std::unique_ptr<TierManager>> TierManager::create(Backend& backend, PinnedPool& pool, NvmeStore* store,
                                                           TraceRecorder* trace, TierManagerOptions options) {
  STRATA_RETURN_IF_ERROR(check_tier_options(options, store != nullptr));
  if (options.home != Tier::nvme) store = nullptr;  // a store given with a cpu home is not used
  std::unique_ptr<TierManager> tm(new TierManager(backend, pool, store, trace, std::move(options)));
  STRATA_RETURN_IF_ERROR(tm->carve());
  return tm;
}

Status TierManager::carve() {
  const TierManagerOptions& o = options_;
  const std::vector<SlotGroupSpec> specs = slot_specs(o);
  uint64_t derived = 0;
  for (const SlotGroupSpec& g : specs) derived += (g.slots - 1) * g.bytes;
  window_ = o.prefetch_bytes != 0 ? o.prefetch_bytes : derived;
  STRATA_ASSIGN_OR_RETURN(groups_, carve_slot_groups(backend_, o.name, specs));

  chunks_.resize(o.chunk_bytes.size());
  for (size_t c = 0; c < chunks_.size(); c++) {
    Chunk& ch = chunks_[c];
    ch.group = o.chunk_group[c];
    if (o.home == Tier::cpu) {
      auto b = pool_.acquire(round_up(o.chunk_bytes[c], kHostPage), PinnedFill::zero);
      if (!b.is_ok()) return b.status().with_context(fmt::format("{}: pinned home of chunk {}", o.name, c));
      ch.home = std::move(*b);
      ch.home_read = backend_.create_event();
    } else {
      auto e = store_->allocate(fmt::format("{} chunk {}", o.name, c), o.chunk_bytes[c]);
      if (!e.is_ok()) return e.status().with_context(fmt::format("{}: NVMe extent of chunk {}", o.name, c));
      ch.extent = *e;
    }
  }

  if (o.home == Tier::nvme) {
    const std::vector<uint64_t> sizes = staging_sizes(o, std::max<uint32_t>(store_->alignment(), 1));
    STRATA_RETURN_IF_ERROR(staging_.carve(pool_, sizes));
    for (uint64_t b : sizes) staging_bytes_ += b;
    smallest_staging_ = *std::min_element(sizes.begin(), sizes.end());
    for (size_t i = 0; i < staging_.size(); i++) staging_copied_.push_back(backend_.create_event());
    staging_used_.assign(staging_.size(), 0);
  }
  return Status::ok();
}

TierManager::~TierManager() {
  Status s = backend_.synchronize_all();
  if (!s.is_ok()) spdlog::error("{}: synchronizing streams at shutdown: {}", options_.name, s.to_string());
  for (size_t b = 0; b < staging_.size(); b++) {
    if (staging_reading(b)) discard_read(staging_[b].chunk());
    if (staging_writing(b)) {
      Status w = finish_write(static_cast<int>(b));
      if (!w.is_ok()) spdlog::error("{}: NVMe write at shutdown: {}", options_.name, w.to_string());
    }
  }
  groups_.clear();  // the device slots, now that no stream uses them
  if (store_ != nullptr) {
    for (Chunk& ch : chunks_) {
      if (ch.extent == 0) continue;
      Status r = store_->release(ch.extent);
      if (!r.is_ok()) spdlog::error("{}: releasing an NVMe extent: {}", options_.name, r.to_string());
    }
  }
}

// ---- sequences -----------------------------------------------------------------------------------

Status TierManager::begin_sequence(std::string_view name) {
  STRATA_RETURN_IF_ERROR(prefetcher_.begin(name));
  prefetch();  // a replayed sequence's first chunks start moving before the first acquire
  return Status::ok();
}

Status TierManager::end_sequence() { return prefetcher_.end(); }

// ---- slots ---------------------------------------------------------------------------------------

int TierManager::pick_slot(uint32_t group, bool demand, uint64_t needed_at) const {
  const SlotGroup& slots = groups_[group];
  int best = -1;
  uint64_t best_use = 0;
  for (size_t i = 0; i < slots.size(); i++) {
    const DeviceSlot& s = slots[i];
    if (s.holds > 0) continue;
    if (s.chunk < 0) return static_cast<int>(i);
    const uint64_t use = prefetcher_.next_use(static_cast<size_t>(s.chunk));
    if (!demand && use <= needed_at) continue;  // never evict a chunk needed no later than the one fetched
    if (best < 0 || use > best_use || (use == best_use && s.last_use < slots[best].last_use)) {
      best = static_cast<int>(i);
      best_use = use;
    }
  }
  return best;
}

void TierManager::evict(DeviceSlot& sl) {
  if (sl.chunk >= 0) {
    chunks_[sl.chunk].slot = -1;
    counters_.evictions++;
  }
  sl.chunk = -1;
}

DeviceSlot& TierManager::slot_of(size_t c) { return groups_[chunks_[c].group][chunks_[c].slot]; }

void TierManager::unmap(size_t c) {
  Chunk& ch = chunks_[c];
  if (ch.slot < 0) return;
  slot_of(c).chunk = -1;
  ch.slot = -1;
}

Status TierManager::copy_in(size_t c, int s, const std::byte* src, int staging) {
  DeviceSlot& sl = groups_[chunks_[c].group][s];
  evict(sl);
  const uint64_t bytes = options_.chunk_bytes[c];
  STRATA_RETURN_IF_ERROR(backend_.wait(Stream::h2d, *sl.drained));  // the slot's last compute use is done
  STRATA_RETURN_IF_ERROR(traced_h2d(backend_, trace_, c, bytes, [&] {
    return backend_.copy_to_device(sl.ptr, src, bytes, Stream::h2d);
  }));
  STRATA_RETURN_IF_ERROR(backend_.record(*sl.filled, Stream::h2d));
  Event& source_done = staging >= 0 ? *staging_copied_[staging] : *chunks_[c].home_read;
  STRATA_RETURN_IF_ERROR(backend_.record(source_done, Stream::h2d));
  sl.chunk = static_cast<int64_t>(c);
  chunks_[c].slot = s;
  counters_.h2d_bytes += bytes;
  if (staging >= 0) staging_used_[staging] = ++tick_;
  return Status::ok();
}

std::shared_ptr<std::atomic<int64_t>> TierManager::mark_compute() {
  auto reached = std::make_shared<std::atomic<int64_t>>(0);
  if (!backend_.host_callback(Stream::compute, [reached] { reached->store(steady_ns()); }).is_ok()) return nullptr;
  return reached;
}

bool TierManager::compute_starved(const std::shared_ptr<std::atomic<int64_t>>& reached) {
  const int64_t at = reached ? reached->load() : 0;
  if (at == 0) return false;  // none queued, or the compute is still on work queued before the read
  // Idle under the threshold is the host's own pace between enqueues, not the read's: not counted.
  const int64_t idle = steady_ns() - at;
  if (static_cast<double>(idle) * 1e-9 <= kLateArrivalSeconds) return false;
  wait_clock_->total_ns.fetch_add(static_cast<uint64_t>(idle));
  wait_clock_->waits.fetch_add(1);
  wait_clock_->late.fetch_add(1);
  return true;
}

void TierManager::wait_arrival(const DeviceSlot& sl, bool late, Stream reader) {
  // Resident and arrived: nothing to order. Else the reader waits (the host does not); the compute
  // stream's wait is timed (another reader's, a gather ahead, is not a compute wait).
  if (backend_.query(*sl.filled)) return;
  const Status w = reader == Stream::compute ? timed_compute_wait(backend_, *sl.filled, wait_clock_, late)
                                             : backend_.wait(reader, *sl.filled);
  if (!w.is_ok()) {
    // No wait could be queued: order by blocking the host instead, so the data is never used early.
    spdlog::warn("{}: {} wait on a chunk arrival failed ({}); synchronizing on the host", options_.name,
                 stream_name(reader), w.to_string());
    (void)backend_.synchronize(*sl.filled);
  }
}

// ---- acquire / release ---------------------------------------------------------------------------

StatusOr<std::byte*> TierManager::acquire_for(size_t c, Stream reader) {
  if (c >= chunks_.size()) return error(Code::invalid_argument, "{}: acquire of chunk {} (there are {})", options_.name, c, chunks_.size());
  STRATA_RETURN_IF_ERROR(write_error_.status());
  if (update_chunk_ == c)
    return error(Code::failed_precondition, "{}: acquire of chunk {} while its update buffer is outstanding (commit it first)",
                 options_.name, c);
  Chunk& ch = chunks_[c];
  std::shared_ptr<std::atomic<int64_t>> reached;  // an NVMe read's host block (mark_compute)
  bool late = false;
  if (ch.slot >= 0) {
    counters_.hits++;
  } else {
    const int s = pick_slot(ch.group, /*demand=*/true, 0);
    if (s < 0)
      return error(Code::failed_precondition,
                   "{}: chunk {} needs a slot of group '{}', but all {} of its slots are held (acquired, not released); "
                   "the group needs more slots for this access pattern",
                   options_.name, c, group_name(options_, ch.group), options_.group_slots[ch.group]);
    if (options_.home == Tier::cpu) {
      counters_.misses++;
      STRATA_RETURN_IF_ERROR(copy_in(c, s, ch.home.data(), -1));
    } else {
      if (!ch.read_error.is_ok()) {
        Status e = ch.read_error;
        ch.read_error = Status();  // a later acquire tries again
        return e;
      }
      if (ch.copy >= 0) {
        counters_.staged_hits++;
        (ch.copy_read ? counters_.cache_hits : counters_.written_hits)++;
        STRATA_RETURN_IF_ERROR(copy_in(c, s, staging_[ch.copy].data, ch.copy));
      } else {
        // The host may now block on the read: does the compute run out of work meanwhile?
        if (ch.reading < 0 || !staging_.done(ch.reading)) reached = mark_compute();
        if (ch.reading >= 0) {
          counters_.staged_hits++;
        } else {
          counters_.misses++;
          STRATA_ASSIGN_OR_RETURN(int b, take_staging(c, /*may_block=*/true));
          STRATA_RETURN_IF_ERROR(begin_chunk_read(c, b));
        }
        const int b = ch.reading;
        STRATA_RETURN_IF_ERROR(finish_read(b));  // bad bytes never reach a slot
        late = compute_starved(reached);
        keep_copy(c, b, /*from_read=*/true);
        STRATA_RETURN_IF_ERROR(copy_in(c, s, staging_[b].data, b));
      }
    }
  }
  DeviceSlot& sl = slot_of(c);
  sl.holds++;
  sl.last_use = ++tick_;
  wait_arrival(sl, late, reader);
  prefetcher_.on_access(c);
  prefetch();
  return sl.ptr;
}

Status TierManager::release(size_t c) {
  if (c >= chunks_.size() || chunks_[c].slot < 0 || slot_of(c).holds == 0)
    return error(Code::failed_precondition, "{}: release of chunk {}, which is not acquired", options_.name, c);
  DeviceSlot& sl = slot_of(c);
  STRATA_RETURN_IF_ERROR(backend_.record(*sl.drained, Stream::compute));
  sl.holds--;
  sl.last_use = ++tick_;
  return Status::ok();
}

// ---- prefetch ------------------------------------------------------------------------------------

void TierManager::prefetch() {
  if (!prefetcher_.replaying() || !write_error_.ok()) return;
  const std::vector<size_t> device = prefetcher_.upcoming(window_, options_.chunk_bytes);
  // Hop 2 (to the device): chunks in the window whose home (or finished read) is ready.
  for (size_t u : device) {
    Chunk& ch = chunks_[u];
    if (ch.slot >= 0 || update_chunk_ == u || ch.update_due || !ch.read_error.is_ok()) continue;
    if (options_.home == Tier::nvme && ch.reading < 0 && ch.copy < 0) continue;  // read below; H2D later
    const int s = pick_slot(ch.group, /*demand=*/false, prefetcher_.next_use(u));
    if (s < 0) continue;
    Status st;
    if (options_.home == Tier::cpu) {
      st = copy_in(u, s, ch.home.data(), -1);
    } else if (ch.copy >= 0) {
      if (ch.copy_read) counters_.cache_hits++;
      st = copy_in(u, s, staging_[ch.copy].data, ch.copy);
    } else {
      const int b = ch.reading;
      st = finish_read(b);
      if (st.is_ok()) {
        keep_copy(u, b, /*from_read=*/true);
        st = copy_in(u, s, staging_[b].data, b);
      }
    }
    if (!st.is_ok()) {
      ch.read_error = st.with_context(fmt::format("prefetch of chunk {}", u));
      continue;
    }
    counters_.prefetches++;
  }
  if (options_.home != Tier::nvme) return;
  // Hop 1 (NVMe to pinned): reads for the window and as far past it as the staging ring holds.
  const std::vector<size_t> reads =
      prefetcher_.upcoming(window_ + staging_bytes_, options_.chunk_bytes);
  for (size_t u : reads) {
    Chunk& ch = chunks_[u];
    if (ch.slot >= 0 || ch.reading >= 0 || ch.copy >= 0 || update_chunk_ == u || ch.update_due ||
        !ch.read_error.is_ok())
      continue;
    auto b = take_staging(u, /*may_block=*/false, prefetcher_.next_use(u));
    if (!b.is_ok() || *b < 0) {
      // None free: a chunk every buffer holds ends the reads; a larger one may have found only
      // smaller cache buffers free, which the next chunks may fit.
      if (staging_need(u) <= smallest_staging_) break;
      continue;
    }
    Status st = begin_chunk_read(u, *b);
    if (!st.is_ok()) {
      ch.read_error = st.with_context(fmt::format("prefetch of chunk {}", u));
      continue;
    }
    counters_.prefetch_reads++;
  }
}

// ---- NVMe staging --------------------------------------------------------------------------------

uint64_t TierManager::copy_use(size_t b, const std::vector<uint64_t>& uses) const {
  const int64_t c = staging_[b].holder;
  if (c < 0 || chunks_[c].slot >= 0) return Prefetcher::kNever;
  return uses[static_cast<size_t>(c)];
}

void TierManager::keep_copy(size_t c, int b, bool from_read) {
  Chunk& ch = chunks_[c];
  if (ch.copy >= 0 && ch.copy != b) forget_copy(ch.copy);
  ch.copy = b;
  ch.copy_read = from_read;
  staging_[b].holder = static_cast<int64_t>(c);
  staging_used_[b] = ++tick_;
}

uint64_t TierManager::staging_need(size_t c) const {
  return buffer_size(options_.chunk_bytes[c], std::max<uint64_t>(store_->alignment(), 1));
}

StatusOr<int> TierManager::take_staging(size_t c, bool may_block, uint64_t needed_at) {
  const size_t n = staging_.size();
  auto at = [&](size_t i) { return static_cast<int>((staging_next_ + i) % n); };
  // Only buffers that hold chunk c's transfer (a cache buffer may be a smaller chunk's size).
  const uint64_t need = staging_need(c);
  auto fits = [&](size_t b) { return staging_[b].bytes >= need; };
  auto take = [&](int b) {
    staging_next_ = static_cast<uint32_t>((b + 1) % n);
    forget_copy(b);  // its bytes are about to change
    return b;
  };
  // A write that has completed frees its buffer without waiting (its copy stays).
  for (size_t b = 0; b < n; b++)
    if (staging_writing(b) && staging_.done(b)) (void)finish_write(static_cast<int>(b));
  // An idle buffer whose last H2D has completed: first one holding no copy, then the copy used
  // farthest ahead (one of a chunk on the device counts as never), ties least recently used. A read
  // ahead takes no copy needed before the chunk it reads (nor at once with it).
  // The chunks' next uses in one pass over the trace, once a copy is weighed (a cache holds many).
  int best = -1;
  uint64_t best_use = 0;
  bool weighed = false;
  for (size_t i = 0; i < n; i++) {
    const int b = at(i);
    if (!fits(b) || !staging_idle(b) || !backend_.query(*staging_copied_[b])) continue;
    if (staging_[b].holder < 0) return take(b);
    if (!weighed) prefetcher_.next_uses(chunks_.size(), next_uses_);
    weighed = true;
    const uint64_t use = copy_use(b, next_uses_);
    if (!may_block && needed_at != Prefetcher::kNever && use <= needed_at) continue;
    if (best < 0 || use > best_use || (use == best_use && staging_used_[b] < staging_used_[best])) {
      best = b;
      best_use = use;
    }
  }
  if (best >= 0) return take(best);
  if (!may_block) return -1;
  // An idle buffer whose H2D is still running: wait for it.
  for (size_t i = 0; i < n; i++) {
    if (!fits(at(i)) || !staging_idle(at(i))) continue;
    STRATA_RETURN_IF_ERROR(backend_.synchronize(*staging_copied_[at(i)]));
    return take(at(i));
  }
  // A write in flight: finish it (its error, if any, is recorded and sticky) and any H2D of its
  // bytes (the written copy may have fed a slot).
  for (size_t i = 0; i < n; i++) {
    if (!fits(at(i)) || !staging_writing(at(i))) continue;
    (void)finish_write(at(i));
    STRATA_RETURN_IF_ERROR(backend_.synchronize(*staging_copied_[at(i)]));
    return take(at(i));
  }
  // A prefetch read: drop it (the chunk is read again when needed).
  for (size_t i = 0; i < n; i++) {
    if (!fits(at(i)) || !staging_reading(at(i))) continue;
    discard_read(staging_[at(i)].chunk());
    return take(at(i));
  }
  return error(Code::failed_precondition, "{}: no NVMe staging buffer is free (the outstanding update buffer holds the only one;"
               " use nvme_staging >= 2)", options_.name);
}

Status TierManager::begin_chunk_read(size_t c, int b) {
  STRATA_RETURN_IF_ERROR(finish_chunk_write(c));  // a read must see the last committed write
  STRATA_RETURN_IF_ERROR(staging_.begin(b, IoOp::read, chunks_[c].extent, c, options_.chunk_bytes[c]));
  chunks_[c].reading = b;
  return Status::ok();
}

Status TierManager::finish_read(int b) {
  chunks_[staging_[b].chunk()].reading = -1;
  return staging_.finish(b);
}

Status TierManager::finish_write(int b) {
  chunks_[staging_[b].chunk()].writing = -1;
  return write_error_.record(staging_.finish(b));
}

bool TierManager::staging_idle(size_t b) const { return !staging_[b].pending() && static_cast<int>(b) != update_staging_; }
bool TierManager::staging_reading(size_t b) const { return staging_[b].pending() && staging_[b].op() == IoOp::read; }
bool TierManager::staging_writing(size_t b) const { return staging_[b].pending() && staging_[b].op() == IoOp::write; }
void TierManager::forget_copy(int b) {
  int64_t& copy_of = staging_[b].holder;
  if (copy_of < 0) return;
  chunks_[copy_of].copy = -1;
  copy_of = -1;
}

void TierManager::discard_read(size_t c) {
  if (chunks_[c].reading < 0) return;
  counters_.discarded_reads++;
  (void)finish_read(chunks_[c].reading);  // an error here is met again by the next read of c
}

Status TierManager::finish_chunk_write(size_t c) {
  return chunks_[c].writing >= 0 ? finish_write(chunks_[c].writing) : Status::ok();
}

// ---- updates and reads ---------------------------------------------------------------------------

StatusOr<std::byte*> TierManager::update_buffer(size_t c) {
  if (c >= chunks_.size()) return error(Code::invalid_argument, "{}: update of chunk {} (there are {})", options_.name, c, chunks_.size());
  STRATA_RETURN_IF_ERROR(write_error_.status());
  Chunk& ch = chunks_[c];
  if (ch.slot >= 0 && slot_of(c).holds > 0)
    return error(Code::failed_precondition, "{}: update of chunk {} while it is acquired (release it first)", options_.name, c);
  if (update_chunk_.has_value()) {
    if (*update_chunk_ != c)
      return error(Code::failed_precondition, "{}: update of chunk {} while chunk {}'s update is outstanding (commit it first)",
                   options_.name, c, *update_chunk_);
    return options_.home == Tier::cpu ? ch.home.data() : staging_[update_staging_].data;
  }
  if (options_.home == Tier::cpu) {
    STRATA_RETURN_IF_ERROR(backend_.synchronize(*ch.home_read));  // no H2D still reads the home
    update_chunk_ = c;
    return ch.home.data();
  }
  discard_read(c);
  STRATA_ASSIGN_OR_RETURN(int b, take_staging(c, /*may_block=*/true));
  update_chunk_ = c;
  update_staging_ = b;
  return staging_[b].data;
}

void TierManager::expect_update(size_t c, bool expected) {
  if (c < chunks_.size()) chunks_[c].update_due = expected;
}

Status TierManager::commit_update(size_t c) {
  if (update_chunk_ != c)
    return error(Code::failed_precondition, "{}: commit of chunk {} without its update buffer", options_.name, c);
  Chunk& ch = chunks_[c];
  if (ch.slot >= 0 && slot_of(c).holds > 0)
    return error(Code::failed_precondition, "{}: commit of chunk {} while it is acquired (release it first)", options_.name, c);
  unmap(c);  // every device copy of c is stale from now on
  ch.update_due = false;
  if (options_.home == Tier::cpu) {
    update_chunk_.reset();
    return Status::ok();
  }
  const int b = update_staging_;
  update_chunk_.reset();
  update_staging_ = -1;
  discard_read(c);
  STRATA_RETURN_IF_ERROR(finish_chunk_write(c));  // one write per extent at a time
  STRATA_RETURN_IF_ERROR(write_error_.status());
  Status w = staging_.begin(b, IoOp::write, ch.extent, c, options_.chunk_bytes[c]);
  if (!w.is_ok()) return write_error_.record(w);
  ch.writing = b;
  keep_copy(c, b, /*from_read=*/false);  // an older copy's bytes are forgotten
  return Status::ok();
}

Status TierManager::flush() {
  for (size_t b = 0; b < staging_.size(); b++)
    if (staging_writing(b)) (void)finish_write(static_cast<int>(b));
  return write_error_.status();
}

Status TierManager::read(size_t c, std::byte* host) {
  if (c >= chunks_.size()) return error(Code::invalid_argument, "{}: read of chunk {} (there are {})", options_.name, c, chunks_.size());
  const uint64_t bytes = options_.chunk_bytes[c];
  if (options_.home == Tier::cpu) {
    std::memcpy(host, chunks_[c].home.data(), bytes);
    return Status::ok();
  }
  STRATA_RETURN_IF_ERROR(write_error_.status());
  if (chunks_[c].copy >= 0) {
    std::memcpy(host, staging_[chunks_[c].copy].data, bytes);
    staging_used_[chunks_[c].copy] = ++tick_;
    return Status::ok();
  }
  discard_read(c);
  STRATA_ASSIGN_OR_RETURN(int b, take_staging(c, /*may_block=*/true));
  STRATA_RETURN_IF_ERROR(begin_chunk_read(c, b));
  STRATA_RETURN_IF_ERROR(finish_read(b));
  keep_copy(c, b, /*from_read=*/true);
  std::memcpy(host, staging_[b].data, bytes);
  return Status::ok();
}

// ---- stats ---------------------------------------------------------------------------------------

TierStats TierManager::stats() const {
  TierStats s = counters_;
  const PrefetcherStats p = prefetcher_.stats();
  s.sequences_recorded = p.sequences_recorded - prefetch_base_.sequences_recorded;
  s.sequences_replayed = p.sequences_replayed - prefetch_base_.sequences_replayed;
  for (const SlotGroup& g : groups_) s.device_bytes += g.bytes() * g.size();
  for (const Chunk& ch : chunks_) s.pinned_bytes += ch.home.size();
  s.pinned_bytes += staging_.pinned_bytes();
  s.nvme_read_bytes = staging_.stats().read_bytes;
  s.nvme_write_bytes = staging_.stats().write_bytes;
  if (store_ != nullptr)
    for (uint64_t b : options_.chunk_bytes) s.nvme_bytes += store_->padded_size(b);
  for (const SlotGroup& g : groups_)
    for (size_t i = 0; i < g.size(); i++)
      if (g[i].chunk >= 0) s.device_cached_bytes += options_.chunk_bytes[g[i].chunk];
  s.compute_wait_seconds = wait_clock_->seconds();
  s.compute_waits = wait_clock_->waits.load();
  s.late_arrivals = wait_clock_->late.load();
  return s;
}

void TierManager::reset_stats() {
  counters_ = TierStats();
  staging_.reset_stats();
  prefetch_base_ = prefetcher_.stats();
  wait_clock_->reset();
}

}  // namespace strata
