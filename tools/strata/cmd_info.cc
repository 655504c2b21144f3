// `strata info [--path DIR]... [--ranks N] [--json]`: this machine as offload sees it -- CPU, SIMD
// level, RAM, NUMA nodes, GPUs (CUDA devices merged with the PCI topology by bus id) or the reason
// there is none, whether io_uring works, the filesystem, space, O_DIRECT, block device and NUMA node
// of each given path, how the ranks of a run on this node are placed (with --ranks, or under
// mpirun / torchrun, where the node's local rank 0 reports), and library versions. Everything is gathered into one JSON document first; the human
// output is rendered from it, so both always say the same. Not a benchmark (`strata bench`).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/cpu/simd_level.h"
#include "runtime/backend.h"
#include "runtime/communicator.h"
#include "runtime/fs_probe.h"
#include "runtime/io_uring_probe.h"
#include "runtime/rank_locality.h"
#include "runtime/topology.h"
#include "runtime/units.h"
#include "runtime/versions.h"
#include "tools/strata/command.h"

namespace strata::cli {
namespace {

using Json = nlohmann::ordered_json;

Json cpu_json(const Topology& topo) {
  Json caches = Json::array();
  for (const CacheLevel& c : topo.caches())
    caches.push_back({{"level", c.level}, {"type", c.type}, {"size_bytes", c.size_bytes},
                      {"instances", c.instances}, {"cores_sharing", c.cores_sharing}});
  return {{"model", topo.cpu_model()},
          {"packages", topo.packages()},
          {"physical_cores", topo.physical_cores()},
          {"hardware_threads", topo.hardware_threads()},
          {"simd", std::string(kernels::simd_level_name(kernels::best_simd_level()))},
          {"caches", caches}};
}

Json numa_json(const Topology& topo) {
  Json nodes = Json::array();
  // memory_bytes: the node's RAM (its online memory blocks; the kernel's MemTotal where sysfs lists
  // no blocks); meminfo_total_bytes: what the kernel counts usable on the node (runtime/topology.h).
  for (const NumaNode& n : topo.numa_nodes())
    nodes.push_back({{"index", n.index},
                     {"cpus", n.cpus},
                     {"memory_bytes", n.online_block_bytes > 0 ? n.online_block_bytes : n.local_memory_bytes},
                     {"memory_source", n.online_block_bytes > 0 ? "memory blocks" : "meminfo"},
                     {"meminfo_total_bytes", n.local_memory_bytes}});
  return nodes;
}

Json pcie_json(const PciGpu* pci) {
  if (!pci) return nullptr;
  return {{"gen", pci->link_gen}, {"width", pci->link_width}, {"max_gen", pci->max_link_gen},
          {"max_width", pci->max_link_width}};
}

// CUDA devices first (with the PCIe link and NUMA node of the same bus id), then NVIDIA PCI
// functions CUDA does not show (no driver, or hidden by CUDA_VISIBLE_DEVICES).
Json gpus_json(const Topology& topo, const std::vector<DeviceDescription>& cuda_devices) {
  Json gpus = Json::array();
  std::vector<std::string> matched;
  for (const DeviceDescription& d : cuda_devices) {
    StatusOr<std::string> bus_id = normalize_pci_bus_id(d.pci_bus_id);
    const PciGpu* pci = bus_id.is_ok() ? topo.pci_gpu(*bus_id) : nullptr;
    if (pci) matched.push_back(pci->pci_bus_id);
    gpus.push_back({{"name", d.name},
                    {"cuda_visible", true},
                    {"memory_bytes", d.total_memory},
                    {"compute_capability", fmt::format("{}.{}", d.compute_capability / 10, d.compute_capability % 10)},
                    {"pci_bus_id", bus_id.is_ok() ? *bus_id : d.pci_bus_id},
                    {"pcie", pcie_json(pci)},
                    {"numa_node", pci ? pci->numa_node : -1}});
  }
  for (const PciGpu& g : topo.pci_gpus()) {
    if (std::find(matched.begin(), matched.end(), g.pci_bus_id) != matched.end()) continue;
    gpus.push_back({{"name", fmt::format("NVIDIA PCI device {:04x}:{:04x}", g.vendor_id, g.device_id)},
                    {"cuda_visible", false},
                    {"memory_bytes", nullptr},
                    {"compute_capability", nullptr},
                    {"pci_bus_id", g.pci_bus_id},
                    {"pcie", pcie_json(&g)},
                    {"numa_node", g.numa_node}});
  }
  return gpus;
}

Json path_json(const PathInfo& p) {
  return {{"path", p.path},
          {"fs_type", p.fs_type},
          {"total_bytes", p.total_bytes},
          {"free_bytes", p.free_bytes},
          {"o_direct", p.o_direct},
          {"o_direct_reason", p.o_direct_reason},
          {"block_device", p.block_device},
          {"logical_block_size", p.logical_block_size},
          {"rotational", p.rotational},
          {"device_model", p.device_model},
          {"numa_node", p.numa_node}};
}

// How `ranks` ranks of a run on this node are placed (runtime/rank_locality.h: one GPU each where
// CUDA shows GPUs, a share of a NUMA node's cores, the --path directories on its node), as `strata
// train` places ranks the launcher leaves unbound; this process's own binding is shown beside it.
StatusOr<Json> ranks_json(const Topology& topo, const std::vector<DeviceDescription>& cuda_devices,
                          const std::vector<std::string>& paths, const LaunchInfo& launch, int ranks) {
  std::vector<std::string> bus_ids;
  for (const DeviceDescription& d : cuda_devices) bus_ids.push_back(d.pci_bus_id);
  STRATA_ASSIGN_OR_RETURN(LocalityMachine machine, discover_locality_machine(topo, bus_ids, paths));
  const std::vector<int> bound = machine.bound_cpus;
  machine.bound_cpus.clear();  // the plan of unbound ranks; this process's binding is shown beside it
  Json placement = Json::array();
  for (int r = 0; r < ranks; ++r) {
    STRATA_ASSIGN_OR_RETURN(RankLocality l, plan_rank_locality(machine, r, ranks, !cuda_devices.empty()));
    const bool has_gpu = l.gpu >= 0 && l.gpu < int(cuda_devices.size());
    placement.push_back({{"local_rank", r},
                         {"gpu", l.gpu},
                         {"gpu_pci_bus_id", has_gpu ? cuda_devices[size_t(l.gpu)].pci_bus_id : std::string()},
                         {"numa_node", l.numa_node},
                         {"cpus", l.cpus},
                         {"cpus_why", l.cpus_why},
                         {"nvme_paths", l.nvme_paths},
                         {"nvme_why", l.nvme_why},
                         {"problem", l.gpu >= 0 && !has_gpu
                                         ? fmt::format("no GPU {}: CUDA shows {}", l.gpu, cuda_devices.size())
                                         : std::string()}});
  }
  return Json{{"launcher", std::string(launcher_name(launch.launcher))},
              {"world_size", launch.size},
              {"rank", launch.rank},
              {"local_ranks", ranks},
              {"this_process_cpus", bound},
              {"placement", placement}};
}

// The whole report; an error names what could not be inspected (a bad --path, no topology).
// `ranks` > 0 adds how that many ranks on this node are placed.
StatusOr<Json> gather(const std::vector<std::string>& paths, const LaunchInfo& launch, int ranks) {
  Json paths_json = Json::array();
  for (const std::string& p : paths) {
    StatusOr<PathInfo> info = probe_path(p);
    if (!info.is_ok()) return info.status().with_context("--path");
    paths_json.push_back(path_json(*info));
  }
  STRATA_ASSIGN_OR_RETURN(Topology topo, Topology::discover());
  std::string no_cuda_reason;
  std::vector<DeviceDescription> cuda_devices = list_cuda_devices(&no_cuda_reason);
  IoUringProbe uring = probe_io_uring();
  Json libraries = Json::object();
  for (const auto& [name, version] : library_versions()) libraries[name] = version;
  libraries["CLI11"] = CLI11_VERSION;

  Json doc;
  doc["cpu"] = cpu_json(topo);
  doc["memory"] = {{"total_bytes", topo.total_memory_bytes()}};
  doc["numa_nodes"] = numa_json(topo);
  doc["gpus"] = gpus_json(topo, cuda_devices);
  doc["cuda"] = {{"available", !cuda_devices.empty()},
                 {"reason", cuda_devices.empty() ? no_cuda_reason : std::string()}};
  doc["io_uring"] = {{"works", uring.works},
                     {"reason", uring.reason},
                     {"kernel_io_uring_disabled", uring.kernel_disabled_setting}};
  doc["paths"] = paths_json;
  if (ranks > 0) {
    STRATA_ASSIGN_OR_RETURN(doc["ranks"], ranks_json(topo, cuda_devices, paths, launch, ranks));
  }
  doc["libraries"] = libraries;
  return doc;
}

void print_row(std::string_view label, std::string_view value) { fmt::print("  {:<16} {}\n", label, value); }

std::string cache_line(const Json& c) {
  std::string sharing = c["cores_sharing"].get<int>() == 1
                            ? "per core"
                            : fmt::format("shared by {} cores", c["cores_sharing"].get<int>());
  return fmt::format("{} x{}, {}", format_size(c["size_bytes"].get<uint64_t>()), c["instances"].get<int>(), sharing);
}

void print_human(const Json& doc) {
  const Json& cpu = doc["cpu"];
  fmt::print("CPU\n");
  print_row("model", cpu["model"].get<std::string>());
  print_row("cores", fmt::format("{} package(s), {} physical cores, {} hardware threads", cpu["packages"].get<int>(),
                                 cpu["physical_cores"].get<int>(), cpu["hardware_threads"].get<int>()));
  print_row("SIMD", cpu["simd"].get<std::string>());
  for (const Json& c : cpu["caches"])
    print_row(fmt::format("L{} {}", c["level"].get<int>(), c["type"].get<std::string>()), cache_line(c));

  fmt::print("Memory\n");
  print_row("RAM", format_size(doc["memory"]["total_bytes"].get<uint64_t>()));
  for (const Json& n : doc["numa_nodes"]) {
    // "24 GiB of RAM (the kernel counts 9.71 GiB usable in the node's meminfo)": the first figure
    // is the node's memory blocks, the second what the kernel has initialised and not reserved.
    const uint64_t meminfo = n["meminfo_total_bytes"].get<uint64_t>();
    const std::string memory =
        n["memory_source"] == "memory blocks"
            ? fmt::format("{} of RAM (the kernel counts {} usable in the node's meminfo)",
                          format_size(n["memory_bytes"].get<uint64_t>()), format_size(meminfo))
            : fmt::format("{} usable (the node's meminfo MemTotal)", format_size(meminfo));
    print_row(fmt::format("NUMA node {}", n["index"].get<int>()),
              fmt::format("{}, CPUs {}", memory, format_cpu_list(n["cpus"].get<std::vector<int>>())));
  }

  fmt::print("GPUs\n");
  if (!doc["cuda"]["available"].get<bool>())
    fmt::print("  no GPU: using the CPU backend ({})\n", doc["cuda"]["reason"].get<std::string>());
  for (const Json& g : doc["gpus"]) {
    std::string link = "PCIe link unknown";
    if (!g["pcie"].is_null() && g["pcie"]["gen"].get<int>() > 0)
      link = fmt::format("PCIe Gen{} x{} (max Gen{} x{})", g["pcie"]["gen"].get<int>(), g["pcie"]["width"].get<int>(),
                         g["pcie"]["max_gen"].get<int>(), g["pcie"]["max_width"].get<int>());
    std::string node = g["numa_node"].get<int>() >= 0 ? fmt::format("NUMA node {}", g["numa_node"].get<int>())
                                                      : std::string("NUMA node unknown");
    if (g["cuda_visible"].get<bool>()) {
      print_row(g["pci_bus_id"].get<std::string>(),
                fmt::format("{}, {}, compute capability {}, {}, {}", g["name"].get<std::string>(),
                            format_size(g["memory_bytes"].get<uint64_t>()),
                            g["compute_capability"].get<std::string>(), link, node));
    } else {
      print_row(g["pci_bus_id"].get<std::string>(),
                fmt::format("{} (not visible to CUDA), {}, {}", g["name"].get<std::string>(), link, node));
    }
  }

  const Json& uring = doc["io_uring"];
  fmt::print("io_uring\n");
  print_row("status", uring["works"].get<bool>() ? "works" : "unavailable: " + uring["reason"].get<std::string>());
  print_row("kernel setting", fmt::format("kernel.io_uring_disabled = {}", uring["kernel_io_uring_disabled"].get<int>()));

  fmt::print("Paths\n");
  if (doc["paths"].empty()) fmt::print("  (none given; pass --path DIR for each directory strata may write to)\n");
  for (const Json& p : doc["paths"]) {
    fmt::print("  {}\n", p["path"].get<std::string>());
    print_row("  filesystem", fmt::format("{}, {} free of {}", p["fs_type"].get<std::string>(),
                                          format_size(p["free_bytes"].get<uint64_t>()),
                                          format_size(p["total_bytes"].get<uint64_t>())));
    print_row("  O_DIRECT", p["o_direct"].get<bool>() ? "yes" : "no: " + p["o_direct_reason"].get<std::string>());
    const std::string dev = p["block_device"].get<std::string>();
    if (dev.empty()) {
      print_row("  block device", "none (not backed by a disk)");
    } else {
      const std::string model = p["device_model"].get<std::string>();
      const int node = p["numa_node"].get<int>();
      print_row("  block device",
                fmt::format("{}{}, logical block {} B, {}{}", dev, model.empty() ? "" : " (" + model + ")",
                            p["logical_block_size"].get<uint32_t>(),
                            p["rotational"].get<bool>() ? "rotational" : "non-rotational",
                            node >= 0 ? fmt::format(", NUMA node {}", node) : std::string()));
    }
  }

  if (doc.contains("ranks")) {
    const Json& ranks = doc["ranks"];
    fmt::print("Ranks\n");
    fmt::print("  {} ranks on this node{}, as strata train places ranks the launcher leaves unbound:\n",
               ranks["local_ranks"].get<int>(),
               ranks["launcher"] == "single"
                   ? std::string()
                   : fmt::format(" ({} of {} ranks under {})", ranks["local_ranks"].get<int>(),
                                 ranks["world_size"].get<int>(), ranks["launcher"].get<std::string>()));
    for (const Json& r : ranks["placement"]) {
      const int gpu = r["gpu"].get<int>();
      std::string line = gpu >= 0 ? fmt::format("GPU {}, ", gpu) : std::string();
      line += fmt::format("CPUs {} ({})", format_cpu_list(r["cpus"].get<std::vector<int>>()),
                          r["cpus_why"].get<std::string>());
      if (!r["nvme_paths"].empty())
        line += fmt::format("; NVMe {} ({})", fmt::join(r["nvme_paths"].get<std::vector<std::string>>(), ","),
                            r["nvme_why"].get<std::string>());
      if (!r["problem"].get<std::string>().empty()) line += "; " + r["problem"].get<std::string>();
      print_row(fmt::format("local rank {}", r["local_rank"].get<int>()), line);
    }
    print_row("this process", fmt::format("bound to CPUs {} (a launcher's binding is kept: mpirun --bind-to none "
                                          "leaves the placement to strata)",
                                          format_cpu_list(ranks["this_process_cpus"].get<std::vector<int>>())));
  }

  fmt::print("Libraries\n");
  for (const auto& [name, version] : doc["libraries"].items()) print_row(name, version.get<std::string>());
}

}  // namespace

void add_info_command(CLI::App& root, CommandRegistry& registry) {
  CLI::App* app = root.add_subcommand(
      "info", "Show this machine as strata sees it: CPU, RAM, NUMA, GPUs, io_uring, paths, library versions.");
  auto paths = std::make_shared<std::vector<std::string>>();
  auto json = std::make_shared<bool>(false);
  app->add_option("--path", *paths,
                  "A directory strata may write to (NVMe swap): filesystem, free space, O_DIRECT, block device. "
                  "Repeat or separate with commas")
      ->delimiter(',');
  auto ranks = std::make_shared<int>(0);
  app->add_option("--ranks", *ranks,
                  "Show how N ranks of a run on this node are placed: a GPU each, a share of a NUMA node's cores, the "
                  "--path directories on its node (under mpirun or torchrun: the node's ranks, printed by its local "
                  "rank 0)")
      ->check(CLI::Range(1, 4096));
  app->add_flag("--json", *json, "Print one JSON document (keys: cpu, memory, numa_nodes, gpus, cuda, io_uring, "
                                 "paths, ranks with --ranks or under a launcher, libraries)");
  registry.add(app, [paths, json, ranks]() {
    StatusOr<LaunchInfo> launch = detect_launch();
    if (!launch.is_ok()) return report_error(launch.status().message(), kExitFailure);
    int n = *ranks;
    if (launch->launcher != Launcher::single) {
      if (launch->local_rank != 0) return kExitOk;  // the node's local rank 0 reports for it
      if (n == 0) n = launch->local_size > 0 ? launch->local_size : launch->size;
    }
    StatusOr<Json> doc = gather(*paths, *launch, n);
    if (!doc.is_ok()) return report_error(doc.status().message(), kExitFailure);
    if (*json) {
      fmt::print("{}\n", doc->dump(2));
    } else {
      print_human(*doc);
    }
    return kExitOk;
  });
}

}  // namespace strata::cli
