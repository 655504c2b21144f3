// TierManager: the paging WeightSource. Every chunk's working weights live at home in pinned CPU
// memory or in an NVMe extent (NvmeStore), and visit the device only through a fixed set of device
// slots, fetched ahead of the compute along the order the Prefetcher recorded (NVMe -> pinned
// staging -> device, the two hops pipelined on the host and the H2D stream). Slots, pinned homes,
// staging buffers and extents are carved once in create(); nothing is allocated afterwards.
// Not a planner (the caller picks homes, groups and slot counts) and not a gradient path
// (GradientOffloader); optimizer states are not here either.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "offload/chunk_source.h"
#include "offload/compute_wait_clock.h"
#include "offload/nvme_store.h"
#include "offload/prefetcher.h"
#include "offload/slot_group.h"
#include "offload/staging_ring.h"
#include "offload/sticky_error.h"
#include "offload/tier.h"
#include "runtime/backend.h"
#include "runtime/pinned_pool.h"

namespace strata {

class TraceRecorder;  // offload/trace.h

struct TierManagerOptions {
  // Per chunk (indexed as ParamLayout::chunks): bytes of its working weights, padded to 4 KiB by the
  // caller (a size that is not is padded here for slots and buffers; chunk_bytes(c) stays as given).
  std::vector<uint64_t> chunk_bytes;
  Tier home = Tier::cpu;  // cpu or nvme, for every chunk
  // Device slot groups: chunk c is paged through the slots of group chunk_group[c]; group g has
  // group_slots[g] slots, each the size of its largest chunk. A chunk is only ever in its group's
  // slots, so a small chunk (the embedding) never takes a big slot, nor a big one (the head) a
  // layer's. Every group needs at least one chunk and one slot.
  std::vector<uint32_t> chunk_group;
  std::vector<uint32_t> group_slots;
  std::vector<std::string> group_names;  // optional, for tags and messages ("layers"); default "group g"
  // Prefetch window in bytes: chunks whose cumulative bytes fit are fetched ahead of the compute
  // (always at least the next one). 0 = derived: sum over groups of (slots - 1) * slot bytes, the
  // slots not needed by the current access.
  uint64_t prefetch_bytes = 0;
  // Pinned staging buffers (each the largest chunk, padded per the store) for the NVMe -> device
  // hop and for updates written to NVMe. nvme home only.
  uint32_t nvme_staging = 2;
  // The pinned read cache (nvme home; 0: none): this many more buffers (at most one per chunk:
  // tier_cache_chunks), first of the size most chunks have (the layers'), then of the larger
  // chunks' sizes, beside the staging buffers of the largest chunk; a chunk goes only into a buffer
  // that holds it. Every
  // staging buffer keeps the bytes of the chunk it last read or wrote until it is taken for other
  // bytes, so a chunk whose copy is still held is served from RAM, not read from NVMe again
  // (DeepSpeed's offload_param.max_in_cpu). A buffer is taken from the copy used farthest ahead
  // (the recorded order), ties least recently used; a read ahead never evicts a copy needed before
  // the chunk it reads. NVMe reads in flight: at most nvme_staging + cache_chunks.
  uint32_t cache_chunks = 0;
  std::string name = "weights";  // for tags and messages
};

// invalid_argument naming what is wrong (no chunks, sizes/groups of different lengths, a chunk of 0
// bytes, a group index out of range, a group with no chunk or 0 slots, home not cpu/nvme, an nvme
// home with no store or no staging buffer), else ok. `have_store`: an NvmeStore will be given.
Status check_tier_options(const TierManagerOptions& options, bool have_store);

// The device bytes create() takes for slots: sum over groups of slots * largest chunk of the group
// (4 KiB-padded). For a preflight against the device budget before anything is allocated.
// Options that fail check_tier_options give the figure for their valid parts.
uint64_t tier_device_bytes(const TierManagerOptions& options);
// The pinned bytes create() takes: cpu home, every chunk's home buffer; nvme home, the staging
// ring and the read cache. `alignment`/padding of the store: pass store.alignment() (4096 when
// unknown).
uint64_t tier_pinned_bytes(const TierManagerOptions& options, uint32_t store_alignment = 4096);
// The read cache `cache_bytes` of pinned memory buys for `options` (an nvme home): buffers of the
// most common chunk size, then of the larger chunks' (padded as tier_pinned_bytes pads them), as
// many as fit, at most one per chunk (all of them kept: beside the staging buffers every chunk has
// a copy). 0 for a cpu home.
uint32_t tier_cache_chunks(const TierManagerOptions& options, uint64_t cache_bytes, uint32_t store_alignment = 4096);
// The pinned bytes of the first `chunks` read-cache buffers of `options` (tier_cache_chunks' order;
// 0 for a cpu home or none).
uint64_t tier_cache_bytes(const TierManagerOptions& options, uint32_t chunks, uint32_t store_alignment = 4096);
// The pinned bytes of one staging buffer of `options`, the largest chunk's (0 for a cpu home).
uint64_t tier_staging_buffer_bytes(const TierManagerOptions& options, uint32_t store_alignment = 4096);

// The share of `acquires` whose chunk arrived in time, `late` of them not (1 with none).
inline double arrived_in_time(uint64_t acquires, uint64_t late) {
  return acquires ? double(acquires - (late < acquires ? late : acquires)) / double(acquires) : 1.0;
}

struct TierStats {
  uint64_t h2d_bytes = 0;         // bytes copied into device slots
  uint64_t nvme_read_bytes = 0;   // bytes read from NVMe extents (chunk bytes)
  uint64_t nvme_write_bytes = 0;  // bytes written to NVMe extents (chunk bytes)
  uint64_t hits = 0;              // acquires that found the chunk in (or on its way to) a slot
  uint64_t misses = 0;            // acquires that had to start the fetch (nothing was in flight)
  uint64_t staged_hits = 0;       // nvme: acquires whose read was in flight, the H2D started at acquire
  uint64_t written_hits = 0;      // nvme, of staged_hits: served from the staging buffer of the chunk's
                                  // last commit (an update just written), no read from NVMe
  uint64_t cache_hits = 0;        // nvme: copies to the device (at an acquire or ahead of it) served
                                  // from a buffer still holding an earlier read of the chunk (the read
                                  // cache), no read from NVMe
  uint64_t discarded_reads = 0;   // nvme: reads finished and dropped unused (an update replaced the
                                  // chunk's bytes, or the staging buffer was needed first)
  uint64_t prefetches = 0;        // H2D copies issued ahead of an acquire
  uint64_t prefetch_reads = 0;    // nvme reads begun ahead of an acquire
  uint64_t evictions = 0;         // slots taken from a cached chunk
  uint64_t sequences_recorded = 0;
  uint64_t sequences_replayed = 0;  // sequences that followed their recorded trace to the end
  // Bytes per tier, as carved in create (fixed for the manager's life).
  uint64_t device_bytes = 0;  // device slots
  uint64_t pinned_bytes = 0;  // pinned homes (cpu) or staging (nvme)
  uint64_t nvme_bytes = 0;    // padded extents
  uint64_t device_cached_bytes = 0;  // now: bytes of chunks whose current weights sit in slots
  // Time Stream::compute stood waiting for chunks that had not arrived when acquired (measured
  // on the stream by host callbacks around the wait), and how many such waits; with an NVMe home
  // also the time it stood idle, out of queued work, while the host was blocked in an acquire's
  // read (stamped by a callback on the stream; counted, as one more wait, when over
  // kLateArrivalSeconds).
  double compute_wait_seconds = 0;
  uint64_t compute_waits = 0;
  // Acquires whose chunk reached the device after the compute needed it: the compute waited for
  // the arrival, or stood idle for the host's read, longer than kLateArrivalSeconds. Every other
  // acquire's fetch was in time, however late the host issued it (the host queues work ahead of
  // the compute stream, so a fetch begun at the acquire is often still ahead of the compute).
  uint64_t late_arrivals = 0;
  uint64_t acquires() const { return hits + misses + staged_hits; }
};

// Ownership: the manager owns its slots (device blocks of `backend`), pinned buffers (from `pool`),
// extents (in `store`) and events; the backend, pool, store and trace recorder are borrowed and must
// outlive it. Thread-safety: one driving thread calls every method (the WeightSource contract);
// stats() and reset_stats() too. The backend's stream threads only run queued copies and the
// compute-wait callbacks, which touch atomics alone.
// Ordering: acquire() returns a pointer that compute work queued afterwards may read (the compute
// stream waits for its arrival event, the host does not block); the slot is overwritten only after
// the compute work queued before its release() (the H2D stream waits for the release event).
// Every chunk of an nvme home must be committed once (update_buffer + commit_update) before it is
// acquired or read; a cpu home starts zeroed.
class TierManager final : public WeightSource {
 public:
  // `store`: required iff options.home is nvme. `trace`: optional (null = no spans).
  // Errors: invalid_argument (check_tier_options); out_of_memory when the device arena refuses a
  // slot (naming the device bytes all slots need) or the pinned pool a buffer; no_space from the
  // store.
  static StatusOr<std::unique_ptr<TierManager>> create(Backend& backend, PinnedPool& pool, NvmeStore* store,
                                                       TraceRecorder* trace, TierManagerOptions options);
  // Synchronizes every stream, finishes outstanding NVMe I/O (errors are logged: call flush() to
  // see them), returns the slots to the arena and the extents to the store.
  ~TierManager() override;
  TierManager(const TierManager&) = delete;
  TierManager& operator=(const TierManager&) = delete;

