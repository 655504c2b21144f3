// PinnedPool: exact-size reuse, 4 KiB alignment, tail carving and big requests, the capacity
// limit, the pageable fallback, the mlock path (as root), the slab listener, PinnedBuffer moves.
#include "runtime/pinned_pool.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace strata {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

// The buffer of a successful acquire (StatusOr hands out move-only values by rvalue only).
PinnedBuffer take(StatusOr<PinnedBuffer> r) {
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : PinnedBuffer();
}

std::unique_ptr<PinnedPool> make_pool(uint64_t slab_bytes = kMiB, uint64_t capacity = 0, bool allow_mlock = true) {
  PinnedPoolOptions options;
  options.slab_bytes = slab_bytes;
  options.capacity = capacity;
  options.allow_cuda = false;  // the same figures on a GPU machine; cuda_host is in backend_gpu_test
  options.allow_mlock = allow_mlock;
  StatusOr<std::unique_ptr<PinnedPool>> pool = PinnedPool::create(options);
  EXPECT_TRUE(pool.is_ok()) << pool.status().to_string();
  return pool.is_ok() ? std::move(pool).value() : nullptr;
}

TEST(PinnedPool, ReleasedBlocksAreReusedBySize) {
  auto pool = make_pool();
  std::byte* first = nullptr;
  {
    PinnedBuffer a = take(pool->acquire(100 * kKiB));
    first = a.data();
    EXPECT_EQ(a.size(), 100 * kKiB);
    EXPECT_EQ(pool->stats().in_use, 100 * kKiB);
  }
  EXPECT_EQ(pool->stats().in_use, 0u);
  PinnedBuffer b = take(pool->acquire(100 * kKiB - 5));  // same size after rounding to 4 KiB
  EXPECT_EQ(b.data(), first);
  PinnedPoolStats s = pool->stats();
  EXPECT_EQ(s.acquires, 2u);
  EXPECT_EQ(s.reuses, 1u);
  EXPECT_EQ(s.slabs, 1u);
  EXPECT_EQ(s.reserved, kMiB);
  EXPECT_EQ(s.peak, 100 * kKiB);
}

TEST(PinnedPool, BlocksAre4KiBAlignedAndCarvedFromOneSlab) {
  auto pool = make_pool();
  std::vector<PinnedBuffer> held;
  for (uint64_t bytes : {1ull, 4096ull, 4097ull, 0ull, 30000ull}) {
    StatusOr<PinnedBuffer> b = pool->acquire(bytes);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 4096, 0u) << bytes;
    EXPECT_EQ(b->size() % 4096, 0u);
    EXPECT_GE(b->size(), std::max<uint64_t>(bytes, 1));
    std::memset(b->data(), 0x7e, b->size());
    held.push_back(std::move(b).value());
  }
  EXPECT_EQ(pool->stats().slabs, 1u);
  EXPECT_EQ(pool->stats().in_use, (1 + 1 + 2 + 1 + 8) * 4096u);
}

TEST(PinnedPool, ABiggerRequestGetsItsOwnSlab) {
  auto pool = make_pool(kMiB);
  PinnedBuffer small = take(pool->acquire(4 * kKiB));
  PinnedBuffer big = take(pool->acquire(3 * kMiB));
  PinnedPoolStats s = pool->stats();
  EXPECT_EQ(s.slabs, 2u);
  EXPECT_EQ(s.reserved, 4 * kMiB);
  EXPECT_EQ(pool->slab_index(big.data()), 1);
  PinnedBuffer tail = take(pool->acquire(kMiB - 4 * kKiB));
  EXPECT_EQ(pool->slab_index(tail.data()), 0) << "the first slab's tail still had room";
  EXPECT_EQ(pool->stats().slabs, 2u);
}

TEST(PinnedPool, CapacityLimitIsOutOfMemoryWithFigures) {
  auto pool = make_pool(kMiB, 2 * kMiB);
  PinnedBuffer a = take(pool->acquire(kMiB));
  PinnedBuffer b = take(pool->acquire(kMiB));
  StatusOr<PinnedBuffer> c = pool->acquire(8 * kKiB);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), Code::out_of_memory);
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("pinned memory capacity exceeded"), std::string::npos) << m;
  EXPECT_NE(m.find("a request of 8 KiB"), std::string::npos) << m;
  EXPECT_NE(m.find("2 MiB of the 2 MiB capacity is reserved"), std::string::npos) << m;
  a = PinnedBuffer();  // released: an exact-size request reuses it within the capacity
  EXPECT_TRUE(pool->acquire(kMiB).is_ok());
}

TEST(PinnedPool, ALastSlabIsTrimmedToTheCapacity) {
  auto pool = make_pool(4 * kMiB, 6 * kMiB);
  PinnedBuffer a = take(pool->acquire(4 * kMiB));
  PinnedBuffer b = take(pool->acquire(kMiB));
  EXPECT_EQ(pool->stats().reserved, 6 * kMiB);
  EXPECT_EQ(pool->slabs().back().size(), 2 * kMiB);
}

bool all_zero(const PinnedBuffer& b) {
  return std::all_of(b.data(), b.data() + b.size(), [](std::byte x) { return x == std::byte{0}; });
}

