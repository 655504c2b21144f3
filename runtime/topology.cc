// Topology discovery through hwloc (CPUs, NUMA nodes, caches, PCI GPUs) plus the PCIe link and
// NUMA node of each GPU from /sys/bus/pci/devices, and thread pinning with sched_setaffinity.
// Not a CUDA query: a GPU here is a PCI function, whether or not a driver is loaded.
#include "runtime/topology.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <map>
#include <tuple>
#include <utility>

#include <fmt/ranges.h>
#include <hwloc.h>

#include "runtime/sysfs.h"

namespace strata {
namespace {

constexpr uint16_t kNvidiaVendorId = 0x10de;
constexpr uint16_t kDisplayClass = 0x03;  // PCI base class: display controller (VGA, 3D, ...)

std::string join_ids(const std::vector<int>& ids) { return fmt::format("{}", fmt::join(ids, ",")); }

std::string cache_type_name(hwloc_obj_cache_type_t type) {
  switch (type) {
    case HWLOC_OBJ_CACHE_DATA: return "data";
    case HWLOC_OBJ_CACHE_INSTRUCTION: return "instruction";
    case HWLOC_OBJ_CACHE_UNIFIED: return "unified";
  }
  return "unified";
}

std::string read_cpu_model(hwloc_topology_t topo) {
  hwloc_obj_t pkg = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PACKAGE, nullptr);
  const char* model = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : nullptr;
  if (model && *model) return model;
  return read_proc_field("/proc/cpuinfo", "model name").value_or("unknown CPU");
}

// The NUMA node a PCI function is attached to: sysfs first, else hwloc's locality when it names
// exactly one node (always so on a one-node machine); -1 when unknown.
int gpu_numa_node(hwloc_topology_t topo, hwloc_obj_t pcidev, const std::string& sysfs_dir) {
  auto node = read_sysfs_int(sysfs_dir + "/numa_node");
  if (node && *node >= 0) return static_cast<int>(*node);
  hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(topo, pcidev);
  if (ancestor && ancestor->nodeset && hwloc_bitmap_weight(ancestor->nodeset) == 1)
    return hwloc_bitmap_first(ancestor->nodeset);
  return -1;
}

int read_link_gen(const std::string& file) {
  auto speed = read_sysfs_line(file);
  return speed ? pcie_generation_from_link_speed(*speed) : 0;
}

int read_link_width(const std::string& file) {
  auto width = read_sysfs_int(file);
  return width && *width > 0 ? static_cast<int>(*width) : 0;
}

std::vector<PciGpu> find_pci_gpus(hwloc_topology_t topo) {
  std::vector<PciGpu> gpus;
  for (hwloc_obj_t obj = hwloc_get_next_pcidev(topo, nullptr); obj; obj = hwloc_get_next_pcidev(topo, obj)) {
    const auto& pci = obj->attr->pcidev;
    if (pci.vendor_id != kNvidiaVendorId || (pci.class_id >> 8) != kDisplayClass) continue;
    PciGpu gpu;
    gpu.pci_bus_id = fmt::format("{:04x}:{:02x}:{:02x}.{:x}", static_cast<unsigned>(pci.domain), unsigned{pci.bus},
                                 unsigned{pci.dev}, unsigned{pci.func});
    gpu.vendor_id = pci.vendor_id;
    gpu.device_id = pci.device_id;
    const std::string dir = "/sys/bus/pci/devices/" + gpu.pci_bus_id;
    gpu.numa_node = gpu_numa_node(topo, obj, dir);
    gpu.link_gen = read_link_gen(dir + "/current_link_speed");
    gpu.link_width = read_link_width(dir + "/current_link_width");
    gpu.max_link_gen = read_link_gen(dir + "/max_link_speed");
    gpu.max_link_width = read_link_width(dir + "/max_link_width");
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

std::vector<CacheLevel> find_caches(hwloc_topology_t topo) {
  // (level, type, size, cores sharing) -> instances; heterogeneous CPUs give several rows per level.
  std::map<std::tuple<int, std::string, uint64_t, int>, int> groups;
  for (hwloc_obj_type_t type = HWLOC_OBJ_L1CACHE; type <= HWLOC_OBJ_L3ICACHE;
       type = static_cast<hwloc_obj_type_t>(type + 1)) {
    if (!hwloc_obj_type_is_cache(type)) continue;
    for (hwloc_obj_t obj = hwloc_get_next_obj_by_type(topo, type, nullptr); obj;
         obj = hwloc_get_next_obj_by_type(topo, type, obj)) {
      int sharing = hwloc_get_nbobjs_inside_cpuset_by_type(topo, obj->cpuset, HWLOC_OBJ_CORE);
      ++groups[{static_cast<int>(obj->attr->cache.depth), cache_type_name(obj->attr->cache.type),
                obj->attr->cache.size, std::max(sharing, 1)}];
    }
  }
  std::vector<CacheLevel> caches;
  for (const auto& [key, count] : groups) {
    const auto& [level, type, size, sharing] = key;
    caches.push_back(CacheLevel{level, type, size, count, sharing});
  }
  return caches;
}

}  // namespace

uint64_t online_memory_block_bytes(const std::string& system_dir, int node) {
  const std::optional<std::string> size_text = read_sysfs_line(system_dir + "/memory/block_size_bytes");
  if (!size_text) return 0;
  uint64_t block = 0;
  const auto [end, ec] = std::from_chars(size_text->data(), size_text->data() + size_text->size(), block, 16);
  if (ec != std::errc() || end != size_text->data() + size_text->size() || block == 0) return 0;
  std::error_code err;
  std::filesystem::directory_iterator it(fmt::format("{}/node/node{}", system_dir, node), err);
  if (err) return 0;
  uint64_t blocks = 0;
  for (const std::filesystem::directory_entry& e : it) {
    const std::string name = e.path().filename().string();
    if (name.size() <= 6 || name.compare(0, 6, "memory") != 0 ||
        name.find_first_not_of("0123456789", 6) != std::string::npos)
      continue;
    if (read_sysfs_line(e.path().string() + "/online") == "1") ++blocks;
  }
  return blocks * block;
}

int pcie_generation_from_link_speed(std::string_view speed) {
  double gts = 0;
  if (std::sscanf(std::string(speed).c_str(), "%lf", &gts) != 1) return 0;
  struct Rate {
    double gts;
    int gen;
  };
  constexpr Rate kRates[] = {{2.5, 1}, {5.0, 2}, {8.0, 3}, {16.0, 4}, {32.0, 5}, {64.0, 6}};
  for (const Rate& r : kRates)
    if (gts > r.gts * 0.9 && gts < r.gts * 1.1) return r.gen;
  return 0;
}

StatusOr<std::string> normalize_pci_bus_id(std::string_view text) {
  // [domain:]bus:device.function, each field plain hex digits of bounded length.
  auto hex_field = [](std::string_view f, size_t max_digits, unsigned max_value, unsigned* out) {
    if (f.empty() || f.size() > max_digits) return false;
    auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), *out, 16);
    return ec == std::errc() && ptr == f.data() + f.size() && *out <= max_value;
  };
  unsigned domain = 0, bus = 0, dev = 0, func = 0;
  std::string_view rest = text;
  size_t last_colon = rest.rfind(':');
  size_t dot = rest.rfind('.');
  bool ok = last_colon != std::string_view::npos && dot != std::string_view::npos && dot > last_colon;
  if (ok) {
    std::string_view head = rest.substr(0, last_colon);
    size_t first_colon = head.find(':');
    std::string_view bus_text = head;
    if (first_colon != std::string_view::npos) {
      ok = hex_field(head.substr(0, first_colon), 8, 0xffff, &domain);
      bus_text = head.substr(first_colon + 1);
    }
    ok = ok && hex_field(bus_text, 2, 0xff, &bus) &&
         hex_field(rest.substr(last_colon + 1, dot - last_colon - 1), 2, 0x1f, &dev) &&
         hex_field(rest.substr(dot + 1), 1, 7, &func);
  }
  if (!ok)
    return error(Code::invalid_argument,
                 "'{}' is not a PCI bus id; expected domain:bus:device.function such as 0000:17:00.0", text);
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, bus, dev, func);
}