  // ---- WeightSource (chunk_source.h) ---------------------------------------------------------------
  size_t chunk_count() const override { return options_.chunk_bytes.size(); }
  uint64_t chunk_bytes(size_t c) const override { return options_.chunk_bytes[c]; }
  Status begin_sequence(std::string_view name) override;
  Status end_sequence() override;
  // A hit uses the slot as is; a miss takes a free slot of the chunk's group, else evicts the
  // unheld cached chunk used farthest ahead (then least recently), and fetches. failed_precondition
  // when every slot of the group is held. An NVMe read error (I/O, CRC) is returned naming the
  // chunk and extent, and leaves no slot holding the chunk. Then prefetches along the trace.
  StatusOr<std::byte*> acquire(size_t c) override { return acquire_for(c, Stream::compute); }
  // The same, the arrival ordered before `reader`'s later work (timed as a compute wait only on
  // Stream::compute).
  StatusOr<std::byte*> acquire_for(size_t c, Stream reader) override;
  Status release(size_t c) override;
  // cpu home: the chunk's pinned home itself (after any H2D reading it completed); nvme home: a
  // pinned staging buffer (padded_size bytes; the padding is zeroed on write). failed_precondition
  // while c is held, or while another chunk's update buffer is outstanding.
  StatusOr<std::byte*> update_buffer(size_t c) override;
  // Invalidates c's device copies; nvme: begins the write (finished on staging reuse, before a read
  // of c, or in flush()). failed_precondition while c is held or without update_buffer(c).
  Status commit_update(size_t c) override;
  // Marks chunk c (expected) as about to be replaced: the prefetcher fetches it neither from NVMe
  // nor to the device until commit_update(c) or expect_update(c, false). A read already in
  // flight is left to finish (and dropped at the commit). An index out of range is ignored.
  void expect_update(size_t c, bool expected) override;
  // Finishes every NVMe write; the first write error, naming its chunk (sticky: a failed write left
  // that chunk without valid weights, so every later call returns it).
  Status flush() override;
  Status read(size_t c, std::byte* host) override;

