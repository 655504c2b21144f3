// SplitWeights on the CPU backend: a partly resident run's source hands out each chunk's committed
// bytes from its own source -- the resident chunks from their blocks (no fetch), the paged ones
// through the TierManager's slots (only their bytes cross), reads and updates likewise -- and
// refuses a routing its sources do not match and chunks past the model's.
#include "offload/split_weights.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "offload/resident_weights.h"
#include "offload/tier_manager.h"
#include "offload_test_util.h"

namespace strata {
namespace {

constexpr uint64_t kChunk = 2 * 4096;

std::byte pattern(size_t c, uint32_t v, uint64_t i) { return static_cast<std::byte>((c * 37 + v * 11 + i * 5) & 0xFF); }

struct Rig {
  // Chunks 0..4; 1 and 3 resident, 0, 2 and 4 paged (from pinned memory) through one slot.
  Rig() {
    backend = test::value_of(make_backend(BackendOptions{.kind = BackendKind::cpu, .memory_budget = 4 << 20}));
    pool = test::value_of(PinnedPool::create(PinnedPoolOptions{.capacity = 16 << 20, .slab_bytes = 1 << 20,
                                                               .allow_cuda = false, .allow_mlock = false,
                                                               .huge_pages = false}));
    TierManagerOptions o;
    o.home = Tier::cpu;
    o.chunk_bytes = {kChunk, kChunk, kChunk};
    o.chunk_group = {0, 0, 0};
    o.group_slots = {1};
    tiers = test::value_of(TierManager::create(*backend, *pool, nullptr, nullptr, o));
    resident = test::value_of(ResidentWeights::create(*backend, *pool, {kChunk, kChunk}, {"one", "three"}, "test"));
    split = test::value_of(SplitWeights::create(mask, *resident, *tiers));
  }
  void write(size_t c, uint32_t v) {
    std::byte* b = test::value_of(split->update_buffer(c));
    for (uint64_t i = 0; i < kChunk; ++i) b[i] = pattern(c, v, i);
    ASSERT_TRUE(split->commit_update(c).is_ok());
  }
  // The bytes the compute sees at chunk c's acquired pointer equal version v.
  bool holds(size_t c, uint32_t v) {
    std::byte* p = test::value_of(split->acquire(c));
    std::vector<std::byte> host(kChunk);
    EXPECT_TRUE(backend->copy_to_host(host.data(), p, kChunk, Stream::compute).is_ok());
    EXPECT_TRUE(backend->synchronize(Stream::compute).is_ok());
    EXPECT_TRUE(split->release(c).is_ok());
    for (uint64_t i = 0; i < kChunk; ++i)
      if (host[i] != pattern(c, v, i)) return false;
    return true;
  }

  const std::vector<bool> mask = {false, true, false, true, false};
  std::unique_ptr<Backend> backend;
  std::unique_ptr<PinnedPool> pool;
  std::unique_ptr<TierManager> tiers;
  std::unique_ptr<ResidentWeights> resident;
  std::unique_ptr<SplitWeights> split;
};

TEST(SplitWeights, EachChunkComesFromItsOwnSource) {
  Rig r;
  ASSERT_EQ(r.split->chunk_count(), 5u);
  for (size_t c = 0; c < 5; ++c) r.write(c, 1);
  ASSERT_TRUE(r.split->flush().is_ok());
  ASSERT_TRUE(r.split->begin_sequence("train").is_ok());
  for (size_t c : {0, 1, 2, 3, 4, 3, 2, 1, 0}) EXPECT_TRUE(r.holds(c, 1)) << "chunk " << c;
  ASSERT_TRUE(r.split->end_sequence().is_ok());
  // Only the paged chunks crossed into slots: 0, 2, 4 and again 2 and 0 through the one slot.
  EXPECT_EQ(r.tiers->stats().h2d_bytes, 5 * kChunk);
  EXPECT_TRUE(r.split->resident(1));
  EXPECT_FALSE(r.split->resident(2));

  // An update of each kind is what the next acquire and read see.
  r.write(3, 2);
  r.write(4, 2);
  ASSERT_TRUE(r.split->flush().is_ok());
  EXPECT_TRUE(r.holds(3, 2));
  EXPECT_TRUE(r.holds(4, 2));
  EXPECT_TRUE(r.holds(1, 1));
  for (size_t c = 0; c < 5; ++c) {
    std::vector<std::byte> host(kChunk);
    ASSERT_TRUE(r.split->read(c, host.data()).is_ok());
    const uint32_t v = c >= 3 ? 2 : 1;
    for (uint64_t i = 0; i < kChunk; i += 997) ASSERT_EQ(host[i], pattern(c, v, i)) << "chunk " << c;
  }
}

TEST(SplitWeights, RefusesARoutingItsSourcesDoNotHoldAndChunksPastTheModel) {
  Rig r;
  const auto wrong = SplitWeights::create({true, true, true, false, false}, *r.resident, *r.tiers);
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_EQ(wrong.status().code(), Code::invalid_argument);
  EXPECT_NE(wrong.status().message().find("3 chunks routed to the resident source"), std::string::npos) << wrong.status().to_string();
  const auto past = r.split->acquire(5);
  ASSERT_FALSE(past.is_ok());
  EXPECT_EQ(past.status().code(), Code::out_of_range);
  EXPECT_NE(past.status().message().find("chunk 5"), std::string::npos);
}

}  // namespace
}  // namespace strata
