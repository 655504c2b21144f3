// Tests of `strata bench pcie`'s pieces: the PCIe link-rate table, the option checks, and one small
// real sweep on the CPU backend (every point measured by both paths, the report saying what the
// figures are), with its JSON and CSV shape. The CUDA figures need a GPU (tools/gpu_check.sh).
#include "bench/pcie_bench.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>

#include "runtime/topology.h"

namespace strata::bench {
namespace {

TEST(PcieLinkRate, FollowsGenerationWidthAndEncoding) {
  EXPECT_NEAR(pcie_link_gbps(1, 1), 0.25, 1e-12);              // 2.5 GT/s, 8b/10b
  EXPECT_NEAR(pcie_link_gbps(2, 16), 8.0, 1e-12);              // 5 GT/s x16, 8b/10b
  EXPECT_NEAR(pcie_link_gbps(3, 16), 8 * 16 * 128.0 / 130 / 8, 1e-12);  // 15.75
  EXPECT_NEAR(pcie_link_gbps(4, 16), 31.5077, 1e-4);
  EXPECT_NEAR(pcie_link_gbps(5, 16), 63.0154, 1e-4);
  EXPECT_NEAR(pcie_link_gbps(5, 8), pcie_link_gbps(5, 16) / 2, 1e-12);
  EXPECT_NEAR(pcie_link_gbps(6, 16), 64 * 16 * 242.0 / 256 / 8, 1e-12);  // FLIT mode: 121
  EXPECT_EQ(pcie_link_gbps(0, 16), 0.0);
  EXPECT_EQ(pcie_link_gbps(7, 16), 0.0);
  EXPECT_EQ(pcie_link_gbps(4, 0), 0.0);
}

TEST(PcieBench, RefusesBadOptions) {
  PcieBenchOptions o;
  o.repeat = 0;
  StatusOr<PcieBenchReport> r = run_pcie_bench(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::invalid_argument);
  EXPECT_NE(r.status().message().find("--repeat"), std::string::npos) << r.status().message();

  o = PcieBenchOptions{};
  o.sizes = {1000};
  r = run_pcie_bench(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::invalid_argument);
  EXPECT_NE(r.status().message().find("[4 KiB, 64 GiB]"), std::string::npos) << r.status().message();

  o = PcieBenchOptions{};
  o.directions.clear();
  EXPECT_EQ(run_pcie_bench(o).status().code(), Code::invalid_argument);
}

TEST(PcieBench, FarPlacementNeedsASecondNode) {
  StatusOr<Topology> topo = Topology::discover();
  ASSERT_TRUE(topo.is_ok()) << topo.status().to_string();
  int nodes_with_cpus = 0;
  for (const NumaNode& n : topo->numa_nodes()) nodes_with_cpus += n.cpus.empty() ? 0 : 1;
  if (nodes_with_cpus > 1) GTEST_SKIP() << "this machine has several NUMA nodes; the one-node refusal does not apply";
  PcieBenchOptions o;
  o.numa = NumaPlacement::far;
  o.sizes = {64 << 10};
  StatusOr<PcieBenchReport> r = run_pcie_bench(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::invalid_argument);
  EXPECT_NE(r.status().message().find("one NUMA node"), std::string::npos) << r.status().message();
}

TEST(PcieBench, CudaWithoutADeviceIsUnavailable) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is visible here";
  PcieBenchOptions o;
  o.backend = BackendKind::cuda;
  o.sizes = {64 << 10};
  StatusOr<PcieBenchReport> r = run_pcie_bench(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::unavailable) << r.status().to_string();
}

TEST(PcieBench, SmallCpuSweepMeasuresEveryPointAndSaysWhatItIs) {
  PcieBenchOptions o;
  o.sizes = {1 << 20, 64 << 10, 1 << 20};  // unsorted, with a duplicate: measured once each, ascending
  o.repeat = 3;
  o.min_bytes_per_run = 4 << 20;
  o.numa = NumaPlacement::near;
  size_t progress_calls = 0, last_done = 0, last_total = 0;
  o.progress = [&](size_t done, size_t total, const std::string&) {
    progress_calls++;
    last_done = done;
    last_total = total;
  };
  StatusOr<PcieBenchReport> r = run_pcie_bench(o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->backend, "cpu");
  EXPECT_NE(r->what.find("CPU backend"), std::string::npos) << r->what;
  EXPECT_NE(r->what.find("copy threads"), std::string::npos) << r->what;
  EXPECT_FALSE(r->link.has_value());
  EXPECT_FALSE(r->pinned_kind.empty());
  ASSERT_EQ(r->points.size(), 2u * 2u * 3u);  // memory kinds x sizes x directions
  EXPECT_EQ(progress_calls, r->points.size() + 1);
  EXPECT_EQ(last_done, last_total);
  for (size_t i = 0; i < r->points.size(); i++) {
    const PciePoint& p = r->points[i];
    EXPECT_EQ(p.bytes, i % 6 < 3 ? (64u << 10) : (1u << 20)) << i;
    EXPECT_EQ(p.copies_per_run, p.bytes == (64u << 10) ? 64 : 4) << i;
    EXPECT_TRUE(p.near);
    EXPECT_GT(p.strata_gbps.median, 0.0);
    EXPECT_LE(p.strata_gbps.min, p.strata_gbps.median);
    EXPECT_LE(p.strata_gbps.median, p.strata_gbps.max);
    ASSERT_TRUE(p.plain_gbps.has_value());
    EXPECT_GT(p.plain_gbps->median, 0.0);
    EXPECT_FALSE(p.link_fraction.has_value());
    EXPECT_LT(p.strata_gbps.max, 10000.0) << "a host memcpy above 10 TB/s is a timing bug";
  }

  nlohmann::json j = nlohmann::json::parse(pcie_bench_json(*r));
  for (const char* key : {"backend", "device", "what", "strata_path", "plain_path", "link", "numa_note", "pinned_kind",
                          "notes", "repeat", "points"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_TRUE(j["link"].is_null());
  ASSERT_EQ(j["points"].size(), r->points.size());
  for (const auto& p : j["points"]) {
    for (const char* key : {"numa_node", "near", "memory", "direction", "bytes", "copies_per_run", "strata_gbps",
                            "strata_min_gbps", "strata_max_gbps", "plain_gbps", "strata_vs_plain"})
      EXPECT_TRUE(p.contains(key)) << key;
    EXPECT_GT(p["strata_gbps"].get<double>(), 0.0);
    EXPECT_FALSE(p.contains("link_fraction"));
  }
  EXPECT_EQ(j["points"][0]["memory"], "pinned");
  EXPECT_EQ(j["points"][0]["direction"], "h2d");
  EXPECT_EQ(j["points"][2]["direction"], "both");
  EXPECT_EQ(j["points"][6]["memory"], "pageable");

  std::istringstream csv(pcie_bench_csv(*r));
  std::string line;
  size_t lines = 0;
  while (std::getline(csv, line)) {
    if (lines > 0) EXPECT_EQ(std::count(line.begin(), line.end(), ','), 12) << line;
    lines++;
  }
  EXPECT_EQ(lines, r->points.size() + 1);

  const std::string table = pcie_bench_table(*r);
  EXPECT_NE(table.find("no PCIe link"), std::string::npos) << table;
  EXPECT_NE(table.find("pageable"), std::string::npos) << table;
}

TEST(PcieBench, WithoutThePeerOnlyStrataIsTimed) {
  PcieBenchOptions o;
  o.sizes = {64 << 10};
  o.directions = {CopyDirection::d2h};
  o.memory = {HostMemory::pageable};
  o.repeat = 1;
  o.warmup = 0;
  o.plain = false;
  o.numa = NumaPlacement::near;
  StatusOr<PcieBenchReport> r = run_pcie_bench(o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->points.size(), 1u);
  EXPECT_EQ(r->points[0].direction, CopyDirection::d2h);
  EXPECT_EQ(r->points[0].memory, HostMemory::pageable);
  EXPECT_GT(r->points[0].strata_gbps.median, 0.0);
  EXPECT_FALSE(r->points[0].plain_gbps.has_value());
  EXPECT_NE(r->plain_path.find("not run"), std::string::npos);
}

}  // namespace
}  // namespace strata::bench
