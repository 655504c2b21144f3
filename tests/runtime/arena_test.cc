// Arena: budget and exact fit, the out-of-memory message, fragmentation and coalescing, peak
// tracking, release errors, range queries, alignment, and a random soak against a simple model.
#include "runtime/arena.h"

#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/units.h"

namespace strata {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

TEST(Arena, ExactFitOfTheWholeBudgetThenNothingMore) {
  Arena arena("gpu", 16 * kMiB);
  StatusOr<uint64_t> all = arena.allocate(16 * kMiB, "everything");
  ASSERT_TRUE(all.is_ok()) << all.status().to_string();
  EXPECT_EQ(*all, 0u);
  EXPECT_EQ(arena.stats().in_use, 16 * kMiB);
  EXPECT_EQ(arena.stats().largest_free, 0u);
  StatusOr<uint64_t> one_more = arena.allocate(1, "one byte");
  ASSERT_FALSE(one_more.is_ok());
  EXPECT_EQ(one_more.status().code(), Code::out_of_memory);
}

TEST(Arena, OverBudgetMessageNamesTierTagRequestUseBudgetAndLargestBlock) {
  Arena arena("gpu", 24 * kGiB);
  ASSERT_TRUE(arena.allocate(23 * kGiB, "layers").is_ok());
  StatusOr<uint64_t> r = arena.allocate(3 * kGiB / 2, "attention scratch");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::out_of_memory);
  EXPECT_EQ(r.status().message(),
            fmt::format("gpu memory budget exceeded: 'attention scratch' needs {} but {} of the {} budget is in use "
                        "(largest free block {}); raise --gpu-mem or lower the batch/model size",
                        format_size(3 * kGiB / 2), format_size(23 * kGiB), format_size(24 * kGiB),
                        format_size(1 * kGiB)));
  EXPECT_NE(r.status().message().find(
                "needs 1.5 GiB but 23 GiB of the 24 GiB budget is in use (largest free block 1 GiB)"),
            std::string::npos)
      << r.status().to_string();
}

TEST(Arena, OtherTiersGetAGenericHint) {
  Arena arena("cpu", kMiB);
  StatusOr<uint64_t> r = arena.allocate(2 * kMiB, "optimizer");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("cpu memory budget exceeded: 'optimizer' needs 2 MiB"), std::string::npos)
      << r.status().to_string();
  EXPECT_NE(r.status().message().find("raise the cpu memory budget"), std::string::npos) << r.status().to_string();
}

TEST(Arena, FragmentationLimitsTheLargestRequestBelowFreeBytes) {
  Arena arena("gpu", 8 * kMiB);
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 8; i++) blocks.push_back(*arena.allocate(kMiB, "block"));
  for (int i = 0; i < 8; i += 2) ASSERT_TRUE(arena.release(blocks[i]).is_ok());  // free every other MiB
  ArenaStats s = arena.stats();
  EXPECT_EQ(s.in_use, 4 * kMiB);
  EXPECT_EQ(s.largest_free, kMiB);
  EXPECT_EQ(s.allocations, 4u);
  StatusOr<uint64_t> two = arena.allocate(2 * kMiB, "two MiB");
  ASSERT_FALSE(two.is_ok());
  EXPECT_EQ(two.status().code(), Code::out_of_memory);
  EXPECT_NE(two.status().message().find("largest free block 1 MiB, the free memory is fragmented"), std::string::npos)
      << two.status().to_string();
  EXPECT_TRUE(arena.allocate(kMiB, "fits a hole").is_ok());
}

TEST(Arena, ReleasedNeighboursCoalesceBackToOneBlock) {
  Arena arena("gpu", 4 * kMiB);
  uint64_t a = *arena.allocate(kMiB, "a");
  uint64_t b = *arena.allocate(kMiB, "b");
  uint64_t c = *arena.allocate(kMiB, "c");
  uint64_t d = *arena.allocate(kMiB, "d");
  // Release in an order that exercises merging with the next, the previous, and both.
  ASSERT_TRUE(arena.release(b).is_ok());
  ASSERT_TRUE(arena.release(d).is_ok());
  EXPECT_EQ(arena.stats().largest_free, kMiB);
  ASSERT_TRUE(arena.release(c).is_ok());  // joins b and d
  EXPECT_EQ(arena.stats().largest_free, 3 * kMiB);
  ASSERT_TRUE(arena.release(a).is_ok());
  EXPECT_EQ(arena.stats().largest_free, 4 * kMiB);
  EXPECT_EQ(arena.stats().in_use, 0u);
  EXPECT_EQ(*arena.allocate(4 * kMiB, "whole again"), 0u);
}

