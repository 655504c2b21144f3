// `strata bench pcie` and `strata bench device` run as a user would: --help lists the flags, bad
// flags exit 2 naming the value, and a small real run on the CPU backend prints its table and
// writes --json (and CSV) files of the documented shape.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/tools/run_cli.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::run_cli;

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(STRATA_BINARY_DIR) / "test-scratch" / ("bench_cli." + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  fs::path dir_;
};

TEST_F(BenchCli, HelpListsBothCommandsAndTheirFlags) {
  auto bench = run_cli({"bench", "--help"});
  EXPECT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("pcie"), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("device"), std::string::npos) << bench.out;
  auto pcie = run_cli({"bench", "pcie", "--help"});
  EXPECT_EQ(pcie.exit_code, 0) << pcie.err;
  for (const char* flag : {"--device", "--sizes", "--direction", "--memory", "--numa", "--repeat", "--json", "--csv",
                           "--png", "--no-plain"})
    EXPECT_NE(pcie.out.find(flag), std::string::npos) << flag << " missing from:\n" << pcie.out;
  auto device = run_cli({"bench", "device", "--help"});
  EXPECT_EQ(device.exit_code, 0) << device.err;
  for (const char* flag : {"--device", "--preset", "--micro-batch", "--seq", "--precision", "--square", "--copy-size",
                           "--repeat", "--quick", "--json", "--csv", "--peak-tflops"})
    EXPECT_NE(device.out.find(flag), std::string::npos) << flag << " missing from:\n" << device.out;
}

TEST_F(BenchCli, BadFlagsExitTwoNamingTheValue) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"bench", "pcie", "--device", "tpu"}, "--device tpu: expected cpu, cuda or auto"},
      {{"bench", "pcie", "--direction", "sideways"}, "--direction sideways: expected h2d, d2h or both"},
      {{"bench", "pcie", "--memory", "magic"}, "--memory magic: expected pinned or pageable"},
      {{"bench", "pcie", "--numa", "here"}, "--numa here: expected near, far or all"},
      {{"bench", "pcie", "--sizes", "12XB"}, "12XB"},
      {{"bench", "pcie", "--sizes", "1000"}, "[4 KiB, 64 GiB]"},
      {{"bench", "pcie", "--repeat", "0"}, "--repeat 0: must be >= 1"},
      {{"bench", "pcie", "--sizez", "1MiB"}, "--sizez"},
      {{"bench", "device", "--device", "tpu"}, "--device tpu: expected cpu, cuda or auto"},
      {{"bench", "device", "--precision", "fp8"}, "--precision fp8: expected fp32, tf32, bf16 or fp16"},
      {{"bench", "device", "--device", "cpu", "--preset", "gpt2-9000"}, "unknown model preset 'gpt2-9000'"},
      {{"bench", "device", "--micro-batch", "-1"}, "--micro-batch -1"},
      {{"bench", "device", "--copy-size", "lots"}, "lots"},
      {{"bench", "device", "--repeat", "0"}, "--repeat 0: must be >= 1"},
  };
  for (const Case& c : cases) {
    auto r = run_cli(c.args);
    std::string joined;
    for (const std::string& a : c.args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined << "\n" << r.err;
    EXPECT_NE(r.err.find("strata: error: "), std::string::npos) << joined << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << joined << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << joined << "\n" << r.out;
  }
}

TEST_F(BenchCli, PcieOnTheCpuBackendWritesTableJsonAndCsv) {
  const fs::path json = dir_ / "pcie.json", csv = dir_ / "pcie.csv";
  auto r = run_cli({"bench", "pcie", "--device", "cpu", "--sizes", "64KiB,256KiB", "--repeat", "2", "--numa", "near",
                    "--json", json.string(), "--csv", csv.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bench pcie: cpu backend"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CPU backend: no PCIe link"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("bench pcie: point 1/12: node "), std::string::npos) << "progress lines on stderr:\n" << r.err;
  nlohmann::json j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["repeat"], 2);
  ASSERT_EQ(j["points"].size(), 12u);  // pinned, pageable x 2 sizes x h2d, d2h, both
  for (const auto& p : j["points"]) {
    EXPECT_GT(p["strata_gbps"].get<double>(), 0.0);
    EXPECT_GT(p["plain_gbps"].get<double>(), 0.0);
    EXPECT_LE(p["strata_min_gbps"].get<double>(), p["strata_max_gbps"].get<double>());
  }
  EXPECT_EQ(j["points"][3]["bytes"], 256 << 10);
  const std::string text = slurp(csv);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 13) << text;
  EXPECT_EQ(text.rfind("node,near,memory,direction,bytes,", 0), 0u) << text;
}

