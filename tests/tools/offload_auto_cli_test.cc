// `strata train`'s placement by the planner (--offload auto, model/plan/train_placement.h) on the
// CPU backend: a model whose resident run outgrows --gpu-mem trains with the placement `strata
// plan` picks for the same flags, says so in one line, and loses nothing (the resident run's losses
// to the bit); a run that fits nowhere is refused before anything is allocated with the planner's
// report; and every run ends with the planner's predicted step time and peaks beside the measured
// ones, in the log and as the --metrics file's last line. The decisions alone (a given placement
// kept, an explicit auto planning) are tests/model/plan/train_placement_test.cc's.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tools/run_cli.h"

namespace strata {
namespace {

using test::CliResult;
using test::run_cli;
using test::temp_path;

// 24 layers of width 256: resident weights and gradients (~80 MiB fp32) outgrow 24 MiB; paged through
// two slots they do not.
const std::vector<std::string> kDeep = {"--device", "cpu", "--n-layer", "24", "--dim", "256", "--micro-batch", "1",
                                        "--seq", "16", "--eval-every", "0"};

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

struct Metrics {
  std::vector<double> losses;
  nlohmann::json prediction;  // the last line
};

Metrics read_metrics(const std::string& path) {
  std::ifstream in(path);
  Metrics m;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("prediction"))
      m.prediction = j;
    else
      m.losses.push_back(j.at("loss").get<double>());
  }
  return m;
}

// The log line that starts with `prefix`, after the logger's "[...] " stamp.
std::string log_line(const std::string& err, const std::string& prefix) {
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    if (const size_t at = line.find(prefix); at != std::string::npos) return line.substr(at);
  return "";
}

// The number after `label` in `text` (0 when missing).
double number_after(const std::string& text, const std::string& label) {
  const size_t at = text.find(label);
  return at == std::string::npos ? 0.0 : std::strtod(text.c_str() + at + label.size(), nullptr);
}

