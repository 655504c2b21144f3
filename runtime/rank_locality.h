// RankLocality: what one rank of a scale-out run uses on its node -- its GPU, the NUMA node near
// it, the logical CPUs its threads run on and the NVMe paths it pages to -- chosen from the
// machine's topology (hwloc, sysfs) and the launch (the rank's place among the node's ranks).
//
// The rule (plan_rank_locality):
// * CPUs. A world of one keeps every CPU it may use. Otherwise each rank gets a share of a NUMA
//   node's physical cores (every hardware thread of a core, never half a core): on the CUDA
//   backend the node of its GPU (device index = local rank), shared by the local ranks whose GPUs
//   sit on it; on the CPU backend, or where a GPU's node is unknown, the local ranks are spread
//   over the nodes in blocks (ranks 0..k-1 on the first node, ...). A node's cores are cut into
//   contiguous equal shares in local-rank order; more ranks than cores share cores round the
//   node. A process the launcher already bound to part of the machine (mpirun's --bind-to,
//   taskset) keeps its binding, with a warning when that is fewer CPUs than its share (Open MPI
//   binds each rank to one core by default at two ranks or fewer: `mpirun --bind-to none` lets
//   strata place them).
// * NVMe paths. The given paths on the rank's NUMA node, in their order; all of them where the
//   node is unknown or none is on it.
// apply_rank_locality then binds the whole process (every thread, and those it starts later:
// oneTBB's workers, the streams', io_uring's) to the CPUs. Pinned memory is first touched by those
// threads, so it lands on the rank's node.
// Thread-safety: the planning is pure; apply_rank_locality changes the process's binding, so call
// it once, early, before the process starts its worker threads.
#pragma once

#include <string>
#include <vector>

#include "runtime/status.h"

namespace strata {

class Topology;

// The machine as the split needs it (discover_locality_machine reads it; tests build their own).
struct LocalityMachine {
  std::vector<std::vector<int>> cores;  // each physical core's logical CPUs (Topology::core_cpus)
  struct Node {
    int index = 0;
    std::vector<int> cpus;  // ascending
  };
  std::vector<Node> numa_nodes;          // the nodes with CPUs, by index
  std::vector<int> gpu_numa_nodes;       // per CUDA device index, its node (-1 unknown); empty: no GPUs
  std::vector<int> bound_cpus;           // the process's binding when the run starts (ascending)
  struct Path {
    std::string path;
    int numa_node = -1;                  // its block device's (PathInfo::numa_node), -1 unknown
  };
  std::vector<Path> nvme_paths;          // as given, in order
};

struct RankLocality {
  int local_rank = 0;
  int local_size = 1;                    // 0: the launcher did not say
  int gpu = -1;                          // CUDA device index, -1 on the CPU backend
  int numa_node = -1;                    // the node its CPUs are on, -1 several or unknown
  std::vector<int> cpus;                 // ascending, never empty
  std::string cpus_why;                  // "GPU 1's NUMA node 1: 4 of its 8 cores, rank 2 of 2 there"
  std::string warning;                   // empty, or what the user should change (a launcher's binding)
  std::vector<std::string> nvme_paths;   // a subset of the given, in their order
  std::string nvme_why;                  // empty without paths
};

// The locality of local rank `local_rank` of `local_size` (local_size 0: unknown, so the rank keeps
// what it was given, with a warning naming the variable to set). `use_gpus`: the CUDA backend
// (device index = local rank). invalid_argument when local_rank is out of range or the machine
// lists no cores.
StatusOr<RankLocality> plan_rank_locality(const LocalityMachine& machine, int local_rank, int local_size,
                                          bool use_gpus);

// This machine as plan_rank_locality needs it: `topology`'s cores and nodes, the NUMA nodes of the
// CUDA devices `gpu_bus_ids` names (in device index order; empty on the CPU backend), the process's
// binding now, and each of `nvme_paths`' NUMA node (probe_path's; a path it cannot probe is kept
// with -1: preflight reports what is wrong with it).
StatusOr<LocalityMachine> discover_locality_machine(const Topology& topology, const std::vector<std::string>& gpu_bus_ids,
                                                    const std::vector<std::string>& nvme_paths);

// Binds every thread of this process, and those it starts later, to locality.cpus (hwloc). A
// locality that keeps the launcher's binding or every CPU binds nothing.
Status apply_rank_locality(const Topology& topology, const RankLocality& locality);

// "0-3,8-11" from {0,1,2,3,8,9,10,11} (ascending input).
std::string format_cpu_list(const std::vector<int>& cpus);

}  // namespace strata
