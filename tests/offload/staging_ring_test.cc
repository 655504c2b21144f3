// StagingRing (offload/staging_ring.h): buffers carved aligned with their given sizes and the
// predicted pinned bytes, a write then a read moving the bytes through the store and counting
// them, an injected I/O error returned naming the chunk, spans on the ring's tracks, and an
// allocation failure naming the buffer and the pinned bytes all buffers need.
#include "offload/staging_ring.h"

#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "offload/fault_engine.h"
#include "offload/mem_engine.h"
#include "offload/trace.h"
#include "runtime/units.h"
#include "offload_test_util.h"

namespace strata {
namespace {

// A pool and a one-path store over `engine` (the MemEngine unless a test wraps it in faults).
struct RingRig {
  explicit RingRig(std::unique_ptr<IoEngine> io = std::make_unique<MemEngine>(), uint64_t pool_bytes = 16 << 20) {
    pool = test::value_of(PinnedPool::create(PinnedPoolOptions{.capacity = pool_bytes, .slab_bytes = 1 << 20,
                                                               .allow_cuda = false, .allow_mlock = false,
                                                               .huge_pages = false}));
    engine = std::move(io);
    NvmeStoreOptions so;
    so.paths = {dir.path()};
    so.capacity = 4 << 20;
    so.stripe_unit = 4 << 20;
    so.probe = test::roomy_probe;
    store = test::value_of(NvmeStore::create(*engine, so));
  }
  test::ScratchDir dir;
  std::unique_ptr<PinnedPool> pool;
  std::unique_ptr<IoEngine> engine;
  std::unique_ptr<NvmeStore> store;
};

StagingRingOptions ring_test_options() {
  StagingRingOptions o;
  o.name = "ring test";
  o.what = "test buffer";
  o.read_track = "ring read";
  o.write_track = "ring write";
  o.subject = [](size_t c) { return "the bytes of chunk " + std::to_string(c); };
  return o;
}

TEST(StagingRing, CarvesAlignedBuffersOfTheGivenSizesAndThePredictedPinnedBytes) {
  RingRig r;
  StagingRing ring(r.store.get(), nullptr, ring_test_options());
  const std::vector<uint64_t> sizes = {8192, 4096, 12288};
  ASSERT_TRUE(ring.carve(*r.pool, sizes).is_ok());
  ASSERT_EQ(ring.size(), 3u);
  for (size_t b = 0; b < ring.size(); b++) {
    EXPECT_EQ(ring[b].bytes, sizes[b]);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ring[b].data) % r.store->alignment(), 0u);
    EXPECT_EQ(ring[b].holder, -1);
    EXPECT_FALSE(ring[b].pending());
  }
  EXPECT_EQ(ring.pinned_bytes(), StagingRing::pinned_bytes(sizes, r.store->alignment()));
  EXPECT_EQ(r.pool->stats().in_use, ring.pinned_bytes());
  // 4 KiB granules, plus the alignment as slack only where it exceeds 4 KiB.
  EXPECT_EQ(StagingRing::pinned_bytes(sizes, 4096), 8192u + 4096u + 12288u);
  EXPECT_EQ(StagingRing::pinned_bytes(std::vector<uint64_t>{5000}, 4096), 8192u);
  EXPECT_EQ(StagingRing::pinned_bytes(std::vector<uint64_t>{5000}, 16384), 8192u + 16384u);
}