  // ---- introspection ---------------------------------------------------------------------------------
  TierStats stats() const;
  void reset_stats();  // counters and wait time to zero; sizes and the prefetcher's traces stay
  const TierManagerOptions& options() const { return options_; }
  uint64_t prefetch_window() const { return window_; }
  const Prefetcher& prefetcher() const { return prefetcher_; }

 private:
  struct Chunk;
  TierManager(Backend& backend, PinnedPool& pool, NvmeStore* store, TraceRecorder* trace, TierManagerOptions options);
  Status carve();

  // Slot choice: a free slot of `group`, else the unheld one whose chunk is used farthest ahead.
  // `demand`: any unheld slot qualifies (ties: least recently used); prefetch: only chunks used
  // strictly later than `needed_at` (Prefetcher::next_use of the chunk to fetch). -1: none.
  int pick_slot(uint32_t group, bool demand, uint64_t needed_at) const;
  void evict(DeviceSlot& slot);
  DeviceSlot& slot_of(size_t c);  // the slot holding c's weights (precondition: there is one)
  void unmap(size_t c);
  // Queues the H2D of chunk c from `src` into slot s (after the slot's last compute use) and maps it.
  Status copy_in(size_t c, int s, const std::byte* src, int staging);
  Status fetch_demand(size_t c, int s);
  void prefetch();
  // NVMe staging: a buffer to use now (-1: none without blocking when !may_block). A read ahead
  // (!may_block) passes `needed_at`, the next use of the chunk it reads: a copy needed no later is
  // kept.
  StatusOr<int> take_staging(size_t c, bool may_block, uint64_t needed_at = Prefetcher::kNever);
  uint64_t staging_need(size_t c) const;  // the staging bytes chunk c's transfer takes
  // How much a buffer's bytes are still worth: kNever for no copy or a copy of a chunk on the
  // device (served from its slot), else its chunk's next use (`uses`: Prefetcher::next_uses).
  // Larger is taken first.
  uint64_t copy_use(size_t b, const std::vector<uint64_t>& uses) const;
  void keep_copy(size_t c, int b, bool from_read);  // staging b holds c's current bytes
  Status begin_chunk_read(size_t c, int b);
  Status finish_read(int b);         // finishes staging b's read; on error frees b and returns it with context
  Status finish_write(int b);        // finishes staging b's write; records the first error (sticky)
  bool staging_idle(size_t b) const;     // no transfer and not the outstanding update buffer
  bool staging_reading(size_t b) const;  // a read in flight
  bool staging_writing(size_t b) const;  // a write in flight
  void discard_read(size_t c);       // finishes and drops a prefetch read of c (its data unused)
  void forget_copy(int b);           // staging b no longer stands for its chunk's committed bytes
  Status finish_chunk_write(size_t c);
  // `late`: this acquire already counted as a late arrival (the host's read starved the compute).
  void wait_arrival(const DeviceSlot& slot, bool late, Stream reader);
  // Around a host block on an acquire's NVMe read: a callback on the compute stream stamps when the
  // compute reaches this point (null when none could be queued); compute_starved then says whether
  // it ran out of queued work for over kLateArrivalSeconds while the host stood in the read (then
  // that idle time is a compute wait, and the acquire late).
  std::shared_ptr<std::atomic<int64_t>> mark_compute();
  bool compute_starved(const std::shared_ptr<std::atomic<int64_t>>& reached);