TEST(OffloadAutoCli, AModelTooLargeForTheDeviceTrainsWithThePlannersPlacement) {
  const std::vector<std::string> budget = {"--gpu-mem", "24MiB"};
  const CliResult plan = run_cli(with(with({"plan"}, kDeep), with(budget, {"--json"})));
  ASSERT_EQ(plan.exit_code, 0) << plan.err << plan.out;
  const nlohmann::json p = nlohmann::json::parse(plan.out);
  const std::string placement = p.at("placement").at("summary");
  EXPECT_NE(p.at("placement").at("offload_param"), "none") << "the weights must page: " << placement;

  const std::string metrics = temp_path("strata_offload_auto.jsonl");
  const CliResult r = run_cli(with(with({"train"}, kDeep), with(budget, {"--steps", "3", "--metrics", metrics})));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string line = log_line(r.err, "offload auto: ");
  ASSERT_NE(line, "") << r.err;
  EXPECT_EQ(line.find("offload auto: " + placement + " (= " + p.at("placement").at("flags").get<std::string>() + ")"),
            0u)
      << line;
  EXPECT_NE(line.find("the flags' placement (weights gpu, optimizer cpu, gradients cpu, activation checkpointing "
                      "off) does not fit: it needs gpu "),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("of 24 MiB (--gpu-mem)"), std::string::npos) << line;
  EXPECT_NE(line.find("bottleneck " + p.at("bottleneck").get<std::string>()), std::string::npos) << line;
  EXPECT_NE(line.find("rates assumed default"), std::string::npos) << line;
  // The run took that placement: its weights page from their home.
  EXPECT_NE(r.err.find("offload: weights homed on " + p.at("placement").at("offload_param").get<std::string>()),
            std::string::npos)
      << r.err;

  // The end of the run: the planner's figures beside the measured ones.
  const Metrics m = read_metrics(metrics);
  ASSERT_EQ(m.losses.size(), 3u);
  const nlohmann::json& j = m.prediction;
  ASSERT_TRUE(j.is_object()) << "no prediction line in " << metrics;
  EXPECT_EQ(j.at("placement"), placement);
  EXPECT_TRUE(j.at("planned").get<bool>());
  EXPECT_EQ(j.at("predicted_gpu_bytes").get<uint64_t>(), p.at("gpu_bytes").get<uint64_t>());
  EXPECT_EQ(j.at("predicted_cpu_bytes").get<uint64_t>(), p.at("cpu_bytes").get<uint64_t>());
  EXPECT_DOUBLE_EQ(j.at("predicted_step_s").get<double>(), p.at("step_s").get<double>());
  EXPECT_LE(j.at("measured_gpu_peak_bytes").get<uint64_t>(), 24ull << 20);
  EXPECT_GT(j.at("measured_gpu_peak_bytes").get<uint64_t>(), 0u);
  EXPECT_GT(j.at("measured_cpu_peak_bytes").get<uint64_t>(), 0u);
  EXPECT_GT(j.at("measured_step_s").get<double>(), 0.0);
  EXPECT_EQ(j.at("measured_steps"), 2);  // steps 2 and 3: the first is the warm-up
  EXPECT_NEAR(j.at("step_ratio").get<double>(),
              j.at("measured_step_s").get<double>() / j.at("predicted_step_s").get<double>(), 1e-9);
  EXPECT_NEAR(j.at("gpu_ratio").get<double>(),
              double(j.at("measured_gpu_peak_bytes").get<uint64_t>()) / double(p.at("gpu_bytes").get<uint64_t>()),
              1e-9);
  // The arena holds what the planner sized, nothing less (the planner test checks it to the byte).
  EXPECT_GE(j.at("gpu_ratio").get<double>(), 1.0);
  EXPECT_EQ(j.at("rate_sources").at("pcie"), "assumed default");
  const std::string step = log_line(r.err, "  step time ");
  EXPECT_GT(number_after(step, "step time "), 0.0) << r.err;
  EXPECT_NE(step.find("(mean of steps 2-3; predicted bottleneck "), std::string::npos) << step;
  EXPECT_NE(log_line(r.err, "predicted vs measured (" + placement + ", chosen by --offload auto):"), "") << r.err;
  EXPECT_NE(log_line(r.err, "  gpu peak "), "") << r.err;
  EXPECT_NE(log_line(r.err, "  pinned peak "), "") << r.err;

  // Placement never changes a bit: the same model resident (the CPU backend's default arena).
  const std::string resident = temp_path("strata_offload_auto_resident.jsonl");
  const CliResult same = run_cli(with(with({"train"}, kDeep), {"--steps", "3", "--metrics", resident}));
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(log_line(same.err, "offload auto: "), "") << "the resident run fits: no planning";
  EXPECT_EQ(read_metrics(resident).losses, m.losses);
  EXPECT_FALSE(read_metrics(resident).prediction.at("planned").get<bool>());
}

TEST(OffloadAutoCli, ARunThatFitsNowhereIsRefusedBeforeAllocatingWithThePlannersReport) {
  // llama-70b's fp32 masters and moments (over a TB) in 20 GiB of pinned memory and no NVMe: the
  // closest placement homes them on NVMe, which is not there.
  const CliResult r = run_cli({"train", "--device", "cpu", "--preset", "llama-70b", "--dtype", "bf16", "--gpu-mem",
                               "24GiB", "--cpu-mem", "20GiB", "--steps", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("strata: error: llama-70b fits no placement on this machine"), std::string::npos) << r.err;
  const std::string shortfall = log_line(r.err, "does not fit: the closest placement (");
  ASSERT_NE(shortfall, "") << r.err;
  EXPECT_GT(number_after(shortfall, "needs "), 1000.0) << shortfall;  // over a TB more nvme
  EXPECT_NE(shortfall.find(" GB more nvme"), std::string::npos) << shortfall;
  EXPECT_NE(r.err.find("what would make it fit:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--nvme-path DIR: add an NVMe path with"), std::string::npos) << r.err;
  // Refused before the data, the backend or the pinned pool.
  EXPECT_EQ(r.err.find("data: "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("device: "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("| loss"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace strata
