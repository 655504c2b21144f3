// Topology on this machine: counts agree with the OS, NUMA nodes and caches are present, pinning
// moves the thread, and unknown ids are rejected. Also the PCI helpers (bus id, link speed).
#include "runtime/topology.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

namespace strata {
namespace {

// Restores the test thread's affinity when a test that pins it ends.
class AffinityRestorer {
 public:
  AffinityRestorer() : saved_(current_thread_cpus()) {}
  ~AffinityRestorer() {
    if (saved_.is_ok()) (void)pin_current_thread_to_cpus(*saved_);
  }

 private:
  StatusOr<std::vector<int>> saved_;
};

Topology discover_or_die() {
  auto t = Topology::discover();
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return std::move(t).value();
}

TEST(Topology, CountsMatchTheOperatingSystem) {
  Topology t = discover_or_die();
  auto process_cpus = current_thread_cpus();
  ASSERT_TRUE(process_cpus.is_ok()) << process_cpus.status().to_string();
  EXPECT_GE(t.physical_cores(), 1);
  EXPECT_LE(t.physical_cores(), t.hardware_threads());
  EXPECT_GE(t.packages(), 1);
  const int threads = t.hardware_threads();
  EXPECT_TRUE(threads == static_cast<int>(std::thread::hardware_concurrency()) ||
              threads == static_cast<int>(process_cpus->size()))
      << threads << " hardware threads; OS says " << std::thread::hardware_concurrency() << ", affinity "
      << process_cpus->size();
  EXPECT_TRUE(std::is_sorted(t.cpus().begin(), t.cpus().end()));
  EXPECT_FALSE(t.cpu_model().empty());
}

TEST(Topology, TotalMemoryMatchesSysconf) {
  Topology t = discover_or_die();
  const double sysconf_bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  ASSERT_GT(sysconf_bytes, 0);
  EXPECT_NEAR(static_cast<double>(t.total_memory_bytes()), sysconf_bytes, 0.10 * sysconf_bytes);
}

TEST(Topology, NumaNodesCoverEveryCpuOnce) {
  Topology t = discover_or_die();
  ASSERT_GE(t.numa_nodes().size(), 1u);
  std::vector<int> all;
  uint64_t node_memory = 0;
  for (const NumaNode& n : t.numa_nodes()) {
    all.insert(all.end(), n.cpus.begin(), n.cpus.end());
    node_memory += n.local_memory_bytes;
    EXPECT_EQ(t.numa_node(n.index), &n);
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, t.cpus());
  EXPECT_GT(node_memory, 0u);
  EXPECT_LE(node_memory, t.total_memory_bytes());
  EXPECT_EQ(t.numa_node(1 << 20), nullptr);
}

TEST(Topology, CachesHaveSizesAndSharing) {
  Topology t = discover_or_die();
  ASSERT_FALSE(t.caches().empty());
  bool has_l1_data = false;
  for (const CacheLevel& c : t.caches()) {
    EXPECT_GE(c.level, 1);
    EXPECT_GT(c.size_bytes, 0u) << "L" << c.level << " " << c.type;
    EXPECT_GE(c.instances, 1);
    EXPECT_GE(c.cores_sharing, 1);
    EXPECT_LE(c.cores_sharing, t.physical_cores());
    if (c.level == 1 && c.type != "instruction") has_l1_data = true;
  }
  EXPECT_TRUE(has_l1_data);
}

TEST(Topology, PinToCoreMovesTheThread) {
  Topology t = discover_or_die();
  AffinityRestorer restore;
  const int first = t.cpus().front();
  ASSERT_TRUE(t.pin_current_thread_to_core(first).is_ok());
  EXPECT_EQ(sched_getcpu(), first);
  auto now = current_thread_cpus();
  ASSERT_TRUE(now.is_ok());
  EXPECT_EQ(*now, std::vector<int>{first});
  const int last = t.cpus().back();
  ASSERT_TRUE(t.pin_current_thread_to_core(last).is_ok());
  EXPECT_EQ(sched_getcpu(), last);
}

TEST(Topology, PinToNumaNodeUsesItsCpus) {
  Topology t = discover_or_die();
  AffinityRestorer restore;
  const NumaNode& node = t.numa_nodes().front();
  ASSERT_TRUE(t.pin_current_thread_to_numa_node(node.index).is_ok());
  auto now = current_thread_cpus();
  ASSERT_TRUE(now.is_ok());
  EXPECT_EQ(*now, node.cpus);
}

TEST(Topology, UnknownIdsAreInvalidArgument) {
  Topology t = discover_or_die();
  Status s = t.pin_current_thread_to_numa_node(4096);
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_NE(s.message().find("NUMA node 4096"), std::string::npos) << s.message();
  s = t.pin_current_thread_to_core(-3);
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_NE(s.message().find("CPU -3"), std::string::npos) << s.message();
  EXPECT_EQ(pin_current_thread_to_cpus({}).code(), Code::invalid_argument);
}

TEST(Topology, UnknownGpuIsNotFound) {
  Topology t = discover_or_die();
  auto cpus = t.cpus_near_gpu("0000:ff:1f.7");
  ASSERT_FALSE(cpus.is_ok());
  EXPECT_EQ(cpus.status().code(), Code::not_found);
  EXPECT_NE(cpus.status().message().find("0000:ff:1f.7"), std::string::npos);
  EXPECT_EQ(t.pin_current_thread_near_gpu("not-a-bus-id").code(), Code::invalid_argument);
}

TEST(Topology, PciGpusAreWellFormed) {
  Topology t = discover_or_die();
  for (const PciGpu& g : t.pci_gpus()) {
    EXPECT_EQ(g.vendor_id, 0x10de);
    auto normalized = normalize_pci_bus_id(g.pci_bus_id);
    ASSERT_TRUE(normalized.is_ok());
    EXPECT_EQ(*normalized, g.pci_bus_id);
    EXPECT_EQ(t.pci_gpu(g.pci_bus_id), &g);
    auto near = t.cpus_near_gpu(g.pci_bus_id);
    ASSERT_TRUE(near.is_ok());
    EXPECT_FALSE(near->empty());
  }
}

TEST(PciBusId, NormalizesCommonForms) {
  EXPECT_EQ(*normalize_pci_bus_id("0000:17:00.0"), "0000:17:00.0");
  EXPECT_EQ(*normalize_pci_bus_id("00000000:17:00.0"), "0000:17:00.0");
  EXPECT_EQ(*normalize_pci_bus_id("0000:AF:00.1"), "0000:af:00.1");
  EXPECT_EQ(*normalize_pci_bus_id("3b:00.0"), "0000:3b:00.0");
  auto bad = normalize_pci_bus_id("gpu0");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), Code::invalid_argument);
  EXPECT_NE(bad.status().message().find("'gpu0' is not a PCI bus id"), std::string::npos);
  EXPECT_FALSE(normalize_pci_bus_id("0000:17:00.0x").is_ok());
  EXPECT_FALSE(normalize_pci_bus_id("0000:17:40.0").is_ok());  // device numbers stop at 0x1f
}

