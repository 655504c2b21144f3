// plan_rank_locality's split of a node among its ranks, the machine it reads, and the binding.
#include "runtime/rank_locality.h"

#include <algorithm>
#include <cerrno>
#include <iterator>

#include <fmt/core.h>
#include <fmt/format.h>
#include <hwloc.h>

#include "runtime/fs_probe.h"
#include "runtime/topology.h"

namespace strata {
namespace {

// The node a rank's share is cut from, and how it came to be that node.
struct ShareNode {
  int index = -1;       // the node's OS index; -1: the whole machine (no nodes listed)
  bool near_gpu = false;
};

ShareNode share_node(const LocalityMachine& m, int local_rank, int local_size, bool use_gpus) {
  if (use_gpus && local_rank < int(m.gpu_numa_nodes.size())) {
    const int node = m.gpu_numa_nodes[size_t(local_rank)];
    for (const LocalityMachine::Node& n : m.numa_nodes)
      if (n.index == node) return {node, true};
  }
  if (m.numa_nodes.empty()) return {};
  // Blocks of ranks a node: rank r on node floor(r * nodes / ranks).
  const size_t nodes = m.numa_nodes.size();
  return {m.numa_nodes[size_t(local_rank) * nodes / size_t(local_size)].index, false};
}

// The cores of node `index` (every core whose first CPU is on it); all cores for -1.
std::vector<const std::vector<int>*> node_cores(const LocalityMachine& m, int index) {
  std::vector<const std::vector<int>*> cores;
  const LocalityMachine::Node* node = nullptr;
  for (const LocalityMachine::Node& n : m.numa_nodes)
    if (n.index == index) node = &n;
  for (const std::vector<int>& core : m.cores)
    if (!node || std::binary_search(node->cpus.begin(), node->cpus.end(), core.front())) cores.push_back(&core);
  return cores;
}

std::vector<int> all_cpus(const LocalityMachine& m) {
  std::vector<int> cpus;
  for (const std::vector<int>& core : m.cores) cpus.insert(cpus.end(), core.begin(), core.end());
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

// The node holding every one of `cpus`, or -1.
int node_of(const LocalityMachine& m, const std::vector<int>& cpus) {
  for (const LocalityMachine::Node& n : m.numa_nodes)
    if (std::includes(n.cpus.begin(), n.cpus.end(), cpus.begin(), cpus.end())) return n.index;
  return -1;
}

// Rank `local_rank`'s share: its node's cores cut into equal contiguous shares in local-rank order
// among the ranks on that node (one core, shared, when they outnumber the cores).
void plan_cpus(const LocalityMachine& m, int local_rank, int local_size, bool use_gpus, RankLocality& l) {
  const ShareNode mine = share_node(m, local_rank, local_size, use_gpus);
  int position = 0, sharing = 0;
  for (int r = 0; r < local_size; ++r) {
    const ShareNode other = share_node(m, r, local_size, use_gpus);
    if (other.index != mine.index) continue;
    if (r < local_rank) ++position;
    ++sharing;
  }
  const std::vector<const std::vector<int>*> cores = node_cores(m, mine.index);
  const size_t c = cores.size(), k = size_t(sharing), p = size_t(position);
  size_t first = p * c / k, last = (p + 1) * c / k;
  if (last == first) last = first + 1;  // more ranks than cores: one core, shared
  for (size_t i = first; i < last; ++i) l.cpus.insert(l.cpus.end(), cores[i]->begin(), cores[i]->end());
  std::sort(l.cpus.begin(), l.cpus.end());
  l.numa_node = mine.index;
  const std::string where =
      mine.index < 0 ? std::string("this node")
      : mine.near_gpu ? fmt::format("GPU {}'s NUMA node {}", l.gpu, mine.index)
                      : fmt::format("NUMA node {}", mine.index);
  l.cpus_why = fmt::format("{}: {} of its {} cores, {}", where, last - first, c,
                           k == 1 ? std::string("the only rank there")
                           : k > c ? fmt::format("shared: its {} ranks outnumber its cores", k)
                                   : fmt::format("rank {} of {} there", p + 1, k));
}

void plan_nvme(const LocalityMachine& m, RankLocality& l) {
  if (m.nvme_paths.empty()) return;
  for (const LocalityMachine::Path& p : m.nvme_paths)
    if (l.numa_node >= 0 && p.numa_node == l.numa_node) l.nvme_paths.push_back(p.path);
  if (!l.nvme_paths.empty() && l.nvme_paths.size() < m.nvme_paths.size()) {
    l.nvme_why = fmt::format("the {} of {} paths on NUMA node {}", l.nvme_paths.size(), m.nvme_paths.size(),
                             l.numa_node);
    return;
  }
  const bool all_local = !l.nvme_paths.empty();
  const bool any_known = std::any_of(m.nvme_paths.begin(), m.nvme_paths.end(),
                                     [](const LocalityMachine::Path& p) { return p.numa_node >= 0; });
  l.nvme_paths.clear();
  for (const LocalityMachine::Path& p : m.nvme_paths) l.nvme_paths.push_back(p.path);
  l.nvme_why = m.numa_nodes.size() <= 1 ? std::string("every path: one NUMA node")
               : all_local             ? fmt::format("every path: all on NUMA node {}", l.numa_node)
               : l.numa_node < 0       ? std::string("every path: this rank spans NUMA nodes")
               : !any_known            ? std::string("every path: their NUMA nodes are unknown")
                                       : fmt::format("every path: none on NUMA node {}", l.numa_node);
}

}  // namespace

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += fmt::format("{}{}", out.empty() ? "" : ",", cpus[i]);
    if (j > i) out += fmt::format("-{}", cpus[j]);
    i = j + 1;
  }
  return out;
}