// PinnedFill::zero: memory as the OS gave it (a new slab's tail, faulted in on every core) is
// handed out without being written again; a block used before is zeroed (every byte, on every
// core); PinnedFill::any leaves a reused block's bytes.
TEST(PinnedPool, ZeroFillWritesOnlyWhatWasUsedBefore) {
  for (const bool mlock : {false, true}) {
    if (mlock && geteuid() != 0) continue;  // the mlock path needs root or CAP_IPC_LOCK
    auto pool = make_pool(8 * kMiB, 0, mlock);
    std::byte* first = nullptr;
    {
      PinnedBuffer a = take(pool->acquire(5 * kMiB + 4 * kKiB, PinnedFill::zero));  // several parallel ranges
      EXPECT_TRUE(all_zero(a));
      EXPECT_EQ(pool->stats().zeroed_bytes, 0u) << "fresh from the OS: not written again";
      first = a.data();
      std::memset(a.data(), 0x7e, a.size());
    }
    {
      PinnedBuffer kept = take(pool->acquire(5 * kMiB + 4 * kKiB));
      ASSERT_EQ(kept.data(), first);
      EXPECT_EQ(kept.as<uint8_t>()[kept.size() - 1], 0x7e) << "PinnedFill::any leaves the last user's bytes";
    }
    PinnedBuffer reused = take(pool->acquire(5 * kMiB + 4 * kKiB, PinnedFill::zero));
    ASSERT_EQ(reused.data(), first);
    EXPECT_TRUE(all_zero(reused));
    EXPECT_EQ(pool->stats().zeroed_bytes, 5 * kMiB + 4 * kKiB);
    PinnedBuffer tail = take(pool->acquire(kMiB, PinnedFill::zero));  // the slab's untouched tail
    EXPECT_TRUE(all_zero(tail));
    EXPECT_EQ(pool->stats().zeroed_bytes, 5 * kMiB + 4 * kKiB);
    EXPECT_EQ(pool->reserved_bytes(), pool->stats().reserved);
  }
}

TEST(PinnedPool, ForcedPageableFallbackStillWorks) {
  auto pool = make_pool(kMiB, 0, /*allow_mlock=*/false);
  EXPECT_EQ(pool->kind(), PinnedKind::pageable);
  PinnedBuffer b = take(pool->acquire(64 * kKiB));
  std::memset(b.data(), 0x3c, b.size());
  EXPECT_EQ(b.as<uint8_t>()[b.size() - 1], 0x3c);
  EXPECT_EQ(pool->stats().kind, PinnedKind::pageable);
  EXPECT_EQ(pinned_kind_name(pool->kind()), "pageable");
}

TEST(PinnedPool, MlockPathWhenAllowed) {
  if (geteuid() != 0) GTEST_SKIP() << "mlock of whole slabs needs root or CAP_IPC_LOCK; running as uid " << geteuid();
  auto pool = make_pool(kMiB);
  EXPECT_EQ(pool->kind(), PinnedKind::mlock);
  PinnedBuffer b = take(pool->acquire(kMiB));
  std::memset(b.data(), 1, b.size());
  EXPECT_EQ(pool->stats().kind, PinnedKind::mlock);
  EXPECT_EQ(pinned_kind_name(PinnedKind::mlock), "mlock");
}

TEST(PinnedPool, SlabListenerSeesNewSlabsAndSlabIndexFindsPointers) {
  auto pool = make_pool(kMiB);
  PinnedBuffer before = take(pool->acquire(kMiB));  // slab 0, reserved before the listener
  std::vector<std::pair<size_t, std::span<std::byte>>> seen;
  pool->set_slab_listener([&seen](size_t index, std::span<std::byte> slab) { seen.emplace_back(index, slab); });
  PinnedBuffer second = take(pool->acquire(kMiB));
  PinnedBuffer third = take(pool->acquire(2 * kMiB));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].first, 1u);
  EXPECT_EQ(seen[0].second.data(), second.data());
  EXPECT_EQ(seen[1].first, 2u);
  EXPECT_EQ(seen[1].second.size(), 2 * kMiB);
  std::vector<std::span<std::byte>> slabs = pool->slabs();
  ASSERT_EQ(slabs.size(), 3u);
  EXPECT_EQ(slabs[0].data(), before.data());
  EXPECT_EQ(pool->slab_index(before.data() + 1000), 0);
  EXPECT_EQ(pool->slab_index(second.data() + kMiB - 1), 1);
  EXPECT_EQ(pool->slab_index(third.data()), 2);
  int on_stack = 0;
  EXPECT_EQ(pool->slab_index(&on_stack), -1);
}

TEST(PinnedBuffer, MovesTransferOwnershipAndReturnOnce) {
  auto pool = make_pool();
  PinnedBuffer a = take(pool->acquire(8 * kKiB));
  std::byte* p = a.data();
  PinnedBuffer b(std::move(a));
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), p);
  PinnedBuffer c = take(pool->acquire(4 * kKiB));
  c = std::move(b);  // c's old block goes back to the pool
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(pool->stats().in_use, 8 * kKiB);
  c = PinnedBuffer();
  EXPECT_EQ(pool->stats().in_use, 0u);
  PinnedBuffer empty;
  EXPECT_FALSE(empty);
}

TEST(PinnedPool, RejectsAZeroSlabSize) {
  PinnedPoolOptions options;
  options.slab_bytes = 0;
  StatusOr<std::unique_ptr<PinnedPool>> pool = PinnedPool::create(options);
  ASSERT_FALSE(pool.is_ok());
  EXPECT_EQ(pool.status().code(), Code::invalid_argument);
  EXPECT_NE(pool.status().message().find("slab size"), std::string::npos);
}

}  // namespace
}  // namespace strata
