// `strata bench pcie` (see pcie_bench.h): the backend's chunk copies and a plain peer, point by
// point on the same buffers, per NUMA placement and host memory kind.
#include "bench/pcie_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/pinned_pool.h"
#include "runtime/topology.h"
#include "runtime/units.h"

namespace strata::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

uint64_t round_up_4k(uint64_t n) { return (n + 4095) / 4096 * 4096; }

// MemAvailable from /proc/meminfo in bytes; 0 when unreadable.
uint64_t available_memory() {
  uint64_t kib = 0;
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      unsigned long long v = 0;
      if (std::sscanf(line, "MemAvailable: %llu kB", &v) == 1) kib = v;
    }
    std::fclose(f);
  }
  return kib * 1024;
}

// A page-aligned block of ordinary (pageable) memory, touched by the allocating thread so its
// pages live on that thread's NUMA node.
class PageableBlock {
 public:
  static StatusOr<PageableBlock> create(uint64_t bytes) {
    PageableBlock b;
    b.size_ = round_up_4k(bytes);
    b.data_ = static_cast<std::byte*>(std::aligned_alloc(4096, b.size_));
    if (b.data_ == nullptr)
      return error(Code::out_of_memory, "bench pcie: {} of pageable memory", format_size(b.size_));
    std::memset(b.data_, 0, b.size_);
    return b;
  }
  PageableBlock() = default;
  PageableBlock(PageableBlock&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(o.size_) {}
  PageableBlock& operator=(PageableBlock&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~PageableBlock() { std::free(data_); }
  std::byte* data() const { return data_; }

 private:
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

// The host side of one (placement, memory kind): a source and a destination block.
struct HostBuffers {
  std::unique_ptr<PinnedPool> pool;
  PinnedBuffer pinned_src, pinned_dst;
  PageableBlock pageable_src, pageable_dst;
  std::byte* src = nullptr;
  std::byte* dst = nullptr;
};

StatusOr<HostBuffers> make_host_buffers(HostMemory memory, uint64_t bytes, bool cuda, std::string* pinned_kind) {
  HostBuffers h;
  if (memory == HostMemory::pinned) {
    STRATA_ASSIGN_OR_RETURN(h.pool, PinnedPool::create(PinnedPoolOptions{.slab_bytes = round_up_4k(bytes),
                                                                         .allow_cuda = cuda}));
    STRATA_ASSIGN_OR_RETURN(h.pinned_src, h.pool->acquire(bytes));
    STRATA_ASSIGN_OR_RETURN(h.pinned_dst, h.pool->acquire(bytes));
    h.src = h.pinned_src.data();
    h.dst = h.pinned_dst.data();
    std::memset(h.dst, 0, bytes);
    *pinned_kind = std::string(pinned_kind_name(h.pool->kind()));
  } else {
    STRATA_ASSIGN_OR_RETURN(h.pageable_src, PageableBlock::create(bytes));
    STRATA_ASSIGN_OR_RETURN(h.pageable_dst, PageableBlock::create(bytes));
    h.src = h.pageable_src.data();
    h.dst = h.pageable_dst.data();
  }
  for (uint64_t i = 0; i + 8 <= bytes; i += 8) {  // a pattern a misplaced copy cannot reproduce
    const uint64_t v = i * 0x9e3779b97f4a7c15ull + 1;
    std::memcpy(h.src + i, &v, 8);
  }
  return h;
}

// The device side: two blocks of the backend's memory, a copy source and a destination.
struct DeviceBuffers {
  void* dst = nullptr;  // h2d destination
  void* src = nullptr;  // d2h source
};

// Round trip host.src -> device.dst -> host.dst through the backend, compared byte for byte; then
// device.src gets the same data (so d2h copies move real bytes).
Status check_round_trip(Backend& be, const HostBuffers& h, const DeviceBuffers& d, uint64_t bytes) {
  STRATA_RETURN_IF_ERROR(be.copy_to_device(d.dst, h.src, bytes, Stream::h2d));
  STRATA_RETURN_IF_ERROR(be.copy_to_device(d.src, h.src, bytes, Stream::h2d));
  STRATA_RETURN_IF_ERROR(be.synchronize(Stream::h2d));
  STRATA_RETURN_IF_ERROR(be.copy_to_host(h.dst, d.dst, bytes, Stream::d2h));
  STRATA_RETURN_IF_ERROR(be.synchronize(Stream::d2h));
  if (std::memcmp(h.src, h.dst, bytes) != 0)
    return error(Code::internal, "bench pcie: a {} round trip through the {} backend came back different",
                 format_size(bytes), backend_kind_name(be.kind()));
  std::memset(h.dst, 0, bytes);
  return Status::ok();
}

// One timed run of strata's chunk path: `count` copies per direction on the h2d / d2h streams,
// an event recorded after each (as the trainer marks each chunk), the host waiting on the last.
StatusOr<double> strata_run(Backend& be, Event& h2d_done, Event& d2h_done, CopyDirection dir, const HostBuffers& h,
                            const DeviceBuffers& d, uint64_t bytes, int count) {
  const bool h2d = dir != CopyDirection::d2h, d2h = dir != CopyDirection::h2d;
  STRATA_RETURN_IF_ERROR(be.synchronize_all());
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < count; i++) {
    if (h2d) {
      STRATA_RETURN_IF_ERROR(be.copy_to_device(d.dst, h.src, bytes, Stream::h2d));
      STRATA_RETURN_IF_ERROR(be.record(h2d_done, Stream::h2d));
    }
    if (d2h) {
      STRATA_RETURN_IF_ERROR(be.copy_to_host(h.dst, d.src, bytes, Stream::d2h));
      STRATA_RETURN_IF_ERROR(be.record(d2h_done, Stream::d2h));
    }
  }
  if (h2d) STRATA_RETURN_IF_ERROR(be.synchronize(h2d_done));
  if (d2h) STRATA_RETURN_IF_ERROR(be.synchronize(d2h_done));
  return seconds_since(t0);
}

// The CPU backend's peer: memcpy on the calling thread (`both`: d2h on a second thread, started
// inside the timed region like a copy stream's work).
double plain_memcpy_run(CopyDirection dir, const HostBuffers& h, const DeviceBuffers& d, uint64_t bytes, int count) {
  const Clock::time_point t0 = Clock::now();
  auto h2d = [&] {
    for (int i = 0; i < count; i++) std::memcpy(d.dst, h.src, bytes);
  };
  auto d2h = [&] {
    for (int i = 0; i < count; i++) std::memcpy(h.dst, d.src, bytes);
  };
  if (dir == CopyDirection::h2d) {
    h2d();
  } else if (dir == CopyDirection::d2h) {
    d2h();
  } else {
    std::thread other(d2h);
    h2d();
    other.join();
  }
  return seconds_since(t0);
}

// Restores the calling thread's CPU affinity when it goes out of scope.
class AffinityGuard {
 public:
  explicit AffinityGuard(std::vector<int> cpus) : cpus_(std::move(cpus)) {}
  ~AffinityGuard() {
    if (!cpus_.empty()) (void)pin_current_thread_to_cpus(cpus_);
  }

 private:
  std::vector<int> cpus_;
};

int node_of_cpu(const Topology& topo, int cpu) {
  for (const NumaNode& n : topo.numa_nodes())
    if (std::find(n.cpus.begin(), n.cpus.end(), cpu) != n.cpus.end()) return n.index;
  return topo.numa_nodes().empty() ? -1 : topo.numa_nodes().front().index;
}

struct Placement {
  int node = -1;
  bool near = true;
};

std::string point_name(const Placement& p, HostMemory m, CopyDirection dir, uint64_t bytes) {
  return fmt::format("node {} ({}) {} {} {}", p.node, p.near ? "near" : "far", host_memory_name(m),
                     copy_direction_name(dir), format_size(bytes));
}

}  // namespace

std::string_view host_memory_name(HostMemory memory) { return memory == HostMemory::pinned ? "pinned" : "pageable"; }

double pcie_link_gbps(int gen, int width) {
  static constexpr double kGtPerLane[] = {2.5, 5, 8, 16, 32, 64};
  if (gen < 1 || gen > 6 || width <= 0) return 0;
  const double encoding = gen <= 2 ? 8.0 / 10.0 : gen <= 5 ? 128.0 / 130.0 : 242.0 / 256.0;
  return kGtPerLane[gen - 1] * encoding * width / 8.0;
}

StatusOr<PcieBenchReport> run_pcie_bench(const PcieBenchOptions& o) {
  if (o.repeat < 1) return error(Code::invalid_argument, "--repeat must be >= 1 (got {})", o.repeat);
  if (o.warmup < 0) return error(Code::invalid_argument, "--warmup must be >= 0 (got {})", o.warmup);
  if (o.sizes.empty() || o.directions.empty() || o.memory.empty())
    return Status(Code::invalid_argument, "bench pcie needs at least one size, direction and memory kind");
  for (uint64_t s : o.sizes)
    if (s < 4096 || s > (64ull << 30))
      return error(Code::invalid_argument, "--sizes {}: transfer sizes must be in [4 KiB, 64 GiB]", format_size(s));
  const bool cuda = o.backend == BackendKind::cuda;

  PcieBenchReport r;
  r.backend = std::string(backend_kind_name(o.backend));
  r.repeat = o.repeat;
  r.strata_path = "Backend::copy_to_device / copy_to_host on the h2d / d2h streams, an event recorded per chunk";
  STRATA_ASSIGN_OR_RETURN(Topology topo, Topology::discover());

  uint64_t device_memory = 0;
  const PciGpu* gpu = nullptr;
  if (cuda) {
    std::string why;
    std::vector<DeviceDescription> devices = list_cuda_devices(&why);
    if (devices.empty()) return error(Code::unavailable, "bench pcie --device cuda: {}", why);
    if (o.device_index < 0 || o.device_index >= static_cast<int>(devices.size()))
      return error(Code::invalid_argument, "--gpu-index {}: this machine has {} CUDA device(s)", o.device_index,
                   devices.size());
    r.device = devices[o.device_index].name;
    r.pci_bus_id = devices[o.device_index].pci_bus_id;
    device_memory = devices[o.device_index].total_memory;
    gpu = topo.pci_gpu(r.pci_bus_id);
    r.what = "host<->device copies over PCIe";
    r.plain_path = o.plain ? "cudaMemcpyAsync on streams of its own, same buffers" : "not run (--no-plain)";
    if (gpu == nullptr)
      r.link_note = fmt::format("the GPU at {} is not on hwloc's PCI list; no link rate", r.pci_bus_id);
  } else {
    r.device = "CPU (host memory)";
    r.what =
        "CPU backend: no PCIe link; its \"device\" memory is host memory, so these are memcpy rates between host "
        "blocks (pinned or pageable) and the backend's arena by its copy threads (the h2d/d2h streams) -- the "
        "transfer figures the planner uses on this backend";
    r.plain_path = o.plain ? "memcpy on the calling thread (both: two threads)" : "not run (--no-plain)";
    r.link_note = "CPU backend: no PCIe link";
  }

  // Placements: the GPU's node (CPU backend: the first allowed CPU's node), and another with CPUs.
  int near = -1;
  if (gpu != nullptr && gpu->numa_node >= 0 && topo.numa_node(gpu->numa_node) != nullptr &&
      !topo.numa_node(gpu->numa_node)->cpus.empty())
    near = gpu->numa_node;
  if (near < 0) near = node_of_cpu(topo, topo.cpus().front());
  r.gpu_numa_node = gpu != nullptr ? gpu->numa_node : -1;
  int far = -1;
  for (const NumaNode& n : topo.numa_nodes())
    if (n.index != near && !n.cpus.empty() && far < 0) far = n.index;
  std::vector<Placement> placements;
  if (o.numa != NumaPlacement::far) placements.push_back({near, true});
  if (o.numa != NumaPlacement::near && far >= 0) placements.push_back({far, false});
  if (far < 0) {
    if (o.numa == NumaPlacement::far)
      return Status(Code::invalid_argument, "--numa far: this machine has one NUMA node with CPUs");
    r.numa_note = fmt::format("one NUMA node (node {}): no cross-node figures", near);
  } else {
    const std::string why_near = !cuda ? "the first CPU's node"
                                 : r.gpu_numa_node >= 0 ? "the GPU's node"
                                                        : "the GPU's node is unknown: the first CPU's node";
    r.numa_note = fmt::format("{} NUMA nodes; near = node {} ({}), far = node {}", topo.numa_nodes().size(), near,
                              why_near, far);
  }

  // Sizes that fit: per placement two device blocks (host memory too on the CPU backend) and two
  // host blocks per memory kind.
  std::vector<uint64_t> sizes = o.sizes;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const uint64_t avail = available_memory();
  std::vector<uint64_t> kept;
  for (uint64_t s : sizes) {
    const uint64_t host_need = 2 * round_up_4k(s) * (o.memory.size() + (cuda ? 0 : 1));
    const uint64_t dev_need = 2 * round_up_4k(s);
    if (avail > 0 && static_cast<double>(host_need) > o.max_memory_fraction * static_cast<double>(avail)) {
      r.notes.push_back(fmt::format("{} left out: its buffers need {} of host memory, {} available", format_size(s),
                                    format_size(host_need), format_size(avail)));
    } else if (cuda && static_cast<double>(dev_need) > o.max_memory_fraction * static_cast<double>(device_memory)) {
      r.notes.push_back(fmt::format("{} left out: needs {} of the GPU's {}", format_size(s), format_size(dev_need),
                                    format_size(device_memory)));
    } else {
      kept.push_back(s);
    }
  }
  if (kept.empty())
    return error(Code::invalid_argument, "bench pcie: no transfer size fits in memory ({}); pass smaller --sizes",
                 r.notes.front());
  const uint64_t max_bytes = round_up_4k(kept.back());

  const size_t total = placements.size() * o.memory.size() * kept.size() * o.directions.size();
  size_t done = 0;
  STRATA_ASSIGN_OR_RETURN(std::vector<int> original_cpus, current_thread_cpus());
  AffinityGuard restore(original_cpus);
  for (const Placement& pl : placements) {
    // Pinned first, then the backend: its copy threads (CPU backend) inherit this affinity, and
    // every host block is first touched here.
    STRATA_RETURN_IF_ERROR(topo.pin_current_thread_to_numa_node(pl.node));
    BackendOptions bo;
    bo.kind = o.backend;
    bo.device_index = o.device_index;
    bo.memory_budget = 2 * max_bytes + (4ull << 20);
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, make_backend(bo));
    DeviceBuffers d;
    STRATA_ASSIGN_OR_RETURN(d.dst, be->allocate(max_bytes, "bench pcie h2d destination"));
    STRATA_ASSIGN_OR_RETURN(d.src, be->allocate(max_bytes, "bench pcie d2h source"));
    std::unique_ptr<Event> h2d_done = be->create_event(), d2h_done = be->create_event();
    for (HostMemory mem : o.memory) {
      STRATA_ASSIGN_OR_RETURN(HostBuffers h, make_host_buffers(mem, max_bytes, cuda, &r.pinned_kind));
      STRATA_RETURN_IF_ERROR(check_round_trip(*be, h, d, max_bytes));
      for (uint64_t bytes : kept) {
        for (CopyDirection dir : o.directions) {
          const std::string what = point_name(pl, mem, dir, bytes);
          if (o.progress) o.progress(done, total, what);
          PciePoint p;
          p.numa_node = pl.node;
          p.near = pl.near;
          p.memory = mem;
          p.direction = dir;
          p.bytes = bytes;
          p.copies_per_run = static_cast<int>(
              std::clamp<uint64_t>((o.min_bytes_per_run + bytes - 1) / bytes, 1, 4096));
          const double moved = static_cast<double>(bytes) * p.copies_per_run * (dir == CopyDirection::both ? 2 : 1);
          std::vector<double> ours, theirs;
          for (int run = -o.warmup; run < o.repeat; run++) {  // strata and the peer take turns
            StatusOr<double> s = strata_run(*be, *h2d_done, *d2h_done, dir, h, d, bytes, p.copies_per_run);
            if (!s.is_ok()) return s.status().with_context("bench pcie: " + what);
            if (run >= 0) ours.push_back(moved / *s / 1e9);
            if (!o.plain) continue;
            double t = 0;
            if (cuda) {
              StatusOr<double> c = time_plain_cuda_copies(o.device_index, dir, {d.dst, h.src, h.dst, d.src}, bytes,
                                                          p.copies_per_run);
              if (!c.is_ok()) return c.status().with_context("bench pcie: plain peer, " + what);
              t = *c;
            } else {
              t = plain_memcpy_run(dir, h, d, bytes, p.copies_per_run);
            }
            if (run >= 0) theirs.push_back(moved / t / 1e9);
          }
          p.strata_gbps = spread(ours);
          if (!theirs.empty()) p.plain_gbps = spread(theirs);
          r.points.push_back(p);
          done++;
        }
      }
    }
    STRATA_RETURN_IF_ERROR(be->synchronize_all());
  }
  if (o.progress) o.progress(done, total, "done");

