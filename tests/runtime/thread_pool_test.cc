// ThreadPool: concurrency from the options, parallel_for covers [0, n) exactly once in pieces of
// at least `grain`, workers are pinned to one CPU of the set, the caller's affinity is restored,
// and bad options are rejected.
#include "runtime/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <vector>

#include <gtest/gtest.h>
#include <tbb/parallel_for.h>

#include "runtime/topology.h"

namespace strata {
namespace {

class ThreadPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = Topology::discover();
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    topology_.emplace(std::move(t).value());
  }
  std::unique_ptr<ThreadPool> make(ThreadPoolOptions options) {
    auto pool = ThreadPool::create(options, &*topology_);
    EXPECT_TRUE(pool.is_ok()) << pool.status().to_string();
    return pool.is_ok() ? std::move(pool).value() : nullptr;
  }
  std::optional<Topology> topology_;
};

TEST_F(ThreadPoolTest, ConcurrencyFollowsOptions) {
  auto all = make({});
  ASSERT_TRUE(all);
  EXPECT_EQ(all->concurrency(), topology_->hardware_threads());
  auto three = make({.threads = 3});
  ASSERT_TRUE(three);
  EXPECT_EQ(three->concurrency(), 3);
  const NumaNode& node = topology_->numa_nodes().front();
  auto on_node = make({.numa_node = node.index});
  ASSERT_TRUE(on_node);
  EXPECT_EQ(on_node->concurrency(), static_cast<int>(node.cpus.size()));
}

TEST_F(ThreadPoolTest, ParallelForCoversEveryIndexOnce) {
  auto pool = make({.threads = 4});
  ASSERT_TRUE(pool);
  for (size_t n : {1u, 2u, 7u, 64u, 1000u, 4097u}) {
    for (size_t grain : {0u, 1u, 3u, 64u, 5000u}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<size_t> smallest{n};
      pool->parallel_for(n, grain, [&](size_t begin, size_t end) {
        ASSERT_LT(begin, end);
        ASSERT_LE(end, n);
        size_t size = end - begin;
        size_t prev = smallest.load();
        while (size < prev && !smallest.compare_exchange_weak(prev, size)) {
        }
        for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " grain=" << grain << " i=" << i;
      EXPECT_GE(smallest.load(), std::min(std::max<size_t>(grain, 1), n)) << "n=" << n << " grain=" << grain;
    }
  }
}

TEST_F(ThreadPoolTest, ParallelForOfZeroCallsNothing) {
  auto pool = make({});
  ASSERT_TRUE(pool);
  int calls = 0;
  pool->parallel_for(0, 1, [&](size_t, size_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST_F(ThreadPoolTest, WorkersArePinnedInsideTheSetAndCallerIsRestored) {
  auto before = current_thread_cpus();
  ASSERT_TRUE(before.is_ok());
  const NumaNode& node = topology_->numa_nodes().front();
  auto pool = make({.threads = 2, .numa_node = node.index});
  ASSERT_TRUE(pool);
  struct Seen {
    int cpu;
    std::vector<int> mask;
    bool worker;
  };
  std::mutex mu;
  std::vector<Seen> seen;
  const auto caller = std::this_thread::get_id();
  // Many small pieces that each take a while, so the worker joins the arena.
  pool->parallel_for(256, 1, [&](size_t, size_t) {
    volatile double x = 0;
    for (int i = 0; i < 200000; ++i) x = x + i * 0.5;
    auto mask = current_thread_cpus();
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back({sched_getcpu(), mask.is_ok() ? *mask : std::vector<int>{}, std::this_thread::get_id() != caller});
  });
  ASSERT_FALSE(seen.empty());
  for (const Seen& s : seen) {
    EXPECT_TRUE(std::binary_search(node.cpus.begin(), node.cpus.end(), s.cpu)) << "ran on CPU " << s.cpu;
    for (int cpu : s.mask) EXPECT_TRUE(std::binary_search(node.cpus.begin(), node.cpus.end(), cpu));
    if (s.worker) {
      EXPECT_EQ(s.mask.size(), 1u) << "a worker is pinned to exactly one CPU";
    }
  }
  auto after = current_thread_cpus();
  ASSERT_TRUE(after.is_ok());
  EXPECT_EQ(*after, *before) << "the caller's affinity is restored after the call";
}

TEST_F(ThreadPoolTest, RunExecutesInsideTheArena) {
  auto pool = make({.threads = 2});
  ASSERT_TRUE(pool);
  int max_concurrency = pool->run([] { return tbb::this_task_arena::max_concurrency(); });
  EXPECT_EQ(max_concurrency, 2);
}

TEST_F(ThreadPoolTest, BadOptionsAreInvalidArgument) {
  auto negative = ThreadPool::create({.threads = -1, .name = "adam"}, &*topology_);
  ASSERT_FALSE(negative.is_ok());
  EXPECT_EQ(negative.status().code(), Code::invalid_argument);
  EXPECT_NE(negative.status().message().find("'adam': threads must be >= 0"), std::string::npos)
      << negative.status().message();
  auto bad_node = ThreadPool::create({.numa_node = 999}, &*topology_);
  ASSERT_FALSE(bad_node.is_ok());
  EXPECT_EQ(bad_node.status().code(), Code::invalid_argument);
  EXPECT_NE(bad_node.status().message().find("NUMA node 999"), std::string::npos) << bad_node.status().message();
}

TEST(ThreadPoolDiscovery, CreatesWithoutATopology) {
  auto pool = ThreadPool::create({.threads = 2});
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  std::atomic<size_t> sum{0};
  (*pool)->parallel_for(100, 10, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950u);
}

}  // namespace
}  // namespace strata
