// TierManager on the CPU backend, weights homed on pinned CPU memory and on NVMe (a store over the
// in-memory engine, or the fault-injecting one): training-like access orders through fewer slots
// than chunks hand out exactly the committed bytes, the trace replays from the second sequence
// with prefetch hits, commits are never served stale, the arena holds exactly the carved slots,
// NVMe read faults and CRC failures surface as errors naming the chunk and never as data, and the
// preconditions (commit while held, every slot of a group held) are refused.
#include "offload/tier_manager.h"

#include <chrono>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "offload/fault_engine.h"
#include "offload/mem_engine.h"
#include "offload/trace.h"
#include "offload_test_util.h"
#include "runtime/units.h"

namespace strata {
namespace {

constexpr uint64_t kLayer = 3 * 4096;  // a layer chunk
constexpr uint64_t kEmbed = 2 * 4096;
constexpr uint64_t kHead = 5 * 4096;


// Chunk 0: embedding (own group, 1 slot); 1..layers: layers (one group, `layer_slots`); last: head.
TierManagerOptions model_options(Tier home, size_t layers, uint32_t layer_slots) {
  TierManagerOptions o;
  o.home = home;
  o.chunk_bytes.push_back(kEmbed);
  o.chunk_group.push_back(0);
  for (size_t l = 0; l < layers; l++) {
    o.chunk_bytes.push_back(kLayer);
    o.chunk_group.push_back(1);
  }
  o.chunk_bytes.push_back(kHead);
  o.chunk_group.push_back(2);
  o.group_slots = {1, layer_slots, 1};
  o.group_names = {"embedding", "layers", "head"};
  return o;
}

// The byte at offset i of chunk c at version v.
std::byte pattern(size_t c, uint32_t v, uint64_t i) {
  return static_cast<std::byte>((c * 131 + v * 17 + i * 7 + (i >> 12)) & 0xFF);
}

struct Rig {
  explicit Rig(Tier home, std::unique_ptr<IoEngine> io = std::make_unique<MemEngine>(), uint32_t io_attempts = 3) {
    backend = test::value_of(make_backend(BackendOptions{.kind = BackendKind::cpu, .memory_budget = 8 << 20}));
    pool = test::value_of(PinnedPool::create(PinnedPoolOptions{.capacity = 64 << 20, .slab_bytes = 1 << 20,
                                                           .allow_cuda = false, .allow_mlock = false,
                                                           .huge_pages = false}));
    engine = std::move(io);
    if (home == Tier::nvme) {
      NvmeStoreOptions so;
      so.paths = {dir.path()};
      so.capacity = 4 << 20;
      so.stripe_unit = 64 << 10;
      so.probe = test::roomy_probe;
      so.io_attempts = io_attempts;
      store = test::value_of(NvmeStore::create(*engine, so));
    }
  }
  StatusOr<std::unique_ptr<TierManager>> make(TierManagerOptions o, TraceRecorder* trace = nullptr) {
    return TierManager::create(*backend, *pool, store.get(), trace, std::move(o));
  }