  // The link as trained: read again now (GPUs drop to a lower generation when idle), keeping the
  // faster of the two readings.
  if (gpu != nullptr) {
    PcieLink link{gpu->link_gen, gpu->link_width, gpu->max_link_gen, gpu->max_link_width, 0};
    if (StatusOr<Topology> again = Topology::discover(); again.is_ok())
      if (const PciGpu* g = again->pci_gpu(r.pci_bus_id)) {
        link.gen = std::max(link.gen, g->link_gen);
        link.width = std::max(link.width, g->link_width);
      }
    link.gbps = pcie_link_gbps(link.gen, link.width);
    if (link.gbps > 0) {
      r.link = link;
      for (PciePoint& p : r.points)
        p.link_fraction = p.strata_gbps.median / (link.gbps * (p.direction == CopyDirection::both ? 2 : 1));
    } else {
      r.link_note = fmt::format("PCIe generation/width unknown (sysfs gave Gen{} x{}); no link rate", link.gen,
                                link.width);
    }
  }
  return r;
}

std::string pcie_bench_table(const PcieBenchReport& r) {
  std::string out = fmt::format("bench pcie: {} backend, {}{}\n", r.backend, r.device,
                                r.pci_bus_id.empty() ? "" : " at " + r.pci_bus_id);
  out += fmt::format("what: {}\n", r.what);
  out += fmt::format("strata: {}\npeer:   {}\n", r.strata_path, r.plain_path);
  if (r.link)
    out += fmt::format("link:   PCIe Gen{} x{} (max Gen{} x{}): {:.1f} GB/s per direction theoretical\n", r.link->gen,
                       r.link->width, r.link->max_gen, r.link->max_width, r.link->gbps);
  else
    out += fmt::format("link:   {}\n", r.link_note);
  out += fmt::format("NUMA:   {}\n", r.numa_note);
  if (!r.pinned_kind.empty()) out += fmt::format("pinned: host blocks from the pinned pool as {}\n", r.pinned_kind);
  for (const std::string& n : r.notes) out += fmt::format("note:   {}\n", n);
  out += fmt::format("GB/s are 1e9 B/s, the median of {} runs (min-max); `both` sums the two directions.\n", r.repeat);
  out += fmt::format("{:<10} {:<8} {:<4} {:>9} {:>6} | {:>8} {:>17} | {:>8} {:>17} | {:>7} | {:>6}\n", "node", "memory",
                     "dir", "size", "copies", "strata", "min-max", "peer", "min-max", "vs peer", "link");
  for (const PciePoint& p : r.points) {
    out += fmt::format("{:<10} {:<8} {:<4} {:>9} {:>6} | {:>8.2f} {:>17} |",
                       fmt::format("{} ({})", p.numa_node, p.near ? "near" : "far"), host_memory_name(p.memory),
                       copy_direction_name(p.direction), format_size(p.bytes), p.copies_per_run, p.strata_gbps.median,
                       fmt::format("{:.2f}-{:.2f}", p.strata_gbps.min, p.strata_gbps.max));
    if (p.plain_gbps)
      out += fmt::format(" {:>8.2f} {:>17} | {:>6.1f}% |", p.plain_gbps->median,
                         fmt::format("{:.2f}-{:.2f}", p.plain_gbps->min, p.plain_gbps->max),
                         100.0 * p.strata_gbps.median / p.plain_gbps->median);
    else
      out += fmt::format(" {:>8} {:>17} | {:>7} |", "-", "-", "-");
    out += p.link_fraction ? fmt::format(" {:>5.1f}%\n", 100.0 * *p.link_fraction) : fmt::format(" {:>6}\n", "-");
  }
  return out;
}