TEST(Arena, BestFitPicksTheSmallestHoleThatFits) {
  Arena arena("gpu", 16 * kMiB);
  uint64_t big = *arena.allocate(4 * kMiB, "big");
  uint64_t sep1 = *arena.allocate(kMiB, "separator");
  uint64_t small = *arena.allocate(kMiB, "small");
  ASSERT_TRUE(arena.allocate(kMiB, "separator").is_ok());
  ASSERT_TRUE(arena.release(big).is_ok());
  ASSERT_TRUE(arena.release(small).is_ok());
  EXPECT_EQ(*arena.allocate(kMiB, "fits the small hole"), small);
  EXPECT_EQ(*arena.allocate(3 * kMiB, "fits the big hole"), big);
  (void)sep1;
}

TEST(Arena, PeakTracksTheHighestUseAndResetsToCurrent) {
  Arena arena("gpu", 16 * kMiB);
  uint64_t a = *arena.allocate(6 * kMiB, "a");
  uint64_t b = *arena.allocate(4 * kMiB, "b");
  ASSERT_TRUE(arena.release(a).is_ok());
  EXPECT_EQ(arena.stats().peak, 10 * kMiB);
  EXPECT_EQ(arena.stats().in_use, 4 * kMiB);
  arena.reset_peak();
  EXPECT_EQ(arena.stats().peak, 4 * kMiB);
  ASSERT_TRUE(arena.release(b).is_ok());
  EXPECT_EQ(arena.stats().peak, 4 * kMiB);
  ASSERT_TRUE(arena.allocate(kMiB, "c").is_ok());
  EXPECT_EQ(arena.stats().peak, 4 * kMiB);
}

TEST(Arena, ReleaseOfAnUnknownOffsetIsAFailedPrecondition) {
  Arena arena("gpu", kMiB);
  uint64_t a = *arena.allocate(4096, "a");
  Status wrong = arena.release(a + 256);
  EXPECT_EQ(wrong.code(), Code::failed_precondition);
  EXPECT_NE(wrong.message().find("not a live block"), std::string::npos) << wrong.to_string();
  ASSERT_TRUE(arena.release(a).is_ok());
  Status twice = arena.release(a);
  EXPECT_EQ(twice.code(), Code::failed_precondition);
}

TEST(Arena, BlockSizeAndContains) {
  Arena arena("gpu", kMiB);
  uint64_t a = *arena.allocate(1000, "a");  // rounded up to 1024
  uint64_t b = *arena.allocate(0, "empty");  // one aligned unit
  EXPECT_EQ(arena.block_size(a), 1024u);
  EXPECT_EQ(arena.block_size(b), 256u);
  EXPECT_EQ(arena.block_size(a + 256), 0u);
  EXPECT_TRUE(arena.contains(a, 1024));
  EXPECT_TRUE(arena.contains(a + 1000, 24));
  EXPECT_FALSE(arena.contains(a + 1000, 25)) << "runs into the next block";
  EXPECT_FALSE(arena.contains(a, 1024 + 256)) << "spans two blocks";
  EXPECT_FALSE(arena.contains(b + 256, 1)) << "free memory";
  EXPECT_FALSE(arena.contains(a + 1, UINT64_MAX)) << "overflowing length";
}