  Backend& backend_;
  PinnedPool& pool_;
  NvmeStore* const store_;
  TraceRecorder* const trace_;
  const TierManagerOptions options_;
  uint64_t window_ = 0;
  std::vector<uint64_t> padded_;      // per chunk: bytes padded to 4 KiB (slots) / store padding (staging)
  std::vector<SlotGroup> groups_;     // the device slots, per group
  std::vector<Chunk> chunks_;
  StagingRing staging_;              // nvme home; holder: the chunk whose committed bytes it holds
  std::vector<std::unique_ptr<Event>> staging_copied_;  // per buffer, Stream::h2d: its last H2D's end
  std::vector<uint64_t> staging_used_;  // per buffer: tick_ of its bytes' last fill or use (LRU ties)
  std::vector<uint64_t> next_uses_;     // take_staging's scratch: every chunk's next use
  uint64_t staging_bytes_ = 0;       // the staging and cache buffers' bytes together
  uint64_t smallest_staging_ = 0;    // the smallest buffer's bytes
  uint32_t staging_next_ = 0;        // round-robin start for staging choice
  Prefetcher prefetcher_;
  std::optional<size_t> update_chunk_;  // the chunk whose update buffer is outstanding
  int update_staging_ = -1;
  StickyError write_error_;          // first failed NVMe write
  uint64_t tick_ = 0;                // LRU clock
  TierStats counters_;               // the counter fields of stats()
  PrefetcherStats prefetch_base_;    // prefetcher stats at reset_stats()
  std::shared_ptr<ComputeWaitClock> wait_clock_;  // shared with the compute-wait callbacks
};

}  // namespace strata