std::string pcie_bench_csv(const PcieBenchReport& r) {
  std::string out =
      "node,near,memory,direction,bytes,copies_per_run,strata_gbps,strata_min_gbps,strata_max_gbps,plain_gbps,"
      "plain_min_gbps,plain_max_gbps,link_fraction\n";
  for (const PciePoint& p : r.points) {
    out += fmt::format("{},{},{},{},{},{},{:.4f},{:.4f},{:.4f}", p.numa_node, p.near ? 1 : 0,
                       host_memory_name(p.memory), copy_direction_name(p.direction), p.bytes, p.copies_per_run,
                       p.strata_gbps.median, p.strata_gbps.min, p.strata_gbps.max);
    out += p.plain_gbps
               ? fmt::format(",{:.4f},{:.4f},{:.4f}", p.plain_gbps->median, p.plain_gbps->min, p.plain_gbps->max)
               : std::string(",,,");
    out += p.link_fraction ? fmt::format(",{:.4f}\n", *p.link_fraction) : std::string(",\n");
  }
  return out;
}

std::string pcie_bench_json(const PcieBenchReport& r) {
  nlohmann::json j;
  j["backend"] = r.backend;
  j["device"] = r.device;
  j["pci_bus_id"] = r.pci_bus_id;
  j["what"] = r.what;
  j["strata_path"] = r.strata_path;
  j["plain_path"] = r.plain_path;
  if (r.link)
    j["link"] = {{"gen", r.link->gen}, {"width", r.link->width}, {"max_gen", r.link->max_gen},
                 {"max_width", r.link->max_width}, {"gbps", r.link->gbps}};
  else
    j["link"] = nullptr;
  j["link_note"] = r.link_note;
  j["gpu_numa_node"] = r.gpu_numa_node;
  j["numa_note"] = r.numa_note;
  j["pinned_kind"] = r.pinned_kind;
  j["notes"] = r.notes;
  j["repeat"] = r.repeat;
  j["points"] = nlohmann::json::array();
  for (const PciePoint& p : r.points) {
    nlohmann::json q{{"numa_node", p.numa_node},
                     {"near", p.near},
                     {"memory", host_memory_name(p.memory)},
                     {"direction", copy_direction_name(p.direction)},
                     {"bytes", p.bytes},
                     {"copies_per_run", p.copies_per_run},
                     {"strata_gbps", p.strata_gbps.median},
                     {"strata_min_gbps", p.strata_gbps.min},
                     {"strata_max_gbps", p.strata_gbps.max}};
    if (p.plain_gbps) {
      q["plain_gbps"] = p.plain_gbps->median;
      q["plain_min_gbps"] = p.plain_gbps->min;
      q["plain_max_gbps"] = p.plain_gbps->max;
      q["strata_vs_plain"] = p.strata_gbps.median / p.plain_gbps->median;
    }
    if (p.link_fraction) q["link_fraction"] = *p.link_fraction;
    j["points"].push_back(q);
  }
  return j.dump(2);
}