Status pin_current_thread_to_cpus(const std::vector<int>& cpus) {
  if (cpus.empty()) return error(Code::invalid_argument, "cannot pin a thread to an empty set of CPUs");
  int max_cpu = *std::max_element(cpus.begin(), cpus.end());
  if (*std::min_element(cpus.begin(), cpus.end()) < 0)
    return error(Code::invalid_argument, "cannot pin a thread to CPUs [{}]: ids must be >= 0", join_ids(cpus));
  const int count = max_cpu + 1;
  cpu_set_t* set = CPU_ALLOC(count);
  if (!set) return errno_status(ENOMEM, "allocating a CPU set");
  const size_t bytes = CPU_ALLOC_SIZE(count);
  CPU_ZERO_S(bytes, set);
  for (int cpu : cpus) CPU_SET_S(cpu, bytes, set);
  int rc = sched_setaffinity(0, bytes, set);
  int err = errno;
  CPU_FREE(set);
  if (rc != 0) return errno_status(err, fmt::format("pinning this thread to CPUs [{}]", join_ids(cpus)));
  return Status::ok();
}

StatusOr<std::vector<int>> current_thread_cpus() {
  for (int count = CPU_SETSIZE;; count *= 2) {
    cpu_set_t* set = CPU_ALLOC(count);
    if (!set) return errno_status(ENOMEM, "allocating a CPU set");
    const size_t bytes = CPU_ALLOC_SIZE(count);
    int rc = sched_getaffinity(0, bytes, set);
    int err = errno;
    std::vector<int> cpus;
    if (rc == 0)
      for (int cpu = 0; cpu < count; ++cpu)
        if (CPU_ISSET_S(cpu, bytes, set)) cpus.push_back(cpu);
    CPU_FREE(set);
    if (rc == 0) return cpus;
    if (err != EINVAL || count >= (1 << 20)) return errno_status(err, "reading this thread's CPU affinity");
  }
}

