// `strata train --offload-param cpu|nvme` end to end on the CPU backend: a model paged through
// two layer slots trains bit-identically to the resident run (the same losses in --metrics, to the
// last bit); --trace writes valid trace-event JSON with a span for every chunk on every track the
// run used (compute per layer, H2D, NVMe read/write, D2H, host accumulate, CPU Adam); a device
// budget below the minimum working set is refused before anything is allocated, naming it.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tools/run_cli.h"

namespace strata {
namespace {

using test::CliResult;
using test::run_cli;

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

// gpt2-tiny deepened to 6 layers, so two layer slots must page: 8 chunks (embedding, 6 layers, head).
const std::vector<std::string> kModel = {"train",         "--device", "cpu",       "--n-layer", "6", "--steps", "4",
                                         "--eval-every", "0",        "--log-every", "1"};
constexpr int kChunks = 8;

std::vector<double> losses(const std::string& metrics) {
  std::ifstream in(metrics);
  std::vector<double> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line).at("loss").get<double>());
  return out;
}

CliResult train(const std::string& home, const std::string& metrics, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = kModel;
  args.insert(args.end(), {"--offload-param", home, "--metrics", metrics});
  args.insert(args.end(), extra.begin(), extra.end());
  return run_cli(args);
}

TEST(OffloadCli, PagedRunsEqualTheResidentRunAndTheTraceCoversEveryChunk) {
  const std::string swap = temp_path("strata_offload_cli_swap");
  std::filesystem::create_directories(swap);
  const std::string trace = temp_path("strata_offload_cli_trace.json");
  std::filesystem::remove(trace);
  const CliResult resident = train("none", temp_path("strata_offload_none.jsonl"));
  ASSERT_EQ(resident.exit_code, 0) << resident.err;
  const CliResult cpu = train("cpu", temp_path("strata_offload_cpu.jsonl"));
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  const CliResult nvme = train("nvme", temp_path("strata_offload_nvme.jsonl"), {"--nvme-path", swap, "--trace", trace});
  ASSERT_EQ(nvme.exit_code, 0) << nvme.err;
  const std::vector<double> want = losses(temp_path("strata_offload_none.jsonl"));
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(losses(temp_path("strata_offload_cpu.jsonl")), want);
  EXPECT_EQ(losses(temp_path("strata_offload_nvme.jsonl")), want);
  EXPECT_NE(cpu.err.find("offload: weights homed on cpu"), std::string::npos) << cpu.err;
  EXPECT_NE(nvme.err.find("replayed 3x"), std::string::npos) << nvme.err;  // steps 2..4 follow step 1's trace
  EXPECT_NE(nvme.err.find("| h2d "), std::string::npos) << nvme.err;
  // The run's swap directory is gone at exit.
  for (const auto& e : std::filesystem::directory_iterator(swap)) ADD_FAILURE() << "left behind: " << e.path();

  std::ifstream in(trace);
  const nlohmann::json j = nlohmann::json::parse(in);  // throws (fails the test) when not valid JSON
  std::map<int64_t, std::string> track_of_tid;
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name") track_of_tid[e.at("tid")] = e.at("args").at("name");
  std::map<std::string, std::set<int>> chunks;  // track -> chunks with a span
  std::set<std::string> compute;
  const std::regex chunk_suffix(".*chunk ([0-9]+)$");
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    const std::string track = track_of_tid.at(e.at("tid"));
    const std::string name = e.at("name");
    std::smatch m;
    if (std::regex_match(name, m, chunk_suffix)) chunks[track].insert(std::stoi(m[1]));
    if (track == "compute") compute.insert(name);
  }
  for (const char* track : {"h2d", "nvme read", "nvme write", "d2h", "host accumulate", "cpu adam"}) {
    SCOPED_TRACE(track);
    EXPECT_EQ(chunks[track].size(), size_t(kChunks)) << "a span for every chunk";
  }
  for (int l = 0; l < 6; ++l) {
    EXPECT_TRUE(compute.count("forward layer " + std::to_string(l))) << l;
    EXPECT_TRUE(compute.count("backward layer " + std::to_string(l))) << l;
  }
  for (const char* name : {"forward embedding", "forward head", "backward head", "backward embedding"})
    EXPECT_TRUE(compute.count(name)) << name;
}

// A checkpoint taken with NVMe-homed bf16 weights resumes (the weights reloaded through the
// paging source) into the uninterrupted run's losses, bit for bit.
TEST(OffloadCli, ANvmeHomedRunResumesBitIdentically) {
  const std::string swap = temp_path("strata_offload_cli_resume_swap");
  std::filesystem::create_directories(swap);
  const std::string dir = temp_path("strata_offload_cli_ckpt");
  std::filesystem::remove_all(dir);
  auto run = [&](const std::string& metrics, std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--device", "cpu", "--n-layer", "6", "--eval-every", "0", "--dtype",
                                     "bf16", "--lr-schedule", "constant", "--warmup-steps", "0", "--offload-param",
                                     "nvme", "--nvme-path", swap, "--metrics", metrics};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  const std::string straight = temp_path("strata_offload_straight.jsonl"), halves = temp_path("strata_offload_halves.jsonl");
  const CliResult a = run(straight, {"--steps", "4"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const CliResult b = run(halves, {"--steps", "2", "--checkpoint-dir", dir});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const CliResult c = run(halves, {"--steps", "4", "--resume", dir});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("resumed from"), std::string::npos) << c.err;
  const std::vector<double> want = losses(straight);
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(losses(halves), want);
}

TEST(OffloadCli, ABudgetBelowTheWorkingSetIsRefusedBeforeAllocating) {
  // 64 x 64 tokens: the activations alone outgrow the smallest budget.
  const CliResult r = train("cpu", temp_path("strata_offload_small.jsonl"),
                            {"--gpu-mem", "16MiB", "--micro-batch", "64", "--seq", "64"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("needs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the minimum with 2 layer slots is"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("step 1/"), std::string::npos) << "nothing trained";
}

TEST(OffloadCli, TooLittleDeviceMemoryForResidentWeightsSuggestsPaging) {
  // 24 layers of width 256: resident weights and gradients (~80 MiB fp32) outgrow 24 MiB, two slots (~20 MiB) do not.
  const CliResult r = run_cli({"train", "--device", "cpu", "--n-layer", "24", "--dim", "256", "--steps", "1",
                               "--micro-batch", "1", "--seq", "16", "--gpu-mem", "24MiB"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--offload-param cpu (or nvme) pages the weights"), std::string::npos) << r.err;
}

TEST(OffloadCli, NvmeHomeNeedsAnNvmePath) {
  const CliResult r = train("nvme", temp_path("strata_offload_nopath.jsonl"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("nvme"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace strata