StatusOr<RankLocality> plan_rank_locality(const LocalityMachine& m, int local_rank, int local_size, bool use_gpus) {
  if (m.cores.empty()) return error(Code::invalid_argument, "rank locality: the machine lists no CPU cores");
  if (local_size < 0 || local_rank < 0 || (local_size > 0 && local_rank >= local_size))
    return error(Code::invalid_argument, "rank locality: local rank {} of {} is not a rank of the node", local_rank,
                 local_size);
  RankLocality l;
  l.local_rank = local_rank;
  l.local_size = local_size;
  l.gpu = use_gpus ? local_rank : -1;
  const std::vector<int> every = all_cpus(m);
  std::vector<int> bound;
  std::set_intersection(m.bound_cpus.begin(), m.bound_cpus.end(), every.begin(), every.end(),
                        std::back_inserter(bound));
  const bool launcher_bound = !bound.empty() && bound.size() < every.size();
  if (local_size == 1) {  // the node's only rank: everything it may use, both sockets' memory bandwidth
    l.cpus = launcher_bound ? bound : every;
    l.numa_node = node_of(m, l.cpus);
    l.cpus_why = launcher_bound ? "the launcher's binding (mpirun --bind-to, taskset)"
                                : "every CPU (the node's only rank)";
    if (launcher_bound)
      l.warning = fmt::format("the launcher bound the node's only rank to {} of its {} CPUs ({}); pass mpirun "
                              "--bind-to none to let it use them all",
                              bound.size(), every.size(), format_cpu_list(bound));
  } else if (local_size == 0) {
    l.cpus = launcher_bound ? bound : every;
    l.numa_node = node_of(m, l.cpus);
    l.cpus_why = launcher_bound ? "the launcher's binding" : "every CPU";
    l.warning = "the launcher does not say how many ranks share this node (OMPI_COMM_WORLD_LOCAL_SIZE, "
                "MPI_LOCALNRANKS or torchrun's LOCAL_WORLD_SIZE), so this rank keeps " + l.cpus_why +
                ", which the node's other ranks may share too; set the variable to give each rank its own cores";
  } else {
    plan_cpus(m, local_rank, local_size, use_gpus, l);
    if (launcher_bound) {
      if (bound.size() < l.cpus.size())
        l.warning = fmt::format("the launcher bound local rank {} to {} CPU{} ({}), fewer than its share of {} ({}: {}); "
                                "pass mpirun --bind-to none (or --map-by numa:PE={}) to give it its share",
                                local_rank, bound.size(), bound.size() == 1 ? "" : "s", format_cpu_list(bound),
                                l.cpus.size(), format_cpu_list(l.cpus), l.cpus_why, l.cpus.size());
      l.cpus = bound;
      l.numa_node = node_of(m, l.cpus);
      l.cpus_why = "the launcher's binding (mpirun --bind-to, taskset)";
    }
  }
  plan_nvme(m, l);
  return l;
}

StatusOr<LocalityMachine> discover_locality_machine(const Topology& topology, const std::vector<std::string>& gpu_bus_ids,
                                                    const std::vector<std::string>& nvme_paths) {
  LocalityMachine m;
  m.cores = topology.core_cpus();
  for (const NumaNode& n : topology.numa_nodes())
    if (!n.cpus.empty()) m.numa_nodes.push_back({n.index, n.cpus});
  for (const std::string& id : gpu_bus_ids) {
    StatusOr<std::string> bus = normalize_pci_bus_id(id);
    const PciGpu* gpu = bus.is_ok() ? topology.pci_gpu(*bus) : nullptr;
    m.gpu_numa_nodes.push_back(gpu ? gpu->numa_node : -1);
  }
  STRATA_ASSIGN_OR_RETURN(m.bound_cpus, current_thread_cpus());
  for (const std::string& p : nvme_paths) {
    StatusOr<PathInfo> info = probe_path(p);
    m.nvme_paths.push_back({p, info.is_ok() ? info->numa_node : -1});
  }
  return m;
}

Status apply_rank_locality(const Topology& topology, const RankLocality& locality) {
  if (locality.cpus.empty()) return error(Code::invalid_argument, "rank locality: no CPUs to bind to");
  std::vector<int> bound;
  STRATA_ASSIGN_OR_RETURN(bound, current_thread_cpus());
  if (bound == locality.cpus) return Status::ok();  // the launcher's binding, or every CPU of an unbound process
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (set == nullptr) return error(Code::out_of_memory, "rank locality: hwloc_bitmap_alloc failed");
  for (int cpu : locality.cpus) hwloc_bitmap_set(set, unsigned(cpu));
  const int rc = hwloc_set_cpubind(topology.hwloc_handle(), set, HWLOC_CPUBIND_PROCESS);
  const int err = errno;
  hwloc_bitmap_free(set);
  if (rc != 0)
    return errno_status(err, fmt::format("binding local rank {} to CPUs {}", locality.local_rank,
                                         format_cpu_list(locality.cpus)));
  return Status::ok();
}

}  // namespace strata