namespace {

// Topology::core_cpus: each core's CPUs among `cpus`, a core of its own for a CPU no core holds.
std::vector<std::vector<int>> find_core_cpus(hwloc_topology_t topo, const std::vector<int>& cpus) {
  std::vector<std::vector<int>> cores;
  std::vector<bool> placed(cpus.size(), false);
  for (hwloc_obj_t core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, nullptr); core;
       core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, core)) {
    std::vector<int> mine;
    for (size_t i = 0; i < cpus.size(); ++i)
      if (hwloc_bitmap_isset(core->cpuset, static_cast<unsigned>(cpus[i]))) {
        mine.push_back(cpus[i]);
        placed[i] = true;
      }
    if (!mine.empty()) cores.push_back(std::move(mine));
  }
  for (size_t i = 0; i < cpus.size(); ++i)
    if (!placed[i]) cores.push_back({cpus[i]});
  std::sort(cores.begin(), cores.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return cores;
}

}  // namespace

StatusOr<Topology> Topology::discover() {
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) return errno_status(errno, "hwloc_topology_init");
  Topology t;
  t.topo_ = topo;  // owned from here on: destroyed with `t` on every return below
#if HWLOC_API_VERSION >= 0x00020100
  // PCI devices come from the linux component's walk of /sys/bus/pci (ids, class, locality: all
  // find_pci_gpus reads), not from the `pci` plugin (libhwloc-plugins, which Open MPI's packages
  // pull in). That plugin adds only vendor and device names, which libpciaccess looks up into a
  // pci.ids tree it never frees; hwloc unloads the plugin, and libpciaccess with it, when the last
  // topology is destroyed, so the tree (~1 KB here) is lost on every load: a real leak, reported
  // by LeakSanitizer in every process that discovers the topology. Where the plugin is not
  // installed the call fails (EINVAL: no such component) and there is nothing to keep out.
  (void)hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
#endif
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  hwloc_topology_set_icache_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (hwloc_topology_load(topo) != 0)
    return Status(Code::internal, fmt::format("hwloc could not load this machine's topology (errno {}); "
                                              "check that /sys and /proc are mounted", errno));

  t.cpu_model_ = read_cpu_model(topo);
  t.packages_ = std::max(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE), 1);
  for (hwloc_obj_t pu = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PU, nullptr); pu;
       pu = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PU, pu))
    t.cpus_.push_back(static_cast<int>(pu->os_index));
  std::sort(t.cpus_.begin(), t.cpus_.end());
  int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  t.physical_cores_ = cores > 0 ? cores : static_cast<int>(t.cpus_.size());
  t.core_cpus_ = find_core_cpus(topo, t.cpus_);
  // RAM as the OS counts it (MemTotal). Some VMs report less in the per-node meminfo hwloc reads
  // (hot-plugged memory), so the nodes' local memory may sum to less than this.
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  t.total_memory_bytes_ = std::max<uint64_t>(hwloc_get_root_obj(topo)->total_memory,
                                             pages > 0 && page_size > 0 ? uint64_t(pages) * uint64_t(page_size) : 0);

  for (hwloc_obj_t node = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, nullptr); node;
       node = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, node)) {
    NumaNode n;
    n.index = static_cast<int>(node->os_index);
    n.local_memory_bytes = node->attr->numanode.local_memory;
    n.online_block_bytes = online_memory_block_bytes("/sys/devices/system", n.index);
    for (int cpu : t.cpus_)
      if (hwloc_bitmap_isset(node->cpuset, static_cast<unsigned>(cpu))) n.cpus.push_back(cpu);
    t.numa_nodes_.push_back(std::move(n));
  }
  std::sort(t.numa_nodes_.begin(), t.numa_nodes_.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.index < b.index; });
  t.caches_ = find_caches(topo);
  t.pci_gpus_ = find_pci_gpus(topo);
  return t;
}

