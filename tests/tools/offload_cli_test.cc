// `strata train --offload-param cpu|nvme` (and --offload-optimizer nvme) end to end on the CPU
// backend: a model paged through two layer slots trains bit-identically to the resident run (the same losses in --metrics, to the
// last bit); --trace writes valid trace-event JSON with a span for every chunk on every track the
// run used (compute per layer, H2D, NVMe read/write, D2H, host accumulate, CPU Adam). The refusal
// of a device budget below the working set is tests/model/plan/train_preflight_test.cc's.
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
using test::metric_losses;
using test::temp_path;

// gpt2-tiny deepened to 6 layers, so two layer slots must page: 8 chunks (embedding, 6 layers, head).
const std::vector<std::string> kModel = {"train",         "--device", "cpu",       "--n-layer", "6", "--steps", "4",
                                         "--eval-every", "0",        "--log-every", "1"};
constexpr int kChunks = 8;

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
  // Half the layers stay resident beside the paged ones (SplitWeights); on NVMe every layer pages.
  const CliResult cpu = train("cpu", temp_path("strata_offload_cpu.jsonl"), {"--resident-layers", "3"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  // The split update: those 3 layers also update on the device, the paged chunks on the CPU.
  const CliResult split = train("cpu", temp_path("strata_offload_split.jsonl"),
                                {"--resident-layers", "3", "--optimizer-device", "split"});
  ASSERT_EQ(split.exit_code, 0) << split.err;
  const CliResult nvme = train("nvme", temp_path("strata_offload_nvme.jsonl"),
                               {"--nvme-path", swap, "--trace", trace, "--offload-optimizer", "nvme",
                                "--resident-layers", "0"});
  ASSERT_EQ(nvme.exit_code, 0) << nvme.err;
  const std::vector<double> want = metric_losses(temp_path("strata_offload_none.jsonl"));
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(metric_losses(temp_path("strata_offload_cpu.jsonl")), want);
  EXPECT_EQ(metric_losses(temp_path("strata_offload_split.jsonl")), want);
  EXPECT_NE(split.err.find("optimizer: split: the 3 resident layers' update"), std::string::npos) << split.err;
  EXPECT_EQ(metric_losses(temp_path("strata_offload_nvme.jsonl")), want);
  EXPECT_NE(cpu.err.find("offload: weights homed on cpu"), std::string::npos) << cpu.err;
  EXPECT_NE(cpu.err.find("offload: 3 of 6 layers resident on the device"), std::string::npos) << cpu.err;
  EXPECT_NE(nvme.err.find("offload: every layer pages (--resident-layers 0)"), std::string::npos) << nvme.err;
  EXPECT_NE(nvme.err.find("optimizer state homed on nvme"), std::string::npos) << nvme.err;
  EXPECT_NE(nvme.err.find("replayed 3x"), std::string::npos) << nvme.err;  // steps 2..4 follow step 1's trace
  // No --cpu-mem: the read cache's auto leaves the machine's free memory alone, and says so.
  EXPECT_NE(nvme.err.find("no read cache of the NVMe-homed weights (auto: no --cpu-mem budget given"),
            std::string::npos)
      << nvme.err;
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
  for (const char* track :
       {"h2d", "nvme read", "nvme write", "d2h", "host accumulate", "cpu adam", "optimizer read", "optimizer write"}) {
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

// A checkpoint taken with NVMe-homed bf16 weights and optimizer state (streamed out chunk by
// chunk) resumes (the weights reloaded through the paging source, the state written back to its
// extents) into the uninterrupted run's losses, bit for bit.
TEST(OffloadCli, ANvmeHomedRunResumesBitIdentically) {
  const std::string swap = temp_path("strata_offload_cli_resume_swap");
  std::filesystem::create_directories(swap);
  const std::string dir = temp_path("strata_offload_cli_ckpt");
  std::filesystem::remove_all(dir);
  auto run = [&](const std::string& metrics, std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--device", "cpu", "--n-layer", "6", "--eval-every", "0", "--dtype",
                                     "bf16", "--lr-schedule", "constant", "--warmup-steps", "0", "--offload-param",
                                     "nvme", "--offload-optimizer", "nvme", "--nvme-path", swap, "--metrics", metrics};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  const std::string straight = temp_path("strata_offload_straight.jsonl"), halves = temp_path("strata_offload_halves.jsonl");
  // The straight run has a pinned budget: the read cache's auto fills what it leaves.
  const CliResult a = run(straight, {"--steps", "4", "--cpu-mem", "1GiB"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.err.find("auto: what --cpu-mem leaves"), std::string::npos) << a.err;
  const CliResult b = run(halves, {"--steps", "2", "--checkpoint-dir", dir});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  // The second half keeps every chunk in a pinned read cache: the same bits.
  const CliResult c = run(halves, {"--steps", "4", "--resume", dir, "--param-cache", "1GiB", "--resident-layers", "0"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("resumed from"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("a pinned read cache of " + std::to_string(kChunks) + " of the " + std::to_string(kChunks) +
                       " paged chunks"),
            std::string::npos)
      << c.err;
  const std::vector<double> want = metric_losses(straight);
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(metric_losses(halves), want);
}

// A split update needs paged weights (its device part is their resident layers) and a host home for
// the paged chunks' state; each refusal says what to pass instead.
TEST(OffloadCli, ASplitUpdateNeedsPagedWeightsAndAHostHome) {
  const CliResult resident = train("none", temp_path("strata_offload_split_refused.jsonl"),
                                   {"--optimizer-device", "split"});
  EXPECT_NE(resident.exit_code, 0);
  EXPECT_NE(resident.err.find("keeps every layer resident; pass --optimizer-device device"), std::string::npos)
      << resident.err;
  const CliResult none = train("cpu", temp_path("strata_offload_split_refused.jsonl"),
                               {"--optimizer-device", "split", "--offload-optimizer", "none"});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("pass --offload-optimizer cpu or nvme"), std::string::npos) << none.err;
}

// A split with no layer resident has nothing for the device to update: it says so and runs the
// whole update on the CPU, the losses the resident run's.
TEST(OffloadCli, ASplitWithNoResidentLayerRunsTheWholeUpdateOnTheCpu) {
  const CliResult resident = train("none", temp_path("strata_offload_split_none_ref.jsonl"));
  ASSERT_EQ(resident.exit_code, 0) << resident.err;
  const CliResult split = train("cpu", temp_path("strata_offload_split_none.jsonl"),
                                {"--optimizer-device", "split", "--resident-layers", "0"});
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_NE(split.err.find("none is resident: the whole update runs on the CPU"), std::string::npos) << split.err;
  EXPECT_EQ(metric_losses(temp_path("strata_offload_split_none.jsonl")),
            metric_losses(temp_path("strata_offload_split_none_ref.jsonl")));
}

TEST(OffloadCli, NvmeHomeNeedsAnNvmePath) {
  const CliResult r = train("nvme", temp_path("strata_offload_nopath.jsonl"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("nvme"), std::string::npos) << r.err;
  const CliResult states = train("none", temp_path("strata_offload_nopath.jsonl"), {"--offload-optimizer", "nvme"});
  EXPECT_EQ(states.exit_code, 2) << states.err;
  EXPECT_NE(states.err.find("homes the optimizer state in NVMe swap files, but no nvme_path"), std::string::npos)
      << states.err;
  const CliResult few = train("none", temp_path("strata_offload_nopath.jsonl"),
                              {"--offload-optimizer", "nvme", "--nvme-path", "/tmp", "--optimizer-staging", "2"});
  EXPECT_EQ(few.exit_code, 2) << few.err;
  EXPECT_NE(few.err.find("at least 3 staging buffers"), std::string::npos) << few.err;
  const CliResult clash = train("none", temp_path("strata_offload_nopath.jsonl"),
                                {"--offload-optimizer", "cpu", "--optimizer-device", "device"});
  EXPECT_EQ(clash.exit_code, 2) << clash.err;
  EXPECT_NE(clash.err.find("disagree"), std::string::npos) << clash.err;
}

// A ZeRO-Infinity config (DeepSpeed's offload_param and offload_optimizer on nvme) places both on
// NVMe with no "no effect" warning for those keys; `strata config` names the file as each value's
// source; the run trains bit-identically to the resident one.
TEST(OffloadCli, AZeroInfinityConfigPlacesWeightsAndOptimizerStateOnNvme) {
  const std::string swap = temp_path("strata_offload_ds_swap");
  std::filesystem::create_directories(swap);
  const std::string file = temp_path("strata_offload_ds.json");
  std::ofstream(file) << R"({"zero_optimization": {"stage": 3,
      "offload_param": {"device": "nvme", "nvme_path": ")" << swap << R"(", "buffer_count": 3, "pin_memory": true},
      "offload_optimizer": {"device": "nvme", "nvme_path": ")" << swap << R"(", "buffer_count": 5,
                            "pin_memory": true}}})";
  const CliResult shown = run_cli({"config", "--config", file});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  for (const char* key : {"offload_param", "offload_optimizer", "optimizer_staging", "nvme_staging", "nvme_path"}) {
    const size_t at = shown.out.find(std::string("\n") + key + " ");
    ASSERT_NE(at, std::string::npos) << key << " missing:\n" << shown.out;
    const std::string row = shown.out.substr(at + 1, shown.out.find('\n', at + 1) - at - 1);
    EXPECT_NE(row.find("file " + file), std::string::npos) << row;
  }
  EXPECT_EQ(shown.err.find("offload_optimizer.device"), std::string::npos) << shown.err;
  EXPECT_EQ(shown.err.find("offload_param.device"), std::string::npos) << shown.err;

  const CliResult resident = run_cli({"train", "--device", "cpu", "--n-layer", "6", "--steps", "3", "--eval-every", "0",
                                      "--metrics", temp_path("strata_offload_ds_none.jsonl")});
  ASSERT_EQ(resident.exit_code, 0) << resident.err;
  const CliResult ds = run_cli({"train", "--device", "cpu", "--n-layer", "6", "--steps", "3", "--eval-every", "0",
                                "--config", file, "--metrics", temp_path("strata_offload_ds.jsonl")});
  ASSERT_EQ(ds.exit_code, 0) << ds.err;
  EXPECT_NE(ds.err.find("offload: weights homed on nvme"), std::string::npos) << ds.err;
  EXPECT_NE(ds.err.find("optimizer state homed on nvme"), std::string::npos) << ds.err;
  EXPECT_NE(ds.err.find("5 pinned staging buffers"), std::string::npos) << ds.err;
  // stage and pin_memory are named as having no effect; the placement keys are not.
  for (const char* key : {"offload_optimizer.device", "offload_param.device", "buffer_count", "nvme_path"})
    EXPECT_EQ(ds.err.find(key), std::string::npos) << key << ": " << ds.err;
  EXPECT_EQ(metric_losses(temp_path("strata_offload_ds.jsonl")),
            metric_losses(temp_path("strata_offload_ds_none.jsonl")));
}

}  // namespace
}  // namespace strata
