// plan_rank_locality on machines built here (two sockets with hyperthreads and GPUs on both, one
// node with more ranks than cores, a launcher's binding, NVMe paths on either node), and
// discover_locality_machine / format_cpu_list on this machine.
#include "runtime/rank_locality.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/topology.h"

namespace strata {
namespace {

// `sockets` NUMA nodes of `cores` cores each, two hardware threads a core numbered as Linux does
// on such machines: core i's threads are i and i + sockets * cores.
LocalityMachine two_threads_a_core(int sockets, int cores) {
  LocalityMachine m;
  const int n = sockets * cores;
  for (int s = 0; s < sockets; ++s) {
    LocalityMachine::Node node{.index = s};
    for (int c = 0; c < cores; ++c) {
      const int core = s * cores + c;
      m.cores.push_back({core, core + n});
      node.cpus.push_back(core);
      node.cpus.push_back(core + n);
    }
    std::sort(node.cpus.begin(), node.cpus.end());
    m.numa_nodes.push_back(node);
  }
  for (int cpu = 0; cpu < 2 * n; ++cpu) m.bound_cpus.push_back(cpu);
  return m;
}

std::vector<RankLocality> plan_all(const LocalityMachine& m, int ranks, bool gpus) {
  std::vector<RankLocality> all;
  for (int r = 0; r < ranks; ++r) {
    StatusOr<RankLocality> l = plan_rank_locality(m, r, ranks, gpus);
    EXPECT_TRUE(l.is_ok()) << l.status().to_string();
    if (l.is_ok()) all.push_back(*l);
  }
  return all;
}

TEST(RankLocality, OneRankKeepsEveryCpu) {
  LocalityMachine m = two_threads_a_core(2, 4);
  StatusOr<RankLocality> l = plan_rank_locality(m, 0, 1, false);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l->cpus.size(), 16u);
  EXPECT_TRUE(l->warning.empty()) << l->warning;
}

TEST(RankLocality, GpuRanksTakeTheirGpusNodeInWholeCores) {
  // Four GPUs, two a socket; each rank gets half its GPU's socket: whole cores, both threads.
  LocalityMachine m = two_threads_a_core(2, 4);
  m.gpu_numa_nodes = {0, 0, 1, 1};
  const std::vector<RankLocality> all = plan_all(m, 4, true);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].cpus, (std::vector<int>{0, 1, 8, 9}));
  EXPECT_EQ(all[1].cpus, (std::vector<int>{2, 3, 10, 11}));
  EXPECT_EQ(all[2].cpus, (std::vector<int>{4, 5, 12, 13}));
  EXPECT_EQ(all[3].cpus, (std::vector<int>{6, 7, 14, 15}));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(all[size_t(r)].gpu, r);
    EXPECT_EQ(all[size_t(r)].numa_node, r / 2);
    EXPECT_TRUE(all[size_t(r)].warning.empty());
  }
  EXPECT_NE(all[3].cpus_why.find("GPU 3's NUMA node 1: 2 of its 4 cores, rank 2 of 2 there"), std::string::npos)
      << all[3].cpus_why;
}

TEST(RankLocality, GpusOnOneSocketShareIt) {
  // Both GPUs behind socket 1: the ranks split socket 1, socket 0 stays free for nobody's threads.
  LocalityMachine m = two_threads_a_core(2, 4);
  m.gpu_numa_nodes = {1, 1};
  const std::vector<RankLocality> all = plan_all(m, 2, true);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].cpus, (std::vector<int>{4, 5, 12, 13}));
  EXPECT_EQ(all[1].cpus, (std::vector<int>{6, 7, 14, 15}));
}