Status pcie_bench_plot(const std::string& csv_path, const std::string& png_path) {
  // One line per (node, memory, direction), its rows picked by awk: strata solid, the peer dashed.
  const std::string script = fmt::format(
      "set terminal pngcairo size 1100,650 noenhanced\nset output '{}'\nset datafile separator ','\n"
      "set logscale x 2\nset xlabel 'transfer size (KiB)'\nset ylabel 'GB/s'\nset key outside right\n"
      "set title 'strata bench pcie: the backend chunk path (solid) and the plain peer (dashed)'\n"
      "csv = '{}'\nmems = 'pinned pageable'\ndirs = 'h2d d2h both'\n"
      "nodes = system(\"tail -n +2 '\".csv.\"' | cut -d, -f1 | sort -nu | tr '\\n' ' '\")\n"
      "series(n, m, d) = sprintf(\"< awk -F, '$1 == %s && $3 == \\\"%s\\\" && $4 == \\\"%s\\\"' '%s'\", n, m, d, csv)\n"
      "plot for [n in nodes] for [m in mems] for [d in dirs] series(n, m, d) using ($5/1024):7 with linespoints "
      "title 'node '.n.' '.m.' '.d, \\\n"
      "     for [n in nodes] for [m in mems] for [d in dirs] series(n, m, d) using ($5/1024):10 with linespoints dt 2 "
      "title 'peer node '.n.' '.m.' '.d\n",
      png_path, csv_path);
  return run_gnuplot(script, png_path);
}

}  // namespace strata::bench