  test::ScratchDir dir;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<PinnedPool> pool;
  std::unique_ptr<IoEngine> engine;
  std::unique_ptr<NvmeStore> store;
};

void write_chunk(TierManager& tm, size_t c, uint32_t version) {
  auto buf = tm.update_buffer(c);
  ASSERT_TRUE(buf.is_ok()) << buf.status().to_string();
  for (uint64_t i = 0; i < tm.chunk_bytes(c); i++) (*buf)[i] = pattern(c, version, i);
  Status s = tm.commit_update(c);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
}

void write_all(TierManager& tm, uint32_t version) {
  for (size_t c = 0; c < tm.chunk_count(); c++) write_chunk(tm, c, version);
  Status s = tm.flush();
  ASSERT_TRUE(s.is_ok()) << s.to_string();
}

// Copies what the compute would see at `p` (ordered after the arrival wait on Stream::compute).
std::vector<std::byte> device_bytes(Backend& b, const std::byte* p, uint64_t n) {
  std::vector<std::byte> host(n);
  EXPECT_TRUE(b.copy_to_host(host.data(), p, n, Stream::compute).is_ok());
  EXPECT_TRUE(b.synchronize(Stream::compute).is_ok());
  return host;
}

::testing::AssertionResult holds_version(Backend& b, const std::byte* p, size_t c, uint64_t n, uint32_t v) {
  const std::vector<std::byte> got = device_bytes(b, p, n);
  for (uint64_t i = 0; i < n; i++)
    if (got[i] != pattern(c, v, i))
      return ::testing::AssertionFailure() << "chunk " << c << " byte " << i << " is " << int(got[i]) << ", want "
                                           << int(pattern(c, v, i)) << " (version " << v << ")";
  return ::testing::AssertionSuccess();
}

// A training step's order: embedding, layers forward, head (twice: loss and its backward), layers
// backward, embedding (the tied wte's gradient).
std::vector<size_t> step_order(size_t layers) {
  std::vector<size_t> o{0};
  for (size_t l = 1; l <= layers; l++) o.push_back(l);
  o.push_back(layers + 1);
  o.push_back(layers + 1);
  for (size_t l = layers; l >= 1; l--) o.push_back(l);
  o.push_back(0);
  return o;
}

// Runs one sequence over `order`, checking every chunk's device bytes against `version`; a short
// sleep on the compute stream per chunk stands in for the layer's compute.
void run_sequence(Rig& r, TierManager& tm, const std::vector<size_t>& order, uint32_t version, bool slow_compute) {
  ASSERT_TRUE(tm.begin_sequence("train").is_ok());
  for (size_t c : order) {
    auto p = tm.acquire(c);
    ASSERT_TRUE(p.is_ok()) << "chunk " << c << ": " << p.status().to_string();
    if (slow_compute) {
      ASSERT_TRUE(r.backend->host_callback(Stream::compute, [] { std::this_thread::sleep_for(std::chrono::microseconds(200)); }).is_ok());
    }
    ASSERT_TRUE(holds_version(*r.backend, *p, c, tm.chunk_bytes(c), version));
    ASSERT_TRUE(tm.release(c).is_ok());
  }
  ASSERT_TRUE(tm.end_sequence().is_ok());
}

class TierHomes : public ::testing::TestWithParam<Tier> {};

TEST_P(TierHomes, PagesForwardAndBackwardThroughFewerSlotsThanChunks) {
  Rig r(GetParam());
  constexpr size_t kLayers = 8;
  TierManagerOptions o = model_options(GetParam(), kLayers, 3);
  r.backend->reset_peak();
  TraceRecorder trace;
  auto tm = r.make(o, &trace);
  ASSERT_TRUE(tm.is_ok()) << tm.status().to_string();
  TierManager& m = **tm;
  EXPECT_EQ(m.prefetch_window(), 2 * kLayer);  // derived: the layer group's 2 spare slots
  write_all(m, 1);

  const std::vector<size_t> order = step_order(kLayers);
  for (int step = 0; step < 4; step++) run_sequence(r, m, order, 1, step % 2 == 1);
  // Backward-only and forward-only sequences of their own name.
  std::vector<size_t> forward{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (int i = 0; i < 2; i++) {
    ASSERT_TRUE(m.begin_sequence("eval").is_ok());
    for (size_t c : forward) {
      auto p = m.acquire(c);
      ASSERT_TRUE(p.is_ok()) << p.status().to_string();
      ASSERT_TRUE(holds_version(*r.backend, *p, c, m.chunk_bytes(c), 1));
      ASSERT_TRUE(m.release(c).is_ok());
    }
    ASSERT_TRUE(m.end_sequence().is_ok());
  }

  const TierStats s = m.stats();
  EXPECT_EQ(s.sequences_recorded, 2u);  // "train" once, "eval" once
  EXPECT_EQ(s.sequences_replayed, 4u);  // 3 "train" + 1 "eval"
  EXPECT_GT(s.hits, 0u);
  EXPECT_GT(s.prefetches, 0u);
  EXPECT_EQ(s.hits + s.misses + s.staged_hits, 4 * order.size() + 2 * forward.size());
  EXPECT_GT(s.h2d_bytes, 0u);
  EXPECT_EQ(s.device_bytes, tier_device_bytes(o));
  EXPECT_EQ(s.device_bytes, kEmbed + 3 * kLayer + kHead);
  EXPECT_EQ(s.pinned_bytes, tier_pinned_bytes(o, r.store ? r.store->alignment() : 4096));
  if (GetParam() == Tier::nvme) {
    EXPECT_GT(s.nvme_read_bytes, 0u);
    EXPECT_EQ(s.nvme_write_bytes, kEmbed + kLayers * kLayer + kHead);
    EXPECT_GT(s.prefetch_reads, 0u);
    EXPECT_EQ(s.nvme_bytes, kEmbed + kLayers * kLayer + kHead);
    EXPECT_EQ(s.pinned_bytes, 2 * kHead);  // two staging buffers of the largest chunk
  } else {
    EXPECT_EQ(s.nvme_read_bytes, 0u);
    EXPECT_EQ(s.pinned_bytes, kEmbed + kLayers * kLayer + kHead);
  }
  // Nothing but the slots was taken from the arena, ever.
  EXPECT_EQ(r.backend->memory().peak, tier_device_bytes(o));
  EXPECT_EQ(r.backend->memory().in_use, tier_device_bytes(o));

  // The second sequence onwards prefetched: misses only where the slots could not keep the chunk.
  m.reset_stats();
  run_sequence(r, m, order, 1, true);
  const TierStats t = m.stats();
  EXPECT_EQ(t.sequences_replayed, 1u);
  EXPECT_GT(t.hits, t.misses) << "hits " << t.hits << " misses " << t.misses << " staged " << t.staged_hits;
  // Every H2D got a span on the "h2d" track (spans land once the stream ran them).
  ASSERT_TRUE(r.backend->synchronize_all().is_ok());
  const auto tracks = trace.tracks();
  EXPECT_NE(std::find(tracks.begin(), tracks.end(), "h2d"), tracks.end());
  if (GetParam() == Tier::nvme) {
    EXPECT_NE(std::find(tracks.begin(), tracks.end(), "nvme read"), tracks.end());
    EXPECT_NE(std::find(tracks.begin(), tracks.end(), "nvme write"), tracks.end());
  }
}

TEST_P(TierHomes, ACommitIsSeenByTheNextAcquireNeverAStaleSlot) {
  Rig r(GetParam());
  constexpr size_t kLayers = 6;
  auto tm = r.make(model_options(GetParam(), kLayers, 2));
  ASSERT_TRUE(tm.is_ok()) << tm.status().to_string();
  TierManager& m = **tm;
  write_all(m, 1);
  const std::vector<size_t> order = step_order(kLayers);
  run_sequence(r, m, order, 1, false);
  run_sequence(r, m, order, 1, false);
  // Between steps (the optimizer): every chunk gets new weights; the cached slots must not serve v1.
  write_all(m, 2);
  run_sequence(r, m, order, 2, true);
  // Inside a replayed sequence: chunk 3 changes after its forward use, while prefetches are in flight.
  ASSERT_TRUE(m.begin_sequence("train").is_ok());
  for (size_t i = 0; i < order.size(); i++) {
    const size_t c = order[i];
    auto p = m.acquire(c);
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    const bool changed = c == 3 && i > 3;  // the backward's use of chunk 3
    ASSERT_TRUE(holds_version(*r.backend, *p, c, m.chunk_bytes(c), changed ? 3 : 2)) << "access " << i;
    ASSERT_TRUE(m.release(c).is_ok());
    if (i == 3) write_chunk(m, 3, 3);  // chunk 3 was just released
  }
  ASSERT_TRUE(m.end_sequence().is_ok());
  // read() sees the committed value too.
  std::vector<std::byte> host(m.chunk_bytes(3));
  ASSERT_TRUE(m.read(3, host.data()).is_ok());
  for (uint64_t i = 0; i < host.size(); i++) ASSERT_EQ(host[i], pattern(3, 3, i)) << i;
  ASSERT_TRUE(m.flush().is_ok());
}

// The optimizer's update under the next forward: chunk c gets new weights just before its acquire.
// The staging buffer that wrote them still holds them, so the acquire copies them to the device from
// there, not from NVMe (no read straight after the write); a later commit of the same chunk, or the
// buffer taken for other bytes, ends that, and the chunk is read back from NVMe, current. (The
// acquire may still finish reads the prefetcher began for later chunks: written_hits, not the read
// bytes, says where c came from.)
TEST(TierManager, AChunkJustUpdatedIsCopiedFromItsWriteNotReadBack) {
  Rig r(Tier::nvme);
  constexpr size_t kLayers = 4;
  TierManagerOptions o = model_options(Tier::nvme, kLayers, 2);
  o.nvme_staging = 3;
  auto tm = r.make(o);
  ASSERT_TRUE(tm.is_ok()) << tm.status().to_string();
  TierManager& m = **tm;
  write_all(m, 1);
  const std::vector<size_t> order = step_order(kLayers);
  run_sequence(r, m, order, 1, false);
  m.reset_stats();
  ASSERT_TRUE(m.begin_sequence("train").is_ok());
  for (size_t i = 0; i < order.size(); i++) {
    const size_t c = order[i];
    const bool forward = i <= kLayers;  // embedding and layers, first use in the step
    if (forward) write_chunk(m, c, 2);
    const uint64_t served_before = m.stats().written_hits;
    auto p = m.acquire(c);
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    if (forward) {
      EXPECT_EQ(m.stats().written_hits, served_before + 1) << "chunk " << c << " was read back after its write";
    }
    ASSERT_TRUE(holds_version(*r.backend, *p, c, m.chunk_bytes(c), c <= kLayers ? 2 : 1)) << "access " << i;
    ASSERT_TRUE(m.release(c).is_ok());
  }
  ASSERT_TRUE(m.end_sequence().is_ok());
  EXPECT_EQ(m.stats().written_hits, kLayers + 1);
  // Two commits of one chunk: the second's bytes, never the first's buffer.
  write_chunk(m, 2, 3);
  write_chunk(m, 2, 4);
  auto p = m.acquire(2);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ASSERT_TRUE(holds_version(*r.backend, *p, 2, m.chunk_bytes(2), 4));
  ASSERT_TRUE(m.release(2).is_ok());
  // Every staging buffer taken for other chunks' writes: chunk 1's copy is gone, its read current.
  write_chunk(m, 1, 5);
  for (size_t c = 2; c <= kLayers + 1; c++) write_chunk(m, c, 6);
  m.reset_stats();
  std::vector<std::byte> host(m.chunk_bytes(1));
  ASSERT_TRUE(m.read(1, host.data()).is_ok());
  for (uint64_t i = 0; i < host.size(); i++) ASSERT_EQ(host[i], pattern(1, 5, i)) << i;
  EXPECT_EQ(m.stats().nvme_read_bytes, m.chunk_bytes(1));
  ASSERT_TRUE(m.flush().is_ok());
}

// The read cache: with a buffer per chunk beside the staging ones, every chunk keeps a pinned copy
// of its last write (or read), so nothing is read from NVMe again (the chunks still page through
// the slots, from RAM), and the bytes are the committed ones. A commit replaces the copy; a
// chunk updated and acquired gets its new bytes.
TEST(TierManager, AReadCacheOfEveryChunkReadsEachChunkOnceAndServesItsCurrentBytes) {
  Rig r(Tier::nvme);
  constexpr size_t kLayers = 6;
  TierManagerOptions o = model_options(Tier::nvme, kLayers, 2);
  o.nvme_staging = 2;
  o.cache_chunks = tier_cache_chunks(o, 64 << 20);
  ASSERT_EQ(o.cache_chunks, kLayers + 2) << "at most one per chunk";
  // Staging buffers of the largest chunk (the head); cache buffers of the layers' size for the
  // layers and the smaller embedding, then one of the head's size.
  EXPECT_EQ(tier_staging_buffer_bytes(o), kHead);
  EXPECT_EQ(tier_cache_bytes(o, o.cache_chunks), (kLayers + 1) * kLayer + kHead);
  EXPECT_EQ(tier_pinned_bytes(o), o.nvme_staging * kHead + tier_cache_bytes(o, o.cache_chunks));
  EXPECT_EQ(tier_cache_chunks(o, (kLayers + 1) * kLayer), kLayers + 1) << "the head's buffer comes last";
  auto tm = r.make(o);
  ASSERT_TRUE(tm.is_ok()) << tm.status().to_string();
  TierManager& m = **tm;
  write_all(m, 1);
  const std::vector<size_t> order = step_order(kLayers);
  run_sequence(r, m, order, 1, false);
  for (int step = 0; step < 2; step++) {
    m.reset_stats();
    run_sequence(r, m, order, 1, true);
    const TierStats s = m.stats();
    EXPECT_EQ(s.nvme_read_bytes, 0u) << "step " << step;
    EXPECT_EQ(s.misses, 0u);
    EXPECT_EQ(s.hits + s.staged_hits, order.size());
    EXPECT_GT(s.h2d_bytes, 0u) << "every chunk came from a slot: the test pages nothing";
  }
  write_chunk(m, 3, 2);
  m.reset_stats();
  run_sequence(r, m, {0, 1, 2}, 1, false);
  auto p = m.acquire(3);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ASSERT_TRUE(holds_version(*r.backend, *p, 3, m.chunk_bytes(3), 2));
  ASSERT_TRUE(m.release(3).is_ok());
  EXPECT_EQ(m.stats().nvme_read_bytes, 0u);
  ASSERT_TRUE(m.flush().is_ok());
}

// One step of `layers` on NVMe under `o` (a recorded step, then one replayed): the replayed step's
// stats. Every acquire checks the committed bytes.
TierStats replayed_step(TierManagerOptions o, size_t layers) {
  Rig r(Tier::nvme);
  auto tm = r.make(std::move(o));
  EXPECT_TRUE(tm.is_ok()) << tm.status().to_string();
  if (!tm.is_ok()) return TierStats();
  TierManager& m = **tm;
  write_all(m, 1);
  const std::vector<size_t> order = step_order(layers);
  run_sequence(r, m, order, 1, false);
  run_sequence(r, m, order, 1, false);
  m.reset_stats();
  run_sequence(r, m, order, 1, true);
  return m.stats();
}

// A cache smaller than the model: the step's zig-zag (forward up, backward down) finds the chunks
// read last before each turn still in RAM, so a step reads fewer bytes than without a cache, and
// always the current ones; a read ahead never evicts a copy needed sooner than what it reads.
TEST(TierManager, APartialReadCacheSavesTheReadsAtEachTurnOfTheStep) {
  constexpr size_t kLayers = 8;
  uint64_t read[2] = {0, 0};
  for (uint32_t cache : {0u, 4u}) {
    TierManagerOptions o = model_options(Tier::nvme, kLayers, 2);
    o.nvme_staging = 2;
    o.cache_chunks = cache;
    const TierStats s = replayed_step(o, kLayers);
    read[cache ? 1 : 0] = s.nvme_read_bytes;
    if (cache) {
      EXPECT_GT(s.cache_hits, 0u);
    }
  }
  EXPECT_LT(read[1], read[0]) << "a 4-chunk cache saved no read";
  EXPECT_LE(read[1] + 4 * kLayer, read[0]) << "the cache saved less than one turn's worth";
}

// Mixed sizes: where the token table and head dwarf the layers, a cache of the layers' bytes holds
// every layer (buffers of a layer's size, not the largest chunk's: that would buy one), and a step
// reads only the large chunks from NVMe; every acquire still sees the committed bytes.
TEST(TierManager, ACacheOfTheLayersBytesHoldsEveryLayerBesideALargeTable) {
  constexpr size_t kLayers = 6;
  constexpr uint64_t kBig = 16 * 4096;
  uint64_t read[2] = {0, 0};
  for (bool cached : {false, true}) {
    TierManagerOptions o = model_options(Tier::nvme, kLayers, 2);
    o.chunk_bytes.front() = o.chunk_bytes.back() = kBig;
    o.nvme_staging = 2;
    if (cached) {
      o.cache_chunks = tier_cache_chunks(o, kLayers * kLayer);
      ASSERT_EQ(o.cache_chunks, kLayers) << "buffers of a layer's size";
      EXPECT_EQ(tier_cache_bytes(o, o.cache_chunks), kLayers * kLayer);
    }
    read[cached] = replayed_step(o, kLayers).nvme_read_bytes;
  }
  // The two staging buffers (the largest chunk's size) keep the table's and the head's copies.
  EXPECT_GE(read[0], 4 * kLayer) << "without the cache, layers are read at the step's turns";
  EXPECT_EQ(read[1], 0u) << "with it every layer stays in RAM";
}

// A cpu home has no reads to cache: asking for one is refused, naming it.
TEST(TierManager, AReadCacheOfACpuHomeIsRefused) {
  Rig r(Tier::cpu);
  TierManagerOptions o = model_options(Tier::cpu, 2, 2);
  o.cache_chunks = 2;
  auto tm = r.make(o);
  ASSERT_FALSE(tm.is_ok());
  EXPECT_NE(tm.status().message().find("read cache"), std::string::npos) << tm.status().to_string();
  EXPECT_EQ(tier_cache_chunks(o, 1 << 30), 0u);
}

// expect_update: a chunk whose bytes an update is about to replace is fetched ahead by neither hop
// (an NVMe read or an H2D copy of it would be thrown away at the commit); acquire still returns its
// current bytes. The mark ends at the chunk's commit or when withdrawn (an update that ended early).
TEST_P(TierHomes, ChunksExpectingAnUpdateAreNotFetchedAhead) {
  Rig r(GetParam());
  constexpr size_t kLayers = 6;
  auto tm = r.make(model_options(GetParam(), kLayers, 2));
  ASSERT_TRUE(tm.is_ok()) << tm.status().to_string();
  TierManager& m = **tm;
  write_all(m, 1);
  const std::vector<size_t> order = step_order(kLayers);
  run_sequence(r, m, order, 1, false);  // records the order
  const auto fetched_ahead = [&] { return m.stats().prefetches + m.stats().prefetch_reads; };

  m.reset_stats();
  run_sequence(r, m, order, 1, false);
  EXPECT_GT(fetched_ahead(), 0u) << "unmarked, the replay fetches ahead";

  for (size_t c = 0; c < m.chunk_count(); c++) m.expect_update(c, true);
  m.expect_update(m.chunk_count() + 5, true);  // out of range: ignored
  m.reset_stats();
  run_sequence(r, m, order, 1, false);  // acquires by demand, the current (version 1) bytes
  EXPECT_EQ(fetched_ahead(), 0u) << "a chunk about to be replaced was fetched ahead";

  for (size_t c = 0; c < m.chunk_count(); c += 2) m.expect_update(c, false);  // withdrawn
  for (size_t c = 1; c < m.chunk_count(); c += 2) write_chunk(m, c, 2);      // committed
  m.reset_stats();
  ASSERT_TRUE(m.begin_sequence("train").is_ok());
  for (size_t c : order) {
    auto p = m.acquire(c);
    ASSERT_TRUE(p.is_ok()) << "chunk " << c << ": " << p.status().to_string();
    ASSERT_TRUE(holds_version(*r.backend, *p, c, m.chunk_bytes(c), c % 2 == 1 ? 2 : 1)) << "chunk " << c;
    ASSERT_TRUE(m.release(c).is_ok());
  }
  ASSERT_TRUE(m.end_sequence().is_ok());
  EXPECT_GT(fetched_ahead(), 0u) << "withdrawn and committed chunks are fetched ahead again";
  ASSERT_TRUE(m.flush().is_ok());
}

TEST_P(TierHomes, EvictionNeverReusesAHeldSlot) {
  Rig r(GetParam());
  auto tm = r.make(model_options(GetParam(), 6, 2));
  ASSERT_TRUE(tm.is_ok()) << tm.status().to_string();
  TierManager& m = **tm;
  write_all(m, 1);
  // Chunk 1 stays held while the other layers cycle through the group's one other slot, twice
  // (the second time replayed, so prefetches run too).
  for (int round = 0; round < 2; round++) {
    ASSERT_TRUE(m.begin_sequence("cycle").is_ok());
    auto held = m.acquire(1);
    ASSERT_TRUE(held.is_ok()) << held.status().to_string();
    for (size_t c : {2, 3, 4, 5, 6, 2, 6}) {
      auto p = m.acquire(c);
      ASSERT_TRUE(p.is_ok()) << p.status().to_string();
      EXPECT_NE(*p, *held);
      ASSERT_TRUE(holds_version(*r.backend, *p, c, m.chunk_bytes(c), 1));
      ASSERT_TRUE(m.release(c).is_ok());
    }
    ASSERT_TRUE(holds_version(*r.backend, *held, 1, m.chunk_bytes(1), 1));
    ASSERT_TRUE(m.release(1).is_ok());
    ASSERT_TRUE(m.end_sequence().is_ok());
  }
  EXPECT_EQ(m.stats().sequences_replayed, 1u);
}

TEST_P(TierHomes, HeldChunksRefuseCommitsAndAFullGroupRefusesAcquires) {
  Rig r(GetParam());
  auto tm = r.make(model_options(GetParam(), 4, 2));
  ASSERT_TRUE(tm.is_ok()) << tm.status().to_string();
  TierManager& m = **tm;
  write_all(m, 1);
  auto a = m.acquire(1);
  ASSERT_TRUE(a.is_ok());
  auto again = m.acquire(1);  // a second hold of the same chunk (the tied embedding's case)
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(*a, *again);
  EXPECT_EQ(m.update_buffer(1).status().code(), Code::failed_precondition);
  auto b = m.acquire(2);
  ASSERT_TRUE(b.is_ok());
  auto c = m.acquire(3);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), Code::failed_precondition);
  EXPECT_NE(c.status().message().find("more slots"), std::string::npos) << c.status().to_string();
  EXPECT_NE(c.status().message().find("layers"), std::string::npos) << c.status().to_string();
  ASSERT_TRUE(m.release(1).is_ok());
  // Still held once: the commit is refused.
  ASSERT_TRUE(m.release(2).is_ok());
  auto buf = m.update_buffer(2);
  ASSERT_TRUE(buf.is_ok());
  for (uint64_t i = 0; i < m.chunk_bytes(2); i++) (*buf)[i] = pattern(2, 5, i);
  auto d = m.acquire(2);  // acquiring a chunk whose update is outstanding is refused
  EXPECT_EQ(d.status().code(), Code::failed_precondition);
  ASSERT_TRUE(m.commit_update(2).is_ok());
  EXPECT_EQ(m.commit_update(2).code(), Code::failed_precondition);  // no update outstanding
  ASSERT_TRUE(m.update_buffer(1).status().code() == Code::failed_precondition);  // 1 is still held
  ASSERT_TRUE(m.release(1).is_ok());
  EXPECT_EQ(m.release(1).code(), Code::failed_precondition);  // not held any more
  auto e = m.acquire(2);
  ASSERT_TRUE(e.is_ok());
  EXPECT_TRUE(holds_version(*r.backend, *e, 2, m.chunk_bytes(2), 5));
  // A held chunk can get no update buffer, and so no commit.
  ASSERT_TRUE(m.release(2).is_ok());
  ASSERT_TRUE(m.update_buffer(4).is_ok());
  auto f = m.acquire(3);
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(m.update_buffer(3).status().code(), Code::failed_precondition);  // 4's update is outstanding
  ASSERT_TRUE(m.commit_update(4).is_ok());
  EXPECT_EQ(m.update_buffer(3).status().code(), Code::failed_precondition);  // 3 is held
  EXPECT_EQ(m.commit_update(3).code(), Code::failed_precondition);
  ASSERT_TRUE(m.release(3).is_ok());
  ASSERT_TRUE(m.flush().is_ok());
}

TEST_P(TierHomes, TheComputeWaitIsMeasuredForChunksNotYetArrived) {
  Rig r(GetParam());
  auto tm = r.make(model_options(GetParam(), 4, 2));
  ASSERT_TRUE(tm.is_ok()) << tm.status().to_string();
  TierManager& m = **tm;
  write_all(m, 1);
  auto p = m.acquire(1);  // arrives and is waited for quickly (or not at all)
  ASSERT_TRUE(p.is_ok());
  ASSERT_TRUE(m.release(1).is_ok());
  ASSERT_TRUE(r.backend->synchronize_all().is_ok());
  m.reset_stats();
  auto hit = m.acquire(1);  // resident and arrived: no wait, no callbacks
  ASSERT_TRUE(hit.is_ok());
  ASSERT_TRUE(m.release(1).is_ok());
  ASSERT_TRUE(r.backend->synchronize_all().is_ok());
  EXPECT_EQ(m.stats().compute_waits, 0u);
  EXPECT_EQ(m.stats().late_arrivals, 0u);
  // Hold the H2D stream for 30 ms: chunk 2's copy queues behind it, and the compute waits.
  ASSERT_TRUE(r.backend->host_callback(Stream::h2d, [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }).is_ok());
  auto q = m.acquire(2);
  ASSERT_TRUE(q.is_ok());
  ASSERT_TRUE(holds_version(*r.backend, *q, 2, m.chunk_bytes(2), 1));
  ASSERT_TRUE(m.release(2).is_ok());
  ASSERT_TRUE(r.backend->synchronize_all().is_ok());
  const TierStats s = m.stats();
  // The wait on the copy; with an NVMe home the host's read may be a second one, when the host
  // itself was slowed (a loaded machine) over kLateArrivalSeconds while the compute stood idle.
  EXPECT_GE(s.compute_waits, 1u);
  EXPECT_LE(s.compute_waits, GetParam() == Tier::nvme ? 2u : 1u);
  EXPECT_GE(s.compute_wait_seconds, 0.010);
  EXPECT_LT(s.compute_wait_seconds, 5.0);
  EXPECT_EQ(s.late_arrivals, 1u) << "30 ms is far over kLateArrivalSeconds, and one acquire is late once";
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
}

// With an NVMe home, a host blocked in an acquire's read while the compute stream has nothing
// queued starves the compute: that acquire is late (once, though the compute then also waits for
// its copy), and the idle time counts as a compute wait.
TEST(TierManagerArrivals, AHostBlockedOnAReadWhileTheComputeIdlesIsLate) {
  const FaultRule slow{.kind = FaultKind::latency, .op = IoOp::read, .latency = std::chrono::milliseconds(30)};
  Rig r(Tier::nvme, std::make_unique<FaultEngine>(std::make_unique<MemEngine>(), FaultEngineOptions{5, {slow}}));
  auto tm = r.make(model_options(Tier::nvme, 6, 2));
  ASSERT_TRUE(tm.is_ok()) << tm.status().to_string();
  TierManager& m = **tm;
  write_all(m, 1);
  ASSERT_TRUE(r.backend->synchronize_all().is_ok());
  bool read_one = false;
  for (size_t c = 0; c < m.chunk_count() && !read_one; c++) {
    m.reset_stats();
    auto p = m.acquire(c);
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    ASSERT_TRUE(holds_version(*r.backend, *p, c, m.chunk_bytes(c), 1));
    ASSERT_TRUE(m.release(c).is_ok());
    ASSERT_TRUE(r.backend->synchronize_all().is_ok());
    const TierStats s = m.stats();
    if (s.nvme_read_bytes == 0) continue;  // served from the staging buffer that wrote it
    read_one = true;
    EXPECT_EQ(s.late_arrivals, 1u) << "chunk " << c;
    EXPECT_GE(s.compute_wait_seconds, 0.010) << "chunk " << c;
  }
  EXPECT_TRUE(read_one) << "every chunk was served from a staging buffer: no acquire read from NVMe";
}

// The host never waits: a whole sequence is queued, each "layer" copies its weights out on the
// compute stream after a delay, and the copies are checked at the end. The H2D stream must wait for
// each slot's last compute use before refilling it, and the compute for each arrival. NVMe reads
// complete late at random (a latency fault), so reads are in flight across acquires.
TEST_P(TierHomes, QueuedStepsNeverSeeASlotRefilledUnderThem) {
  FaultRule slow{.kind = FaultKind::latency, .op = IoOp::read, .probability = 0.5,
                 .latency = std::chrono::microseconds(300)};
  Rig r(GetParam(), std::make_unique<FaultEngine>(std::make_unique<MemEngine>(), FaultEngineOptions{11, {slow}}));
  constexpr size_t kLayers = 7;
  TierManagerOptions o = model_options(GetParam(), kLayers, 3);
  o.nvme_staging = 3;
  auto tm = r.make(o);
  ASSERT_TRUE(tm.is_ok()) << tm.status().to_string();
  TierManager& m = **tm;
  const std::vector<size_t> order = step_order(kLayers);
  for (uint32_t step = 0; step < 6; step++) {
    const uint32_t version = step / 2 + 1;  // new weights every other step
    if (step % 2 == 0) write_all(m, version);
    std::vector<std::vector<std::byte>> seen(order.size());
    ASSERT_TRUE(m.begin_sequence("train").is_ok());
    for (size_t i = 0; i < order.size(); i++) {
      const size_t c = order[i];
      auto p = m.acquire(c);
      ASSERT_TRUE(p.is_ok()) << p.status().to_string();
      seen[i].resize(m.chunk_bytes(c));
      ASSERT_TRUE(r.backend->host_callback(Stream::compute, [] { std::this_thread::sleep_for(std::chrono::microseconds(150)); }).is_ok());
      ASSERT_TRUE(r.backend->copy_to_host(seen[i].data(), *p, m.chunk_bytes(c), Stream::compute).is_ok());
      ASSERT_TRUE(m.release(c).is_ok());
    }
    ASSERT_TRUE(m.end_sequence().is_ok());
    ASSERT_TRUE(r.backend->synchronize_all().is_ok());
    for (size_t i = 0; i < order.size(); i++)
      for (uint64_t b = 0; b < seen[i].size(); b++)
        ASSERT_EQ(seen[i][b], pattern(order[i], version, b)) << "step " << step << " access " << i << " chunk " << order[i];
  }
  const TierStats s = m.stats();
  EXPECT_EQ(s.sequences_replayed, 5u);
  EXPECT_GT(s.prefetches, 0u);
  EXPECT_EQ(r.backend->memory().peak, tier_device_bytes(o));
}

INSTANTIATE_TEST_SUITE_P(Homes, TierHomes, ::testing::Values(Tier::cpu, Tier::nvme),
                         [](const auto& info) { return std::string(tier_name(info.param)); });

TEST(TierManager, OptionsAreCheckedNamingWhatIsWrong) {
  Rig r(Tier::cpu);
  auto bad = [&](TierManagerOptions o, std::string_view what) {
    auto tm = r.make(std::move(o));
    ASSERT_FALSE(tm.is_ok()) << what;
    EXPECT_EQ(tm.status().code(), Code::invalid_argument) << tm.status().to_string();
    EXPECT_NE(tm.status().message().find(what), std::string::npos) << tm.status().to_string();
  };
  TierManagerOptions ok = model_options(Tier::cpu, 3, 2);
  TierManagerOptions o = ok;
  o.chunk_bytes.clear();
  o.chunk_group.clear();
  bad(o, "no chunks");
  o = ok;
  o.group_slots[1] = 0;
  bad(o, "'layers' has 0 slots");
  o = ok;
  o.chunk_group[2] = 7;
  bad(o, "chunk 2 is in group 7");
  o = ok;
  o.chunk_bytes[1] = 0;
  bad(o, "chunk 1 has 0 bytes");
  o = ok;
  o.group_slots.push_back(1);
  o.group_names.push_back("spare");
  bad(o, "'spare' has no chunk");
  o = ok;
  o.home = Tier::nvme;
  bad(o, "need an NVMe store");
  o = ok;
  o.home = Tier::device;
  bad(o, "cpu or nvme");
  EXPECT_EQ(r.backend->memory().in_use, 0u);  // nothing was allocated
}

TEST(TierManager, DeviceBytesAreKnownBeforeAndTooSmallABudgetNamesTheMinimum) {
  TierManagerOptions o = model_options(Tier::cpu, 10, 2);
  o.chunk_bytes[1] = kLayer - 100;  // padded to 4 KiB in slots
  EXPECT_EQ(tier_device_bytes(o), kEmbed + 2 * kLayer + kHead);
  EXPECT_EQ(tier_pinned_bytes(o), kEmbed + 10 * kLayer + kHead);
  o.group_slots[1] = 1000;  // 1000 * 12 KiB > the 8 MiB budget
  Rig r(Tier::cpu);
  auto tm = r.make(o);
  ASSERT_FALSE(tm.is_ok());
  EXPECT_EQ(tm.status().code(), Code::out_of_memory) << tm.status().to_string();
  EXPECT_NE(tm.status().message().find(format_size(tier_device_bytes(o))), std::string::npos) << tm.status().to_string();
  EXPECT_EQ(r.backend->memory().in_use, 0u);  // the slots carved before the refusal went back
}

// NVMe reads that fail (EIO on every attempt) or fail their CRC are errors naming the chunk, the
// acquire hands out no pointer, and no slot keeps the bad bytes.
TEST(TierManager, NvmeReadFaultsAreErrorsNamingTheChunkNeverData) {
  FaultRule eio{.kind = FaultKind::eio, .op = IoOp::read};
  Rig r(Tier::nvme, std::make_unique<FaultEngine>(std::make_unique<MemEngine>(), FaultEngineOptions{3, {eio}}),
        /*io_attempts=*/1);
  auto tm = r.make(model_options(Tier::nvme, 4, 2));
  ASSERT_TRUE(tm.is_ok()) << tm.status().to_string();
  TierManager& m = **tm;
  write_all(m, 1);
  auto p = m.acquire(2);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), Code::io_error) << p.status().to_string();
  EXPECT_NE(p.status().message().find("chunk 2"), std::string::npos) << p.status().to_string();
  EXPECT_EQ(m.stats().device_cached_bytes, 0u);
  auto again = m.acquire(2);  // tried again, fails again: no slot was left claiming chunk 2
  EXPECT_FALSE(again.is_ok());
  std::vector<std::byte> host(m.chunk_bytes(2));
  EXPECT_EQ(m.read(2, host.data()).code(), Code::io_error);
}