TEST_F(BenchCli, DeviceOnTheCpuBackendWritesTableAndJson) {
  const fs::path json = dir_ / "device.json", csv = dir_ / "device.csv";
  auto r = run_cli({"bench", "device", "--device", "cpu", "--preset", "gpt2-tiny", "--micro-batch", "1", "--seq", "32",
                    "--square", "64", "--copy-size", "1MiB", "--repeat", "1", "--json", json.string(), "--csv",
                    csv.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bench device: cpu backend"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tf32      | skipped: CPU backend"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("device-to-device copy"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["model"], "gpt2-tiny");
  EXPECT_EQ(j["micro_batch"], 1);
  EXPECT_EQ(j["seq"], 32);
  ASSERT_EQ(j["gemms"].size(), 15u);
  for (const auto& g : j["gemms"]) EXPECT_GT(g["tflops"].get<double>(), 0.0) << g["name"];
  ASSERT_EQ(j["precisions"].size(), 4u);
  EXPECT_EQ(j["copy"]["bytes"], 1 << 20);
  EXPECT_GT(j["copy"]["gbps"].get<double>(), 0.0);
  const std::string text = slurp(csv);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 16) << text;
}

TEST_F(BenchCli, QuickDeviceRunIsSmall) {
  const fs::path json = dir_ / "quick.json";
  auto r = run_cli({"bench", "device", "--device", "cpu", "--quick", "--precision", "fp32", "--json", json.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["model"], "gpt2-124m");
  EXPECT_EQ(j["micro_batch"].get<int>() * j["seq"].get<int>(), 32);
  EXPECT_EQ(j["repeat"], 2);
  EXPECT_EQ(j["copy"]["bytes"], 16 << 20);
  EXPECT_EQ(j["gemms"].back()["N"], 256);
}

// `strata bench comm` without mpirun: a world of one that runs and says so (its runs under mpirun:
// tests/tools/bench_comm_check.sh, label mpi).
TEST_F(BenchCli, CommWithoutMpirunRunsAWorldOfOneAndSaysSo) {
  auto r = run_cli({"bench", "comm", "--size", "4KiB,64KiB", "--op", "all-gather,all-reduce", "--repeat", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bench comm: 1 rank, local communicator on the cpu backend"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a world of one"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mpirun -np N strata bench comm"), std::string::npos) << r.out;
  size_t rows = 0;
  for (const char* op : {"\nall-gather ", "\nall-reduce "}) rows += test::occurrences(r.out, op);
  EXPECT_EQ(rows, 4u) << r.out;
}

TEST_F(BenchCli, CommRunBadlySaysHow) {
  struct Case {
    std::vector<std::string> args, env;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"bench", "comm", "--op", "allgather"}, {}, "--op allgather: expected all-gather, reduce-scatter"},
      {{"bench", "comm", "--size", "3"}, {}, "--size 3 B is below 4 x 1 ranks"},
      {{"bench", "comm", "--repeat", "0"}, {}, "--repeat 0: must be >= 1"},
      {{"bench", "comm", "--timeout", "-1"}, {}, "--timeout -1"},
      {{"bench", "comm", "--size", "4KiB"}, {"RANK=0", "WORLD_SIZE=2"}, "launch with mpirun -np 2"},
      {{"bench", "comm", "--size", "4KiB"}, {"RANK=1", "WORLD_SIZE=2"}, ""},  // said once, by rank 0
  };
  for (const Case& c : cases) {
    auto r = run_cli(c.args, c.env);
    std::string joined;
    for (const std::string& a : c.args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined << "\n" << r.err;
    if (c.message.empty()) {
      EXPECT_TRUE(r.err.empty()) << joined << "\n" << r.err;
    } else {
      EXPECT_NE(r.err.find("strata: error: "), std::string::npos) << joined << "\n" << r.err;
      EXPECT_NE(r.err.find(c.message), std::string::npos) << joined << "\n" << r.err;
    }
    EXPECT_TRUE(r.out.empty()) << joined << "\n" << r.out;
  }
}

TEST_F(BenchCli, CudaWithoutAGpuFailsSayingWhy) {
  auto info = run_cli({"info", "--json"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  if (nlohmann::json::parse(info.out)["cuda"]["available"].get<bool>()) GTEST_SKIP() << "a GPU is visible here";
  for (const char* b : {"pcie", "device"}) {
    auto r = run_cli({"bench", b, "--device", "cuda", "--repeat", "1"});
    EXPECT_EQ(r.exit_code, 1) << b << "\n" << r.err;
    EXPECT_NE(r.err.find("strata: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("cuda"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace strata