TEST(RankLocality, UnknownGpuNodesAndTheCpuBackendSpreadRanksOverNodes) {
  LocalityMachine m = two_threads_a_core(2, 4);
  m.gpu_numa_nodes = {-1, -1};
  for (bool gpus : {true, false}) {
    const std::vector<RankLocality> all = plan_all(m, 2, gpus);
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0].numa_node, 0);
    EXPECT_EQ(all[1].numa_node, 1);
    EXPECT_EQ(all[1].cpus, (std::vector<int>{4, 5, 6, 7, 12, 13, 14, 15}));
    EXPECT_NE(all[1].cpus_why.find("NUMA node 1: 4 of its 4 cores, the only rank there"), std::string::npos)
        << all[1].cpus_why;
  }
  // Three ranks on two nodes: blocks, ranks 0 and 1 on node 0.
  const std::vector<RankLocality> three = plan_all(m, 3, false);
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[0].cpus, (std::vector<int>{0, 1, 8, 9}));
  EXPECT_EQ(three[1].cpus, (std::vector<int>{2, 3, 10, 11}));
  EXPECT_EQ(three[2].numa_node, 1);
}

TEST(RankLocality, SharesAreDisjointAndCoverTheNode) {
  // Uneven: 3 ranks on 8 cores -> 2, 3, 3 cores; together every CPU once.
  LocalityMachine m = two_threads_a_core(1, 8);
  const std::vector<RankLocality> all = plan_all(m, 3, false);
  std::multiset<int> seen;
  for (const RankLocality& l : all) seen.insert(l.cpus.begin(), l.cpus.end());
  EXPECT_EQ(seen.size(), 16u);
  EXPECT_EQ(std::set<int>(seen.begin(), seen.end()).size(), 16u) << "a CPU in two ranks' shares";
  EXPECT_EQ(all[0].cpus.size(), 4u);
  EXPECT_EQ(all[2].cpus.size(), 6u);
}

TEST(RankLocality, MoreRanksThanCoresShareCores) {
  // CI's shape: 4 ranks oversubscribed on 2 single-thread cores.
  LocalityMachine m;
  m.cores = {{0}, {1}};
  m.numa_nodes = {{.index = 0, .cpus = {0, 1}}};
  m.bound_cpus = {0, 1};
  const std::vector<RankLocality> all = plan_all(m, 4, false);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].cpus, std::vector<int>{0});
  EXPECT_EQ(all[1].cpus, std::vector<int>{0});
  EXPECT_EQ(all[2].cpus, std::vector<int>{1});
  EXPECT_EQ(all[3].cpus, std::vector<int>{1});
  EXPECT_NE(all[0].cpus_why.find("outnumber its cores"), std::string::npos) << all[0].cpus_why;
}

TEST(RankLocality, TheLaunchersBindingIsKeptWithAWarningWhenSmaller) {
  LocalityMachine m = two_threads_a_core(2, 4);
  m.gpu_numa_nodes = {0, 1};
  m.bound_cpus = {1};  // Open MPI's default at two ranks: one core (here one hardware thread)
  StatusOr<RankLocality> l = plan_rank_locality(m, 0, 2, true);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l->cpus, std::vector<int>{1});
  EXPECT_EQ(l->numa_node, 0);
  EXPECT_NE(l->warning.find("bound local rank 0 to 1 CPU (1), fewer than its share of 8"), std::string::npos)
      << l->warning;
  EXPECT_NE(l->warning.find("--bind-to none"), std::string::npos) << l->warning;
  // A binding as large as the share: kept, no warning.
  m.bound_cpus = {4, 5, 6, 7, 12, 13, 14, 15};
  l = plan_rank_locality(m, 1, 2, true);
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->cpus, m.bound_cpus);
  EXPECT_TRUE(l->warning.empty()) << l->warning;
}

TEST(RankLocality, UnknownLocalSizeKeepsWhatItWasGivenAndSaysWhichVariable) {
  LocalityMachine m = two_threads_a_core(1, 2);
  StatusOr<RankLocality> l = plan_rank_locality(m, 1, 0, false);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l->cpus.size(), 4u);
  EXPECT_NE(l->warning.find("LOCAL_WORLD_SIZE"), std::string::npos) << l->warning;
}

