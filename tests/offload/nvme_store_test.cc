// NvmeStore: round trips at unaligned sizes over one and two striped paths (every engine), a
// flipped byte in a swap file caught on read, ENOSPC at reservation with needed/free figures,
// injected faults never yielding data, transient faults retried three times then a clear error,
// and the per-run directory with its crash-leftover cleanup.
#include "offload/nvme_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "offload/fault_engine.h"
#include "offload/run_dir.h"
#include "offload_test_util.h"

namespace strata {
namespace {

using test::aligned_buffer;
using test::fill_random;


NvmeStoreOptions options(std::vector<std::string> paths, uint64_t capacity, uint64_t unit = 64 << 10) {
  NvmeStoreOptions o;
  o.paths = std::move(paths);
  o.capacity = capacity;
  o.stripe_unit = unit;
  o.probe = test::roomy_probe;
  return o;
}

class StoreSuite : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void SetUp() override {
    engine_ = test::make_engine(std::get<0>(GetParam()), IoShape{32 << 10, 8});
    if (!engine_) GTEST_SKIP() << "io_uring cannot start here";
  }
  std::vector<std::string> paths() {
    std::vector<std::string> p{a_.path()};
    if (std::get<1>(GetParam()) == 2) p.push_back(b_.path());
    return p;
  }
  test::ScratchDir a_, b_;
  std::unique_ptr<IoEngine> engine_;
};

TEST_P(StoreSuite, RoundTripsRandomDataAtUnalignedSizes) {
  auto store = NvmeStore::create(*engine_, options(paths(), 4 << 20));
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  NvmeStore& s = **store;
  std::mt19937_64 rng(17);
  struct Item {
    ExtentId id;
    uint64_t bytes;
    test::AlignedBuffer data;
  };
  std::vector<Item> items;
  for (uint64_t bytes : {1ull, 4095ull, 4097ull, 65536ull + 3, 300001ull, 1000000ull}) {
    auto id = s.allocate(fmt::format("e{}", bytes), bytes);
    ASSERT_TRUE(id.is_ok()) << id.status().to_string();
    Item it{*id, bytes, aligned_buffer(s.padded_size(bytes))};
    fill_random(it.data.get(), bytes, rng());
    ASSERT_TRUE(s.write(it.id, it.data.get()).is_ok());
    items.push_back(std::move(it));
  }
  // Reads of all extents in flight at once, then checked.
  std::vector<test::AlignedBuffer> back;
  std::vector<ExtentIo> ios;
  for (Item& it : items) {
    back.push_back(aligned_buffer(s.padded_size(it.bytes)));
    auto io = s.begin_read(it.id, back.back().get());
    ASSERT_TRUE(io.is_ok()) << io.status().to_string();
    ios.push_back(std::move(*io));
  }
  for (size_t i = 0; i < items.size(); i++) {
    Status st = s.finish(ios[i]);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(std::memcmp(back[i].get(), items[i].data.get(), items[i].bytes), 0) << items[i].bytes << " bytes";
  }
  // Released space is reused.
  uint64_t free_before = s.free_bytes();
  ASSERT_TRUE(s.release(items[4].id).is_ok());
  EXPECT_EQ(s.free_bytes(), free_before + s.padded_size(300001));
}

TEST_P(StoreSuite, AFlippedByteInASwapFileIsCaughtOnRead) {
  auto store = NvmeStore::create(*engine_, options(paths(), 1 << 20));
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  NvmeStore& s = **store;
  const uint64_t bytes = 200000;  // spans several 64 KiB stripe units
  auto id = s.allocate("layer3.adam", bytes);
  auto out = aligned_buffer(s.padded_size(bytes)), in = aligned_buffer(s.padded_size(bytes));
  fill_random(out.get(), bytes, 5);
  ASSERT_TRUE(s.write(*id, out.get()).is_ok());
  ASSERT_TRUE(s.read(*id, in.get()).is_ok());
  // Flip one byte of the last swap file (with two paths, stripe unit 1 of the extent is there).
  const std::string swap = s.swap_files().back();
  const uint64_t at = 1000;
  if (auto* mem = dynamic_cast<MemEngine*>(engine_.get())) {
    (*mem->contents(swap))[at] ^= std::byte{0x01};
  } else {
    int fd = ::open(swap.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    unsigned char c = 0;
    ASSERT_EQ(::pread(fd, &c, 1, at), 1);
    c ^= 0x01;
    ASSERT_EQ(::pwrite(fd, &c, 1, at), 1);
    ::fsync(fd);
    ::close(fd);
  }
  Status r = s.read(*id, in.get());
  EXPECT_EQ(r.code(), Code::corruption) << r.to_string();
  EXPECT_NE(r.message().find("layer3.adam"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find(swap), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("not used"), std::string::npos) << r.message();
}

INSTANTIATE_TEST_SUITE_P(Engines, StoreSuite,
                         ::testing::Combine(::testing::Values("io_uring", "posix", "mem"), ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "path";
                         });

TEST(NvmeStore, TooLittleSpaceFailsAtStartWithNeededAndFreePerPath) {
  test::ScratchDir a, b;
  MemEngine engine;
  NvmeStoreOptions o = options({a.path(), b.path()}, 8ull << 30);
  o.probe = [&](const std::string& p) -> StatusOr<PathInfo> {
    PathInfo info;
    info.path = p;
    info.free_bytes = p == a.path() ? (3ull << 30) : (20ull << 30);
    return info;
  };
  auto store = NvmeStore::create(engine, o);
  ASSERT_FALSE(store.is_ok());
  const Status& s = store.status();
  EXPECT_EQ(s.code(), Code::no_space);
  EXPECT_NE(s.message().find("needs 4 GiB in each of its 2 path(s)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(a.path() + " has 3 GiB free"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find(b.path() + " has"), std::string::npos) << s.message();  // b is fine
  EXPECT_TRUE(std::filesystem::is_empty(a.path()));  // nothing was created
}

TEST(NvmeStore, EnospcFromTheReservationItselfIsNoSpaceNamingThePath) {
  test::ScratchDir a;
  FaultRule full;
  full.kind = FaultKind::enospc;
  full.op = IoOp::write;
  FaultEngine engine(std::make_unique<MemEngine>(), FaultEngineOptions{1, {full}});
  auto store = NvmeStore::create(engine, options({a.path()}, 1 << 20));
  ASSERT_FALSE(store.is_ok());
  EXPECT_EQ(store.status().code(), Code::no_space);
  EXPECT_NE(store.status().message().find("could not reserve 1 MiB in " + a.path()), std::string::npos)
      << store.status().message();
  EXPECT_TRUE(std::filesystem::is_empty(a.path()));  // the run directory went away again
}

TEST(NvmeStore, ExtentsBeyondTheReservationAreNoSpace) {
  test::ScratchDir a;
  MemEngine engine;
  auto store = NvmeStore::create(engine, options({a.path()}, 1 << 20));
  ASSERT_TRUE(store.is_ok());
  ASSERT_TRUE((*store)->allocate("big", 800 << 10).is_ok());
  auto more = (*store)->allocate("more", 300 << 10);
  EXPECT_EQ(more.status().code(), Code::no_space);
  EXPECT_NE(more.status().message().find("extent 'more' needs 300 KiB"), std::string::npos) << more.status().message();
}

TEST(NvmeStore, InjectedFaultsNeverYieldData) {
  test::ScratchDir a;
  FaultRule eio_read, torn;
  eio_read.kind = FaultKind::eio;
  eio_read.op = IoOp::read;
  eio_read.limit = 1;
  torn.kind = FaultKind::torn_write;
  torn.op = IoOp::write;
  torn.skip = 1;  // the first write is clean
  torn.limit = 1;
  FaultRule eio_write = eio_read;
  eio_write.op = IoOp::write;
  eio_write.skip = 1;  // it sees writes 1 and 3 (write 2 is taken by the torn rule, listed first)
  FaultEngine engine(std::make_unique<MemEngine>(), FaultEngineOptions{9, {eio_read, torn, eio_write}});
  NvmeStoreOptions once = options({a.path()}, 1 << 20);
  once.io_attempts = 1;  // every fault reaches the caller (retries: TransientFaultsAreRetriedThenAClearError)
  auto store = NvmeStore::create(engine, once);
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  NvmeStore& s = **store;
  const uint64_t bytes = 100000;
  auto id = s.allocate("w", bytes);
  auto out = aligned_buffer(s.padded_size(bytes)), in = aligned_buffer(s.padded_size(bytes));
  fill_random(out.get(), bytes, 1);
  ASSERT_TRUE(s.write(*id, out.get()).is_ok());
  Status r1 = s.read(*id, in.get());  // EIO
  EXPECT_EQ(r1.code(), Code::io_error);
  EXPECT_NE(r1.message().find("read extent 'w'"), std::string::npos) << r1.message();
  EXPECT_NE(r1.message().find("must not be used"), std::string::npos) << r1.message();
  ASSERT_TRUE(s.read(*id, in.get()).is_ok());
  EXPECT_EQ(std::memcmp(in.get(), out.get(), bytes), 0);

  fill_random(out.get(), bytes, 2);
  ASSERT_TRUE(s.write(*id, out.get()).is_ok());  // torn, but reported fine
  Status r2 = s.read(*id, in.get());
  EXPECT_EQ(r2.code(), Code::corruption) << r2.to_string();

  Status w3 = s.write(*id, out.get());  // EIO on write
  EXPECT_EQ(w3.code(), Code::io_error);
  EXPECT_NE(w3.message().find("write extent 'w'"), std::string::npos) << w3.message();
  Status r3 = s.read(*id, in.get());
  EXPECT_EQ(r3.code(), Code::failed_precondition);
  EXPECT_NE(r3.message().find("its last write failed"), std::string::npos) << r3.message();
}

// One rule, one store over a MemEngine wrapped in a FaultEngine, one extent in one stripe segment.
struct FaultyStore {
  explicit FaultyStore(FaultRule rule, uint32_t attempts = 3)
      : engine(std::make_unique<MemEngine>(), FaultEngineOptions{5, {rule}}) {
    NvmeStoreOptions o = options({dir.path()}, 1 << 20);
    o.io_attempts = attempts;
    auto s = NvmeStore::create(engine, o);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    store = std::move(*s);
    id = *store->allocate("seg", kBytes);
    out = aligned_buffer(store->padded_size(kBytes));
    in = aligned_buffer(store->padded_size(kBytes));
    fill_random(out.get(), kBytes, 4);
  }
  static constexpr uint64_t kBytes = 60000;  // under one 64 KiB stripe unit: one segment
  test::ScratchDir dir;
  FaultEngine engine;
  std::unique_ptr<NvmeStore> store;
  ExtentId id = 0;
  test::AlignedBuffer out, in;
};

TEST(NvmeStore, TransientFaultsAreRetriedThenAClearError) {
  for (FaultKind kind : {FaultKind::eio, FaultKind::short_transfer}) {
    SCOPED_TRACE(fault_kind_name(kind));
    // Two failures of a read: the third try delivers the data.
    FaultyStore f(FaultRule{.kind = kind, .op = IoOp::read, .limit = 2});
    ASSERT_TRUE(f.store->write(f.id, f.out.get()).is_ok());
    Status r = f.store->read(f.id, f.in.get());
    ASSERT_TRUE(r.is_ok()) << r.to_string();
    EXPECT_EQ(std::memcmp(f.in.get(), f.out.get(), FaultyStore::kBytes), 0);
    EXPECT_EQ(f.engine.injected(kind), 2u);

    // Two failures of a write: the third lands, and reads back intact.
    FaultyStore g(FaultRule{.kind = kind, .op = IoOp::write, .limit = 2});
    ASSERT_TRUE(g.store->write(g.id, g.out.get()).is_ok());
    ASSERT_TRUE(g.store->read(g.id, g.in.get()).is_ok());
    EXPECT_EQ(std::memcmp(g.in.get(), g.out.get(), FaultyStore::kBytes), 0);
    EXPECT_EQ(g.engine.injected(kind), 2u);

    // A fault on every try: exactly three tries, then an error naming the file, offset, length.
    FaultyStore h(FaultRule{.kind = kind, .op = IoOp::write});
    Status w = h.store->write(h.id, h.out.get());
    EXPECT_EQ(w.code(), Code::io_error) << w.to_string();
    EXPECT_EQ(h.engine.injected(kind), 3u);
    EXPECT_NE(w.message().find("failed 3 times"), std::string::npos) << w.message();
    EXPECT_NE(w.message().find(h.store->swap_files()[0]), std::string::npos) << w.message();
    EXPECT_NE(w.message().find("61440 bytes at offset 0"), std::string::npos) << w.message();
    EXPECT_NE(w.message().find("write extent 'seg'"), std::string::npos) << w.message();
  }
}

TEST(NvmeStore, ACorruptReadIsReadAgainButPersistentDamageIsCorruption) {
  FaultyStore f(FaultRule{.kind = FaultKind::torn_write, .op = IoOp::write, .limit = 1});
  ASSERT_TRUE(f.store->write(f.id, f.out.get()).is_ok());  // torn on disk, reported fine
  Status r = f.store->read(f.id, f.in.get());
  EXPECT_EQ(r.code(), Code::corruption) << r.to_string();
  EXPECT_NE(r.message().find("failed 3 times"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("crc32c"), std::string::npos) << r.message();
}

TEST(NvmeStore, NoSpaceIsNotRetried) {
  FaultyStore f(FaultRule{.kind = FaultKind::enospc, .op = IoOp::write, .skip = 1, .limit = 1});  // skip: the reservation
  Status w = f.store->write(f.id, f.out.get());
  EXPECT_EQ(w.code(), Code::no_space) << w.to_string();
  EXPECT_EQ(f.engine.injected(FaultKind::enospc), 1u);
  EXPECT_EQ(w.message().find("failed 3 times"), std::string::npos) << w.message();
  NvmeStoreOptions zero = options({f.dir.path()}, 1 << 20);
  zero.io_attempts = 0;
  EXPECT_EQ(NvmeStore::create(f.engine, zero).status().code(), Code::invalid_argument);
}

TEST(NvmeStore, MisuseIsRefusedWithReasons) {
  test::ScratchDir a;
  MemEngine engine;
  auto store = NvmeStore::create(engine, options({a.path()}, 1 << 20));
  ASSERT_TRUE(store.is_ok());
  NvmeStore& s = **store;
  auto id = s.allocate("x", 5000);
  auto buf = aligned_buffer(s.padded_size(5000) + 4096);
  Status never = s.read(*id, buf.get());
  EXPECT_EQ(never.code(), Code::failed_precondition);
  EXPECT_NE(never.message().find("never written"), std::string::npos);
  EXPECT_EQ(s.write(*id, buf.get() + 1).code(), Code::invalid_argument);  // misaligned buffer
  auto io = s.begin_write(*id, buf.get());
  ASSERT_TRUE(io.is_ok());
  EXPECT_EQ(s.release(*id).code(), Code::failed_precondition);
  ASSERT_TRUE(s.finish(*io).is_ok());
  EXPECT_EQ(s.finish(*io).code(), Code::failed_precondition);  // finished twice
  EXPECT_EQ(s.allocate("empty", 0).status().code(), Code::invalid_argument);
  EXPECT_EQ(NvmeStore::create(engine, options({}, 1 << 20)).status().code(), Code::invalid_argument);
  NvmeStoreOptions odd = options({a.path()}, 1 << 20, 5000);
  EXPECT_EQ(NvmeStore::create(engine, odd).status().code(), Code::invalid_argument);
}

TEST(NvmeStore, RunDirectoryIsPrivateAndRemovedAtExit) {
  test::ScratchDir a;
  auto engine = test::make_engine("posix", IoShape{});
  std::string dir, swap;
  {
    auto store = NvmeStore::create(*engine, options({a.path()}, 1 << 20));
    ASSERT_TRUE(store.is_ok()) << store.status().to_string();
    dir = (*store)->run_dirs()[0]->path();
    swap = (*store)->swap_files()[0];
    struct stat st {};
    ASSERT_EQ(::stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    ASSERT_EQ(::stat(swap.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, 1u << 20);  // reserved, not sparse
    // A live run is not a leftover.
    auto stale = find_stale_runs(a.path());
    ASSERT_TRUE(stale.is_ok());
    EXPECT_TRUE(stale->empty());
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(NvmeStore, LeftoversOfACrashedRunAreFoundAndRemoved) {
  test::ScratchDir a;
  const std::string dead = a.path() + "/strata-run-999999-0";
  ASSERT_EQ(::mkdir(dead.c_str(), 0700), 0);
  { std::ofstream(dead + "/lock") << "pid 999999\nstarted 1\n"; }  // nobody holds its lock
  { std::ofstream(dead + "/swap.bin") << std::string(10000, 'x'); }
  const std::string odd = a.path() + "/strata-run-999998-0";  // a leftover with a stranger's file
  ASSERT_EQ(::mkdir(odd.c_str(), 0700), 0);
  { std::ofstream(odd + "/lock") << "pid 999998\n"; }
  { std::ofstream(odd + "/notes.txt") << "mine"; }

  auto stale = find_stale_runs(a.path());
  ASSERT_TRUE(stale.is_ok());
  ASSERT_EQ(stale->size(), 2u);
  auto removed = remove_stale_runs(a.path());
  ASSERT_TRUE(removed.is_ok());
  ASSERT_EQ(removed->size(), 1u);
  EXPECT_EQ((*removed)[0].path, dead);
  EXPECT_GE((*removed)[0].bytes, 10000u);
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(odd + "/notes.txt"));  // never deletes what it did not create

  // A run whose lock is held (by this process here) is live and left alone.
  auto live = RunDir::create(a.path());
  ASSERT_TRUE(live.is_ok());
  auto again = find_stale_runs(a.path());
  ASSERT_TRUE(again.is_ok());
  for (const StaleRun& r : *again) EXPECT_NE(r.path, (*live)->path());
}

TEST(StripeLayout, DealsUnitsRoundRobinAndMapsContiguously) {
  StripeLayout two{2, 4096};
  auto segs = map_range(two, 2048, 4096 * 3);
  ASSERT_EQ(segs.size(), 4u);
  EXPECT_EQ(segs[0].path, 0u);
  EXPECT_EQ(segs[0].file_offset, 2048u);
  EXPECT_EQ(segs[0].length, 2048u);
  EXPECT_EQ(segs[1].path, 1u);
  EXPECT_EQ(segs[1].file_offset, 0u);
  EXPECT_EQ(segs[2].path, 0u);
  EXPECT_EQ(segs[2].file_offset, 4096u);
  EXPECT_EQ(segs[2].range_offset, 2048u + 4096u);
  EXPECT_EQ(segs[3].length, 2048u);
  auto one = map_range(StripeLayout{1, 4096}, 8192, 100000);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].file_offset, 8192u);
}

TEST(SpaceMap, FirstFitAndCoalescing) {
  SpaceMap m(100);
  EXPECT_EQ(m.allocate(30), 0u);
  EXPECT_EQ(m.allocate(30), 30u);
  EXPECT_EQ(m.allocate(30), 60u);
  EXPECT_FALSE(m.allocate(30).has_value());
  m.release(0, 30);
  m.release(60, 30);
  EXPECT_EQ(m.largest_free(), 40u);
  m.release(30, 30);  // joins both neighbours
  EXPECT_EQ(m.largest_free(), 100u);
  EXPECT_EQ(m.free_bytes(), 100u);
}

}  // namespace
}  // namespace strata