TEST(StagingRing, AWriteThenAReadMoveTheBytesAndCountThem) {
  RingRig r;
  TraceRecorder trace;
  StagingRing ring(r.store.get(), &trace, ring_test_options());
  ASSERT_TRUE(ring.carve(*r.pool, std::vector<uint64_t>{8192, 8192}).is_ok());
  const uint64_t bytes = 6000;
  const ExtentId e = test::value_of(r.store->allocate("ring chunk 7", bytes));
  test::fill_random(ring[0].data, bytes, 42);

  ASSERT_TRUE(ring.begin(0, IoOp::write, e, 7, r.store->padded_size(bytes)).is_ok());
  EXPECT_TRUE(ring[0].pending());
  EXPECT_EQ(ring[0].op(), IoOp::write);
  EXPECT_EQ(ring[0].chunk(), 7u);
  ASSERT_TRUE(ring.finish(0).is_ok());
  EXPECT_FALSE(ring[0].pending());
  EXPECT_TRUE(ring.finish(0).is_ok());  // nothing pending: a no-op

  std::memset(ring[1].data, 0, 8192);
  ASSERT_TRUE(ring.begin(1, IoOp::read, e, 7, r.store->padded_size(bytes)).is_ok());
  ASSERT_TRUE(ring.finish(1).is_ok());
  EXPECT_EQ(std::memcmp(ring[0].data, ring[1].data, bytes), 0);

  StagingRingStats s = ring.stats();
  EXPECT_EQ(s.write_bytes, r.store->padded_size(bytes));
  EXPECT_EQ(s.read_bytes, r.store->padded_size(bytes));
  EXPECT_EQ(trace.tracks(), (std::vector<std::string>{"ring write", "ring read"}));
  EXPECT_EQ(trace.span_count(), 2u);
  ring.reset_stats();
  s = ring.stats();
  EXPECT_EQ(s.read_bytes + s.write_bytes + s.read_wait_ns + s.write_wait_ns, 0u);
  ASSERT_TRUE(r.store->release(e).is_ok());
}

TEST(StagingRing, AnInjectedReadErrorIsReturnedNamingTheChunkAndNotCounted) {
  // The write passes; every try of the read fails with EIO.
  FaultRule eio{.kind = FaultKind::eio, .op = IoOp::read};
  RingRig r(std::make_unique<FaultEngine>(std::make_unique<MemEngine>(), FaultEngineOptions{3, {eio}}));
  StagingRing ring(r.store.get(), nullptr, ring_test_options());
  ASSERT_TRUE(ring.carve(*r.pool, std::vector<uint64_t>{4096}).is_ok());
  const ExtentId e = test::value_of(r.store->allocate("ring chunk 5", 4096));
  ASSERT_TRUE(ring.begin(0, IoOp::write, e, 5, 4096).is_ok());
  ASSERT_TRUE(ring.finish(0).is_ok());
  ASSERT_TRUE(ring.begin(0, IoOp::read, e, 5, 4096).is_ok());
  const Status st = ring.finish(0);
  EXPECT_EQ(st.code(), Code::io_error) << st.to_string();
  EXPECT_NE(st.message().find("ring test: NVMe read of the bytes of chunk 5"), std::string::npos) << st.to_string();
  EXPECT_FALSE(ring[0].pending());  // finished, whatever the outcome
  EXPECT_EQ(ring.stats().read_bytes, 0u);
  EXPECT_EQ(ring.stats().write_bytes, 4096u);
  ASSERT_TRUE(r.store->release(e).is_ok());
}

TEST(StagingRing, ABeginErrorNamesTheChunkAndLeavesNothingPending) {
  RingRig r;
  StagingRing ring(r.store.get(), nullptr, ring_test_options());
  ASSERT_TRUE(ring.carve(*r.pool, std::vector<uint64_t>{4096}).is_ok());
  const ExtentId e = test::value_of(r.store->allocate("ring chunk 2", 4096));
  const Status st = ring.begin(0, IoOp::read, e, 2, 4096);  // never written: the store refuses
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("NVMe read of the bytes of chunk 2"), std::string::npos) << st.to_string();
  EXPECT_FALSE(ring[0].pending());
  ASSERT_TRUE(r.store->release(e).is_ok());
}

TEST(StagingRing, AnAllocationFailureNamesTheBufferAndTheBytesAllNeed) {
  RingRig r(std::make_unique<MemEngine>(), /*pool_bytes=*/1 << 20);
  StagingRing ring(r.store.get(), nullptr, ring_test_options());
  const Status st = ring.carve(*r.pool, std::vector<uint64_t>{512 << 10, 512 << 10, 512 << 10});
  EXPECT_EQ(st.code(), Code::out_of_memory) << st.to_string();
  // Two fit the 1 MiB pool; the third does not.
  EXPECT_NE(st.message().find("ring test: pinned test buffer 3 of 3 (" + format_size(3 * (512 << 10)) + " in all)"),
            std::string::npos)
      << st.to_string();
}

}  // namespace
}  // namespace strata