TEST(TierManager, NvmeCrcFailuresDuringAReplayedStepAreErrorsNamingTheChunk) {
  Rig r(Tier::nvme, std::make_unique<MemEngine>(), /*io_attempts=*/1);
  constexpr size_t kLayers = 6;
  auto tm = r.make(model_options(Tier::nvme, kLayers, 2));
  ASSERT_TRUE(tm.is_ok()) << tm.status().to_string();
  TierManager& m = **tm;
  write_all(m, 1);
  const std::vector<size_t> order = step_order(kLayers);
  run_sequence(r, m, order, 1, false);  // recorded
  // Every byte on "disk" flips.
  auto* mem = dynamic_cast<MemEngine*>(r.engine.get());
  for (const std::string& f : r.store->swap_files())
    for (std::byte& b : *mem->contents(f)) b ^= std::byte{0x5A};
  // Replayed: chunks already in slots are still good; the first one that must come from NVMe
  // (by a prefetch or at acquire) fails, and its acquire says so.
  ASSERT_TRUE(m.begin_sequence("train").is_ok());
  bool failed = false;
  for (size_t c : order) {
    auto p = m.acquire(c);
    if (!p.is_ok()) {
      EXPECT_EQ(p.status().code(), Code::corruption) << p.status().to_string();
      EXPECT_NE(p.status().message().find(fmt::format("chunk {}", c)), std::string::npos) << p.status().to_string();
      failed = true;
      break;
    }
    ASSERT_TRUE(holds_version(*r.backend, *p, c, m.chunk_bytes(c), 1)) << "bad bytes handed to the compute";
    ASSERT_TRUE(m.release(c).is_ok());
  }
  EXPECT_TRUE(failed);
}

TEST(TierManager, AFailedNvmeWriteIsReportedByFlushAndSticks) {
  FaultRule eio{.kind = FaultKind::eio, .op = IoOp::write, .skip = 2};
  Rig r(Tier::nvme, std::make_unique<FaultEngine>(std::make_unique<MemEngine>(), FaultEngineOptions{3, {eio}}),
        /*io_attempts=*/1);
  auto tm = r.make(model_options(Tier::nvme, 4, 2));
  ASSERT_TRUE(tm.is_ok()) << tm.status().to_string();
  TierManager& m = **tm;
  for (size_t c = 0; c < m.chunk_count(); c++) {
    auto buf = m.update_buffer(c);
    if (!buf.is_ok()) break;  // an earlier write's failure surfaced on staging reuse
    std::memset(*buf, 1, m.chunk_bytes(c));
    if (!m.commit_update(c).is_ok()) break;
  }
  Status f = m.flush();
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.code(), Code::io_error) << f.to_string();
  EXPECT_NE(f.message().find("chunk 2"), std::string::npos) << f.to_string();  // writes 0, 1 passed
  EXPECT_FALSE(m.acquire(0).is_ok());
  EXPECT_EQ(m.flush().code(), Code::io_error);
}

}  // namespace
}  // namespace strata