TEST(RankLocality, NvmePathsOnTheRanksNode) {
  LocalityMachine m = two_threads_a_core(2, 2);
  m.gpu_numa_nodes = {0, 1};
  m.nvme_paths = {{"/mnt/a", 0}, {"/mnt/b", 1}, {"/mnt/c", 1}};
  const std::vector<RankLocality> all = plan_all(m, 2, true);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].nvme_paths, std::vector<std::string>{"/mnt/a"});
  EXPECT_EQ(all[1].nvme_paths, (std::vector<std::string>{"/mnt/b", "/mnt/c"}));
  EXPECT_EQ(all[1].nvme_why, "the 2 of 3 paths on NUMA node 1");
  // None on the rank's node, or their nodes unknown: every path.
  m.nvme_paths = {{"/mnt/a", 0}, {"/mnt/b", -1}};
  StatusOr<RankLocality> l = plan_rank_locality(m, 1, 2, true);
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->nvme_paths, (std::vector<std::string>{"/mnt/a", "/mnt/b"}));
  EXPECT_EQ(l->nvme_why, "every path: none on NUMA node 1");
}

TEST(RankLocality, BadArguments) {
  LocalityMachine m = two_threads_a_core(1, 2);
  EXPECT_EQ(plan_rank_locality(m, 2, 2, false).status().code(), Code::invalid_argument);
  EXPECT_EQ(plan_rank_locality(m, -1, 2, false).status().code(), Code::invalid_argument);
  EXPECT_EQ(plan_rank_locality(LocalityMachine{}, 0, 1, false).status().code(), Code::invalid_argument);
}

TEST(RankLocality, ThisMachine) {
  StatusOr<Topology> topo = Topology::discover();
  ASSERT_TRUE(topo.is_ok()) << topo.status().to_string();
  StatusOr<LocalityMachine> m = discover_locality_machine(*topo, {}, {"/tmp"});
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  size_t cpus = 0;
  for (const std::vector<int>& core : m->cores) cpus += core.size();
  EXPECT_EQ(cpus, topo->cpus().size()) << "every CPU in exactly one core";
  ASSERT_EQ(m->nvme_paths.size(), 1u);
  // One rank keeps every CPU, so binding it changes nothing.
  StatusOr<RankLocality> l = plan_rank_locality(*m, 0, 1, false);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l->nvme_paths, std::vector<std::string>{"/tmp"});
  EXPECT_TRUE(apply_rank_locality(*topo, *l).is_ok());
}

// In a child process (a death test's fork): rank 1 of 2's share bound, a thread started before the
// binding and one started after both run on exactly its CPUs.
TEST(RankLocalityDeathTest, ApplyBindsEveryThreadOfTheProcess) {
  StatusOr<Topology> topo = Topology::discover();
  ASSERT_TRUE(topo.is_ok()) << topo.status().to_string();
  if (topo->core_cpus().size() < 2) GTEST_SKIP() << "one core here: there is no share to bind a rank to";
  EXPECT_EXIT(
      {
        StatusOr<LocalityMachine> m = discover_locality_machine(*topo, {}, {});
        StatusOr<RankLocality> l = m.is_ok() ? plan_rank_locality(*m, 1, 2, false) : m.status();
        if (!l.is_ok() || l->cpus.size() >= topo->cpus().size()) std::exit(2);
        std::atomic<int> stage{0};
        bool before_ok = false;
        std::thread before([&] {
          while (stage.load() == 0) std::this_thread::yield();
          StatusOr<std::vector<int>> mine = current_thread_cpus();
          before_ok = mine.is_ok() && *mine == l->cpus;
        });
        if (!apply_rank_locality(*topo, *l).is_ok()) std::exit(3);
        stage.store(1);
        before.join();
        bool after_ok = false;
        std::thread after([&] {
          StatusOr<std::vector<int>> mine = current_thread_cpus();
          after_ok = mine.is_ok() && *mine == l->cpus;
        });
        after.join();
        StatusOr<std::vector<int>> main_cpus = current_thread_cpus();
        std::exit(before_ok && after_ok && main_cpus.is_ok() && *main_cpus == l->cpus ? 0 : 4);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(FormatCpuList, Ranges) {
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 9, 10, 11}), "0-3,8-11");
  EXPECT_EQ(format_cpu_list({5}), "5");
  EXPECT_EQ(format_cpu_list({1, 3, 4}), "1,3-4");
  EXPECT_EQ(format_cpu_list({}), "");
}

}  // namespace
}  // namespace strata