TEST(Arena, RangeAndOffsetHelpersForBackends) {
  Arena arena("gpu", kMiB);
  alignas(256) static std::byte region[1 << 20];
  uint64_t a = *arena.allocate(4096, "a");
  EXPECT_TRUE(arena.check_range(region, region + a + 100, 100, "copy").is_ok());
  Status outside = arena.check_range(region, region + a + 4000, 100, "copy_to_host source");
  EXPECT_EQ(outside.code(), Code::invalid_argument);
  EXPECT_NE(outside.message().find("copy_to_host source"), std::string::npos) << outside.to_string();
  EXPECT_EQ(arena.check_range(region + 64, region, 1, "before").code(), Code::invalid_argument);
  void* b = *arena.allocate_at(region, 512, "b");
  EXPECT_EQ(b, region + 4096) << "base plus the offset allocate() would give";
  EXPECT_EQ(arena.block_size(4096), 512u);
  ASSERT_TRUE(arena.release_at(region, b).is_ok());
  EXPECT_EQ(arena.block_size(4096), 0u);
  Status outside_region = arena.release_at(region, region + (1 << 20));
  EXPECT_EQ(outside_region.code(), Code::failed_precondition);
  EXPECT_NE(outside_region.message().find("not gpu memory of this backend"), std::string::npos)
      << outside_region.to_string();
}

TEST(Arena, EveryOffsetIsAligned) {
  for (uint64_t alignment : {256ull, 4096ull}) {
    Arena arena("gpu", 64 * kMiB, alignment);
    std::mt19937_64 rng(alignment);
    for (int i = 0; i < 200; i++) {
      StatusOr<uint64_t> r = arena.allocate(rng() % 100000, "odd size");
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      EXPECT_EQ(*r % alignment, 0u) << "alignment " << alignment;
      EXPECT_EQ(arena.block_size(*r) % alignment, 0u);
    }
  }
}

// Random allocations and releases checked against a model: blocks never overlap, stay inside the
// capacity, in_use/peak/allocations match, and an allocation fails only when no free gap fits.
TEST(Arena, RandomSoakMatchesAModel) {
  constexpr uint64_t kCapacity = 8 * kMiB;
  constexpr uint64_t kAlign = 256;
  Arena arena("gpu", kCapacity, kAlign);
  std::map<uint64_t, uint64_t> model;  // offset -> rounded size
  uint64_t peak = 0;
  std::mt19937_64 rng(42);
  auto largest_gap = [&] {
    uint64_t largest = 0, cursor = 0;
    for (const auto& [off, size] : model) {
      largest = std::max(largest, off - cursor);
      cursor = off + size;
    }
    return std::max(largest, kCapacity - cursor);
  };
  for (int step = 0; step < 5000; step++) {
    if (model.empty() || rng() % 100 < 55) {
      const uint64_t bytes = 1 + rng() % (kCapacity / 16);
      const uint64_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
      StatusOr<uint64_t> r = arena.allocate(bytes, "soak");
      if (!r.is_ok()) {
        EXPECT_EQ(r.status().code(), Code::out_of_memory);
        EXPECT_LT(largest_gap(), rounded) << "refused although a gap fits, step " << step;
        continue;
      }
      const uint64_t off = *r;
      ASSERT_LE(off + rounded, kCapacity);
      auto next = model.lower_bound(off);
      if (next != model.end()) {
        ASSERT_LE(off + rounded, next->first) << "overlaps the next block";
      }
      if (next != model.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, off) << "overlaps the previous block";
      }
      model.emplace(off, rounded);
    } else {
      auto it = model.begin();
      std::advance(it, static_cast<long>(rng() % model.size()));
      ASSERT_TRUE(arena.release(it->first).is_ok());
      model.erase(it);
    }
    uint64_t in_use = 0;
    for (const auto& [off, size] : model) in_use += size;
    peak = std::max(peak, in_use);
    ArenaStats s = arena.stats();
    ASSERT_EQ(s.in_use, in_use) << "step " << step;
    ASSERT_EQ(s.peak, peak);
    ASSERT_EQ(s.allocations, model.size());
    ASSERT_EQ(s.largest_free, largest_gap()) << "step " << step;
  }
  for (const auto& [off, size] : model) ASSERT_TRUE(arena.release(off).is_ok());
  EXPECT_EQ(arena.stats().largest_free, kCapacity) << "everything coalesced back";
}

}  // namespace
}  // namespace strata
