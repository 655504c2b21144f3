// Prefetcher: a trace recorded by the first sequence of a name and replayed by the next ones, a
// departure (different chunk, early or late end) re-recording, names kept apart, the upcoming
// window measured in bytes (always at least one chunk), and next-use distances for eviction.
#include "offload/prefetcher.h"

#include <vector>

#include <gtest/gtest.h>

namespace strata {
namespace {

using Chunks = std::vector<size_t>;

void run(Prefetcher& p, std::string_view name, const Chunks& order) {
  ASSERT_TRUE(p.begin(name).is_ok());
  for (size_t c : order) p.on_access(c);
  ASSERT_TRUE(p.end().is_ok());
}

// Forward 0..n-1 then backward n-1..0, as a training step accesses layer chunks.
Chunks step(size_t n) {
  Chunks o;
  for (size_t c = 0; c < n; c++) o.push_back(c);
  for (size_t c = n; c-- > 0;) o.push_back(c);
  return o;
}

TEST(Prefetcher, FirstSequenceRecordsLaterOnesReplay) {
  Prefetcher p;
  ASSERT_TRUE(p.begin("train").is_ok());
  EXPECT_FALSE(p.replaying());
  for (size_t c : step(4)) p.on_access(c);
  EXPECT_TRUE(p.upcoming(1 << 20, std::vector<uint64_t>(4, 100)).empty());  // nothing to replay yet
  ASSERT_TRUE(p.end().is_ok());
  EXPECT_EQ(p.trace("train"), step(4));
  EXPECT_EQ(p.stats().sequences_recorded, 1u);

  for (int i = 0; i < 3; i++) {
    ASSERT_TRUE(p.begin("train").is_ok());
    EXPECT_TRUE(p.replaying());
    for (size_t c : step(4)) {
      p.on_access(c);
      EXPECT_TRUE(p.replaying());
    }
    ASSERT_TRUE(p.end().is_ok());
  }
  EXPECT_EQ(p.stats().sequences_replayed, 3u);
  EXPECT_EQ(p.stats().sequences_recorded, 1u);
  EXPECT_EQ(p.stats().mismatches, 0u);
  EXPECT_EQ(p.stats().accesses, 4u * 8u);
}

TEST(Prefetcher, SequencesDoNotNest) {
  Prefetcher p;
  EXPECT_EQ(p.end().code(), Code::failed_precondition);
  ASSERT_TRUE(p.begin("train").is_ok());
  EXPECT_EQ(p.begin("eval").code(), Code::failed_precondition);
  ASSERT_TRUE(p.end().is_ok());
  p.on_access(3);  // outside a sequence: ignored
  EXPECT_EQ(p.stats().accesses, 0u);
}

TEST(Prefetcher, AMismatchReRecordsAndTheNewOrderReplacesTheTrace) {
  Prefetcher p;
  run(p, "train", {0, 1, 2, 3});
  ASSERT_TRUE(p.begin("train").is_ok());
  p.on_access(0);
  p.on_access(1);
  EXPECT_TRUE(p.replaying());
  p.on_access(3);  // skipped chunk 2: the order changed
  EXPECT_FALSE(p.replaying());
  EXPECT_TRUE(p.upcoming(1 << 20, std::vector<uint64_t>(4, 1)).empty());
  EXPECT_EQ(p.next_use(2), Prefetcher::kNever);
  p.on_access(2);
  ASSERT_TRUE(p.end().is_ok());
  EXPECT_EQ(p.trace("train"), (Chunks{0, 1, 3, 2}));
  EXPECT_EQ(p.stats().sequences_recorded, 2u);
  EXPECT_EQ(p.stats().sequences_replayed, 0u);
  // The new order replays.
  run(p, "train", {0, 1, 3, 2});
  EXPECT_EQ(p.stats().sequences_replayed, 1u);
}

TEST(Prefetcher, EndingEarlyOrLateCountsAsChanged) {
  Prefetcher p;
  run(p, "train", {0, 1, 2, 3});
  run(p, "train", {0, 1});  // early
  EXPECT_EQ(p.trace("train"), (Chunks{0, 1}));
  EXPECT_EQ(p.stats().sequences_replayed, 0u);
  run(p, "train", {0, 1, 2});  // late
  EXPECT_EQ(p.trace("train"), (Chunks{0, 1, 2}));
  EXPECT_EQ(p.stats().sequences_replayed, 0u);
  EXPECT_EQ(p.stats().sequences_recorded, 3u);
  EXPECT_EQ(p.stats().mismatches, 2u);
  run(p, "train", {0, 1, 2});
  EXPECT_EQ(p.stats().sequences_replayed, 1u);
}

TEST(Prefetcher, NamesHaveTheirOwnTraces) {
  Prefetcher p;
  run(p, "train", step(3));
  run(p, "eval", {0, 1, 2});
  EXPECT_EQ(p.trace("train"), step(3));
  EXPECT_EQ(p.trace("eval"), (Chunks{0, 1, 2}));
  run(p, "eval", {0, 1, 2});
  run(p, "train", step(3));
  EXPECT_EQ(p.stats().sequences_replayed, 2u);
  EXPECT_EQ(p.stats().sequences_recorded, 2u);
  EXPECT_TRUE(p.trace("other").empty());
}

TEST(Prefetcher, UpcomingFillsAWindowInBytesWithDistinctChunks) {
  Prefetcher p;
  // Chunk 0: embedding (300 bytes), 1..4: layers (100 each), 5: head (1000).
  const std::vector<uint64_t> bytes{300, 100, 100, 100, 100, 1000};
  const Chunks order{0, 1, 2, 3, 4, 5, 0, 4, 3, 2, 1, 0};
  run(p, "train", order);
  ASSERT_TRUE(p.begin("train").is_ok());
  // Before the first access: the window starts at the trace's first entry.
  EXPECT_EQ(p.upcoming(400, bytes), (Chunks{0, 1}));
  p.on_access(0);
  EXPECT_EQ(p.upcoming(250, bytes), (Chunks{1, 2}));
  EXPECT_EQ(p.upcoming(300, bytes), (Chunks{1, 2, 3}));
  EXPECT_EQ(p.upcoming(299, bytes), (Chunks{1, 2}));
  EXPECT_EQ(p.upcoming(0, bytes), (Chunks{1}));  // never less than one
  p.on_access(1);
  p.on_access(2);
  p.on_access(3);
  // 4, then the head (too big to share a 500-byte window with 4), so only 4.
  EXPECT_EQ(p.upcoming(500, bytes), (Chunks{4}));
  p.on_access(4);
  EXPECT_EQ(p.upcoming(10, bytes), (Chunks{5}));  // a window smaller than the chunk still gets it
  // Distinct: 0 and 4 appear twice after the head but are listed once; 4 is the current access
  // only until the head is accessed.
  p.on_access(5);
  EXPECT_EQ(p.upcoming(1 << 20, bytes), (Chunks{0, 4, 3, 2, 1}));
  p.on_access(0);
  p.on_access(4);
  // The current access (4) is excluded; 0 comes again at the end.
  EXPECT_EQ(p.upcoming(1 << 20, bytes), (Chunks{3, 2, 1, 0}));
  for (size_t c : {3, 2, 1, 0}) p.on_access(c);
  EXPECT_TRUE(p.upcoming(1 << 20, bytes).empty());
  ASSERT_TRUE(p.end().is_ok());
  EXPECT_EQ(p.stats().sequences_replayed, 1u);
}

TEST(Prefetcher, NextUseIsTheDistanceToTheNextAccess) {
  Prefetcher p;
  run(p, "train", step(4));  // 0 1 2 3 3 2 1 0
  EXPECT_EQ(p.next_use(0), Prefetcher::kNever);  // no sequence open
  ASSERT_TRUE(p.begin("train").is_ok());
  EXPECT_EQ(p.next_use(0), 0u);
  EXPECT_EQ(p.next_use(3), 3u);
  p.on_access(0);
  EXPECT_EQ(p.next_use(0), 6u);  // the backward's last access
  EXPECT_EQ(p.next_use(1), 0u);
  EXPECT_EQ(p.next_use(2), 1u);
  p.on_access(1);
  p.on_access(2);
  p.on_access(3);
  EXPECT_EQ(p.next_use(3), 0u);
  EXPECT_EQ(p.next_use(1), 2u);
  EXPECT_EQ(p.next_use(7), Prefetcher::kNever);  // not in the trace
  std::vector<uint64_t> all;
  p.next_uses(8, all);  // one pass: the same answers for every chunk
  for (size_t c = 0; c < 8; c++) EXPECT_EQ(all[c], p.next_use(c)) << "chunk " << c;
  p.on_access(3);
  p.on_access(2);
  EXPECT_EQ(p.next_use(3), Prefetcher::kNever);  // not used again
  ASSERT_TRUE(p.end().is_ok());
}

}  // namespace
}  // namespace strata
