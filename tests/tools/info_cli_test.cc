// `strata info` run as a user would: the JSON document has every section and a probed path, the
// human output names io_uring and (without a GPU) the CPU backend, and a bad --path fails with a
// message naming it.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/units.h"
#include "tests/tools/run_cli.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::run_cli;

class InfoCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(STRATA_BINARY_DIR) / "test-scratch" / ("info_cli." + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(InfoCli, JsonHasEverySectionAndThePath) {
  auto r = run_cli({"info", "--json", "--path", dir_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json doc = nlohmann::json::parse(r.out);  // throws (test fails) on malformed output
  for (const char* key : {"cpu", "memory", "numa_nodes", "gpus", "io_uring", "paths", "libraries"})
    EXPECT_TRUE(doc.contains(key)) << key;
  EXPECT_GE(doc["cpu"]["physical_cores"].get<int>(), 1);
  EXPECT_GT(doc["memory"]["total_bytes"].get<uint64_t>(), 0u);
  EXPECT_GE(doc["numa_nodes"].size(), 1u);
  EXPECT_TRUE(doc["io_uring"]["works"].is_boolean());
  ASSERT_EQ(doc["paths"].size(), 1u);
  const auto& p = doc["paths"][0];
  EXPECT_EQ(p["path"].get<std::string>(), dir_.string());
  EXPECT_TRUE(p["o_direct"].is_boolean());
  EXPECT_GT(p["free_bytes"].get<uint64_t>(), 0u);
  EXPECT_TRUE(doc["libraries"].contains("hwloc"));
  EXPECT_TRUE(doc["libraries"].contains("CLI11"));
  EXPECT_TRUE(fs::is_empty(dir_)) << "info left a probe file behind";
}

TEST_F(InfoCli, PathsMayBeCommaSeparated) {
  auto r = run_cli({"info", "--json", "--path", dir_.string() + "," + dir_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["paths"].size(), 2u);
}

TEST_F(InfoCli, HumanOutputHasTheSections) {
  auto r = run_cli({"info", "--path", dir_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* section : {"CPU\n", "Memory\n", "GPUs\n", "io_uring\n", "Paths\n", "Libraries\n", "O_DIRECT"})
    EXPECT_NE(r.out.find(section), std::string::npos) << section << " missing from:\n" << r.out;
  EXPECT_NE(r.out.find(dir_.string()), std::string::npos);

  auto json = run_cli({"info", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  if (nlohmann::json::parse(json.out)["cuda"]["available"].get<bool>()) {
    GTEST_SKIP() << "a GPU is visible here; the no-GPU line does not apply";
  }
  EXPECT_NE(r.out.find("no GPU: using the CPU backend ("), std::string::npos) << r.out;
}

// Each NUMA node's row says what its figure is: the node's RAM (its memory blocks) beside what the
// kernel counts usable there, or, without memory blocks in sysfs, the usable figure named as such.
TEST_F(InfoCli, NumaRowsSayWhatTheirFiguresAre) {
  auto json = run_cli({"info", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  auto human = run_cli({"info"});
  ASSERT_EQ(human.exit_code, 0) << human.err;
  const nlohmann::json info = nlohmann::json::parse(json.out);  // outlives the loop over its nodes
  for (const nlohmann::json& n : info["numa_nodes"]) {
    const uint64_t ram = n["memory_bytes"].get<uint64_t>(), usable = n["meminfo_total_bytes"].get<uint64_t>();
    const size_t row = human.out.find("NUMA node " + std::to_string(n["index"].get<int>()) + " ");
    ASSERT_NE(row, std::string::npos) << human.out;
    const std::string line = human.out.substr(row, human.out.find('\n', row) - row);
    if (n["memory_source"] == "memory blocks") {
      EXPECT_GE(ram, usable);
      EXPECT_NE(line.find(format_size(ram) + " of RAM (the kernel counts " + format_size(usable) +
                          " usable in the node's meminfo), CPUs "),
                std::string::npos)
          << line;
    } else {
      EXPECT_EQ(n["memory_source"], "meminfo");
      EXPECT_NE(line.find(format_size(usable) + " usable (the node's meminfo MemTotal), CPUs "), std::string::npos)
          << line;
    }
  }
}

TEST_F(InfoCli, MissingPathFailsNamingIt) {
  const std::string missing = (dir_ / "absent").string();
  auto r = run_cli({"info", "--path", missing});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("strata: error: --path: " + missing + " does not exist"), std::string::npos) << r.err;
}

TEST_F(InfoCli, FilePathFailsNamingIt) {
  const std::string file = (dir_ / "a-file").string();
  std::ofstream(file) << "x";
  auto r = run_cli({"info", "--json", "--path", file});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(file + " is not a directory"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace strata
