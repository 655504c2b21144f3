// `strata bench pcie`: host<->device copy bandwidth as offload sizing needs it -- H2D, D2H and both
// at once, from pinned and pageable host memory, over transfer sizes, with the copying thread (and
// the host buffers it first touches) on the GPU's NUMA node and on another node where there is one.
// Times strata's chunk path (Backend::copy_to_device / copy_to_host on the h2d / d2h streams, an
// event per chunk) beside a plain peer on the same buffers (CUDA: cudaMemcpyAsync on its own
// streams; CPU backend: memcpy on the calling thread) and, on CUDA, against the PCIe link's rate.
// On the CPU backend the "device" is host memory: the figures are memcpy between host blocks by the
// backend's copy threads, and the report says so. Not a device-to-device or NVMe benchmark (bench
// device, bench io). Runs one point at a time and pins the calling thread while it runs.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "runtime/backend.h"
#include "runtime/plain_copy_peer.h"
#include "runtime/status.h"

namespace strata::bench {

enum class HostMemory : uint8_t { pinned, pageable };
std::string_view host_memory_name(HostMemory memory);  // "pinned", "pageable"

// Where the copying thread runs: the GPU's NUMA node (CPU backend: the node of the first CPU this
// process may use), another node, or both when the machine has several (near only when it has one).
enum class NumaPlacement : uint8_t { near, far, all };

struct PcieBenchOptions {
  BackendKind backend = BackendKind::cpu;
  int device_index = 0;
  std::vector<uint64_t> sizes = {64ull << 10, 1ull << 20, 16ull << 20, 256ull << 20, 1ull << 30};
  std::vector<CopyDirection> directions = {CopyDirection::h2d, CopyDirection::d2h, CopyDirection::both};
  std::vector<HostMemory> memory = {HostMemory::pinned, HostMemory::pageable};
  NumaPlacement numa = NumaPlacement::all;
  int repeat = 5;  // timed runs per point and path (the median, min and max are kept)
  int warmup = 1;  // untimed runs first
  // A run repeats a transfer back to back until it has moved at least this many bytes per
  // direction (small transfers are otherwise all launch latency), at most 4096 times.
  uint64_t min_bytes_per_run = 64ull << 20;
  bool plain = true;  // time the plain peer too
  // Sizes whose buffers (host and device, per memory kind) need more than this fraction of the
  // memory available are left out, with a note.
  double max_memory_fraction = 0.5;
  std::function<void(size_t done, size_t total, const std::string& what)> progress;
};

// The theoretical per-direction rate of a PCIe link in GB/s (1e9 B/s) after line encoding:
// GT/s per lane (2.5, 5, 8, 16, 32, 64 for Gen1-6) x lanes x encoding (8b/10b for Gen1-2,
// 128b/130b for Gen3-5, Gen6's 242/256 FLIT) / 8. Gen4 x16: 31.5; Gen5 x16: 63.0. 0 when the
// generation (1..6) or width (> 0) is unknown. Protocol overhead (TLP headers) is not subtracted:
// about 85-90% of this is what DMA reaches at best.
double pcie_link_gbps(int gen, int width);

struct PcieLink {
  int gen = 0, width = 0;          // the link as trained while copying (read again after the sweep)
  int max_gen = 0, max_width = 0;  // what the device supports
  double gbps = 0;                 // pcie_link_gbps(gen, width): one direction
};

struct PciePoint {
  int numa_node = -1;
  bool near = true;  // on the GPU's node (CPU backend: the first node)
  HostMemory memory = HostMemory::pinned;
  CopyDirection direction = CopyDirection::h2d;
  uint64_t bytes = 0;     // one transfer
  int copies_per_run = 0;  // transfers per direction in one timed run
  Spread strata_gbps;      // GB/s, both directions summed for `both`
  std::optional<Spread> plain_gbps;
  std::optional<double> link_fraction;  // strata median over the link rate (x2 for `both`)
};

struct PcieBenchReport {
  std::string backend;  // "cuda" or "cpu"
  std::string device;   // DeviceDescription::name
  std::string pci_bus_id;
  std::string what;     // what the figures are on this backend, printed above the table
  std::string strata_path;  // "Backend::copy_to_device/copy_to_host on the h2d/d2h streams, an event per chunk"
  std::string plain_path;   // the peer, or why it did not run
  std::optional<PcieLink> link;
  std::string link_note;    // why there is no link rate
  int gpu_numa_node = -1;
  std::string numa_note;    // "one NUMA node: no cross-node figures", ...
  std::string pinned_kind;  // the PinnedPool kind the pinned buffers got (cuda_host, mlock, pageable)
  std::vector<std::string> notes;  // sizes left out, and why
  int repeat = 0;
  std::vector<PciePoint> points;
};

// Checks each (placement, memory) pair's buffers with a round trip through the device first, then
// times every point. invalid_argument for bad options (a size of 0, repeat < 1, far placement on a
// one-node machine, no size fitting in memory); the backend's errors otherwise.
StatusOr<PcieBenchReport> run_pcie_bench(const PcieBenchOptions& options);

std::string pcie_bench_table(const PcieBenchReport& report);
// node,near,memory,direction,bytes,copies_per_run,strata_gbps,strata_min_gbps,strata_max_gbps,
// plain_gbps,plain_min_gbps,plain_max_gbps,link_fraction (empty cells when not measured).
std::string pcie_bench_csv(const PcieBenchReport& report);
// {"backend", "device", "what", "strata_path", "plain_path", "link": {gen, width, max_gen, max_width,
//  gbps} or null, "gpu_numa_node", "numa_note", "pinned_kind", "notes", "repeat",
//  "points": [{"numa_node", "near", "memory", "direction", "bytes", "copies_per_run", "strata_gbps",
//  "strata_min_gbps", "strata_max_gbps", "plain_gbps"..., "link_fraction", "strata_vs_plain"}]}
std::string pcie_bench_json(const PcieBenchReport& report);
// Runs gnuplot on `csv_path` to draw GB/s against transfer size (one line per memory x direction
// x node, strata solid, the plain peer dashed); unavailable when gnuplot is missing.
Status pcie_bench_plot(const std::string& csv_path, const std::string& png_path);

}  // namespace strata::bench