TEST(PciLink, GenerationFromSysfsSpeed) {
  EXPECT_EQ(pcie_generation_from_link_speed("2.5 GT/s PCIe"), 1);
  EXPECT_EQ(pcie_generation_from_link_speed("5.0 GT/s PCIe"), 2);
  EXPECT_EQ(pcie_generation_from_link_speed("8.0 GT/s PCIe"), 3);
  EXPECT_EQ(pcie_generation_from_link_speed("16.0 GT/s PCIe"), 4);
  EXPECT_EQ(pcie_generation_from_link_speed("32.0 GT/s PCIe"), 5);
  EXPECT_EQ(pcie_generation_from_link_speed("64.0 GT/s PCIe"), 6);
  EXPECT_EQ(pcie_generation_from_link_speed("Unknown"), 0);
  EXPECT_EQ(pcie_generation_from_link_speed("12.0 GT/s"), 0);
}

TEST(Topology, MovePreservesContents) {
  Topology a = discover_or_die();
  const std::vector<int> cpus = a.cpus();
  Topology b = std::move(a);
  EXPECT_EQ(b.cpus(), cpus);
  EXPECT_NE(b.hwloc_handle(), nullptr);
  EXPECT_EQ(a.hwloc_handle(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
}


// A node's RAM from a fake sysfs tree: its online memory blocks times the hex block size; offline
// blocks, other entries and other nodes' blocks do not count; an unreadable tree gives 0.
TEST(Topology, OnlineMemoryBlockBytesCountsTheNodesOnlineBlocks) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(::testing::TempDir()) / "fake_sys_system";
  fs::remove_all(root);
  const auto write = [](const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text << "\n";
  };
  write(root / "memory/block_size_bytes", "8000000");  // 128 MiB
  for (int k : {0, 1, 2}) write(root / ("node/node0/memory" + std::to_string(k)) / "online", "1");
  write(root / "node/node0/memory3/online", "0");
  write(root / "node/node0/memory_failure/online", "1");  // not a block
  write(root / "node/node1/memory4/online", "1");
  EXPECT_EQ(online_memory_block_bytes(root.string(), 0), 3ull * 128 * 1024 * 1024);
  EXPECT_EQ(online_memory_block_bytes(root.string(), 1), 128ull * 1024 * 1024);
  EXPECT_EQ(online_memory_block_bytes(root.string(), 2), 0u);  // no such node
  write(root / "memory/block_size_bytes", "zz");
  EXPECT_EQ(online_memory_block_bytes(root.string(), 0), 0u);  // unparsable block size
  EXPECT_EQ(online_memory_block_bytes((root / "missing").string(), 0), 0u);
  fs::remove_all(root);
}

// On this machine: each node's RAM, where sysfs lists it, is at least what the kernel counts usable
// on it, and all of it together at least the OS's MemTotal (the blocks include what the kernel reserved).
TEST(Topology, NodeRamIsAtLeastItsUsableMemory) {
  Topology t = discover_or_die();
  uint64_t blocks = 0;
  for (const NumaNode& n : t.numa_nodes()) {
    if (n.online_block_bytes == 0) GTEST_SKIP() << "sysfs lists no memory blocks for node " << n.index;
    EXPECT_GE(n.online_block_bytes, n.local_memory_bytes) << "node " << n.index;
    blocks += n.online_block_bytes;
  }
  EXPECT_GE(blocks, t.total_memory_bytes());
}

}  // namespace
}  // namespace strata