Topology::Topology(Topology&& other) noexcept { *this = std::move(other); }

Topology& Topology::operator=(Topology&& other) noexcept {
  if (this == &other) return *this;
  if (topo_) hwloc_topology_destroy(topo_);
  topo_ = std::exchange(other.topo_, nullptr);
  cpu_model_ = std::move(other.cpu_model_);
  packages_ = other.packages_;
  physical_cores_ = other.physical_cores_;
  cpus_ = std::move(other.cpus_);
  core_cpus_ = std::move(other.core_cpus_);
  total_memory_bytes_ = other.total_memory_bytes_;
  numa_nodes_ = std::move(other.numa_nodes_);
  caches_ = std::move(other.caches_);
  pci_gpus_ = std::move(other.pci_gpus_);
  return *this;
}

Topology::~Topology() {
  if (topo_) hwloc_topology_destroy(topo_);
}

const NumaNode* Topology::numa_node(int index) const {
  for (const NumaNode& n : numa_nodes_)
    if (n.index == index) return &n;
  return nullptr;
}

const PciGpu* Topology::pci_gpu(std::string_view pci_bus_id) const {
  auto id = normalize_pci_bus_id(pci_bus_id);
  if (!id.is_ok()) return nullptr;
  for (const PciGpu& g : pci_gpus_)
    if (g.pci_bus_id == *id) return &g;
  return nullptr;
}

StatusOr<std::vector<int>> Topology::cpus_near_gpu(std::string_view pci_bus_id) const {
  STRATA_ASSIGN_OR_RETURN(std::string id, normalize_pci_bus_id(pci_bus_id));
  const PciGpu* gpu = pci_gpu(id);
  if (!gpu) {
    std::vector<std::string> known;
    for (const PciGpu& g : pci_gpus_) known.push_back(g.pci_bus_id);
    return error(Code::not_found, "no NVIDIA GPU at PCI bus id {} (GPUs on the PCI bus: {})", id,
                 known.empty() ? std::string("none") : fmt::format("{}", fmt::join(known, ", ")));
  }
  const NumaNode* node = numa_node(gpu->numa_node);
  if (!node || node->cpus.empty()) return cpus_;
  return node->cpus;
}

Status Topology::pin_current_thread_to_core(int cpu) const {
  if (!std::binary_search(cpus_.begin(), cpus_.end(), cpu))
    return error(Code::invalid_argument, "cannot pin to CPU {}: this process may use CPUs [{}]", cpu,
                 join_ids(cpus_));
  return pin_current_thread_to_cpus({cpu});
}

Status Topology::pin_current_thread_to_numa_node(int node) const {
  const NumaNode* n = numa_node(node);
  if (!n) {
    std::vector<int> known;
    for (const NumaNode& k : numa_nodes_) known.push_back(k.index);
    return error(Code::invalid_argument, "cannot pin to NUMA node {}: this machine has nodes [{}]", node,
                 join_ids(known));
  }
  if (n->cpus.empty())
    return error(Code::invalid_argument, "cannot pin to NUMA node {}: it has memory but no CPUs this "
                 "process may use", node);
  return pin_current_thread_to_cpus(n->cpus);
}

Status Topology::pin_current_thread_near_gpu(const std::string& pci_bus_id) const {
  STRATA_ASSIGN_OR_RETURN(std::vector<int> cpus, cpus_near_gpu(pci_bus_id));
  return pin_current_thread_to_cpus(cpus);
}

}  // namespace strata
