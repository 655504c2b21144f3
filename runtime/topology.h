// Topology: the machine as offload needs it, discovered once through hwloc -- CPU model, packages,
// physical cores, hardware threads, NUMA nodes with their CPUs and memory, caches, total RAM, and
// the NVIDIA GPUs seen on the PCI bus with their NUMA locality and PCIe link (from sysfs). Helpers
// pin the calling thread to a CPU, a NUMA node or the node nearest a GPU.
// Not a CUDA query (names, memory and compute capability come from the Backend) and not a
// filesystem probe (runtime/fs_probe.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

struct hwloc_topology;  // hwloc's opaque topology (hwloc_topology_t is a pointer to it)

namespace strata {

// CPU ids below are the OS's logical CPU numbers (what sched_getcpu(), taskset and
// /sys/devices/system/cpu use), restricted to the CPUs this process may run on.

struct NumaNode {
  int index = 0;                    // OS index (node N of /sys/devices/system/node/nodeN)
  std::vector<int> cpus;            // logical CPUs of this node, ascending
  // The kernel's count of the node's usable pages (its MemTotal in nodeN/meminfo, as hwloc reads
  // it): below the node's RAM by what the kernel reserved at boot, and on some VMs (memory the
  // kernel initialises lazily, or hot-plugged) far below it: 9.7 GiB of a 24 GiB node here.
  uint64_t local_memory_bytes = 0;
  // The node's RAM as sysfs lists it: its online memory blocks times the block size
  // (online_memory_block_bytes); 0 where sysfs lists no memory blocks.
  uint64_t online_block_bytes = 0;
};

// The bytes of the online memory blocks of NUMA node `node` under `system_dir` (normally
// /sys/devices/system): the blocks nodeN/memoryK whose `online` reads 1, times memory/block_size_bytes
// (hex). 0 when the block size or the node's directory cannot be read.
uint64_t online_memory_block_bytes(const std::string& system_dir, int node);

struct CacheLevel {
  int level = 0;                  // 1, 2, 3, ...
  std::string type;               // "data", "instruction" or "unified"
  uint64_t size_bytes = 0;        // size of one instance
  int instances = 0;              // how many of this cache the machine has
  int cores_sharing = 0;          // physical cores sharing one instance
};

// An NVIDIA display/3D-class PCI function (vendor 0x10de, class 0x03xx).
struct PciGpu {
  std::string pci_bus_id;   // "0000:17:00.0" (domain:bus:device.function, lowercase hex)
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  int numa_node = -1;       // -1 = unknown
  int link_gen = 0;         // current PCIe generation (1..6), 0 = unknown
  int link_width = 0;       // current lanes, 0 = unknown
  int max_link_gen = 0;
  int max_link_width = 0;
};

class Topology {
 public:
  // Loads hwloc's view of this machine, with PCI devices. Fails (internal) only when hwloc cannot
  // load a topology at all.
  static StatusOr<Topology> discover();

  Topology(Topology&& other) noexcept;
  Topology& operator=(Topology&& other) noexcept;
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;
  ~Topology();

  const std::string& cpu_model() const { return cpu_model_; }  // "AMD EPYC 9654 96-Core Processor"
  int packages() const { return packages_; }
  int physical_cores() const { return physical_cores_; }
  int hardware_threads() const { return static_cast<int>(cpus_.size()); }
  const std::vector<int>& cpus() const { return cpus_; }  // every allowed logical CPU, ascending
  // Each physical core's allowed logical CPUs (its hardware threads), ascending, the cores ordered
  // by their first CPU; every CPU of cpus() in exactly one. Each CPU its own core where hwloc
  // shows no cores.
  const std::vector<std::vector<int>>& core_cpus() const { return core_cpus_; }
  // RAM the OS manages (MemTotal); at least the sum of the NUMA nodes' local_memory_bytes.
  uint64_t total_memory_bytes() const { return total_memory_bytes_; }
  const std::vector<NumaNode>& numa_nodes() const { return numa_nodes_; }
  const std::vector<CacheLevel>& caches() const { return caches_; }  // by level, then type
  const std::vector<PciGpu>& pci_gpus() const { return pci_gpus_; }

  // The node with OS index `index`, or null.
  const NumaNode* numa_node(int index) const;
  // The GPU whose bus id matches (any case, 4- or 8-digit domain), or null.
  const PciGpu* pci_gpu(std::string_view pci_bus_id) const;
  // The CPUs nearest the GPU: its NUMA node's CPUs, or every CPU when its node is unknown.
  // not_found if no NVIDIA GPU has that bus id.
  StatusOr<std::vector<int>> cpus_near_gpu(std::string_view pci_bus_id) const;

  // Pinning the calling thread (thread-safe; affects only the caller). Unknown ids are
  // invalid_argument naming the id and the valid ones.
  Status pin_current_thread_to_core(int cpu) const;
  Status pin_current_thread_to_numa_node(int node) const;
  Status pin_current_thread_near_gpu(const std::string& pci_bus_id) const;

  // hwloc's handle, for callers that bind memory (hwloc_alloc_membind). Owned by this object.
  hwloc_topology* hwloc_handle() const { return topo_; }

 private:
  Topology() = default;

  hwloc_topology* topo_ = nullptr;
  std::string cpu_model_;
  int packages_ = 0;
  int physical_cores_ = 0;
  std::vector<int> cpus_;
  std::vector<std::vector<int>> core_cpus_;
  uint64_t total_memory_bytes_ = 0;
  std::vector<NumaNode> numa_nodes_;
  std::vector<CacheLevel> caches_;
  std::vector<PciGpu> pci_gpus_;
};

// Sets the calling thread's affinity to exactly `cpus` (sched_setaffinity). Empty or negative ids
// are invalid_argument; the kernel refusing the set is reported through errno_status.
Status pin_current_thread_to_cpus(const std::vector<int>& cpus);
// The calling thread's current affinity (sched_getaffinity), ascending.
StatusOr<std::vector<int>> current_thread_cpus();

// "0000:17:00.0" from "00000000:17:00.0", "17:00.0" or "0000:17:00.0" in any case;
// invalid_argument for text that is not a PCI address.
StatusOr<std::string> normalize_pci_bus_id(std::string_view text);

// PCIe generation from a sysfs link speed: "16.0 GT/s PCIe" -> 4 (2.5->1, 5->2, 8->3, 16->4,
// 32->5, 64->6); 0 when unrecognized.
int pcie_generation_from_link_speed(std::string_view speed);

}  // namespace strata
