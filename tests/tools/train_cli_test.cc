// `strata train` end to end on the CPU backend: a short run prints one progress line per step
// and writes one --metrics JSON line per step with the required fields, then the planner's
// prediction beside the measured figures (train_placement.h); a text file trains too;
// a checkpointed run resumes bit-identically; unsupported precision, an unknown preset, a too-long sequence and a missing file exit 2.
#include <cmath>
#include <filesystem>
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
using test::metric_losses;
using test::temp_path;

int count_lines_with(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

TEST(TrainCli, FiveStepsPrintFiveProgressLinesAndWriteFiveMetricsLines) {
  const std::string metrics = temp_path("strata_train_metrics.jsonl");
  std::filesystem::remove(metrics);
  CliResult r = run_cli({"train", "--device", "cpu", "--steps", "5", "--metrics", metrics});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "/5 | loss "), 5) << r.err;
  EXPECT_NE(r.err.find("built-in corpus"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cpu backend"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("trained 5 steps"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("peak memory: device (cpu backend) "), std::string::npos) << r.err;
  // The setup's one line of phases (model/train/setup_progress.h), before the first step's.
  EXPECT_EQ(count_lines_with(r.err, "[info] setup: "), 1) << r.err;
  EXPECT_LT(r.err.find("[info] setup: "), r.err.find("/5 | loss ")) << r.err;
  EXPECT_NE(r.err.find("; pinning "), std::string::npos) << r.err;

  std::ifstream in(metrics);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 6u);  // five steps, then the prediction
  const nlohmann::json prediction = lines.back();
  lines.pop_back();
  EXPECT_TRUE(prediction.at("prediction").get<bool>());
  EXPECT_FALSE(prediction.at("planned").get<bool>()) << "gpt2-tiny fits resident: the flags' placement";
  EXPECT_EQ(prediction.at("placement"), "weights gpu, optimizer cpu, gradients cpu, activation checkpointing off");
  EXPECT_EQ(prediction.at("measured_steps"), 4);
  for (const char* key : {"predicted_step_s", "measured_step_s", "step_ratio", "gpu_ratio", "cpu_ratio"})
    EXPECT_GT(prediction.at(key).get<double>(), 0.0) << key;
  EXPECT_EQ(prediction.at("measured_gpu_peak_bytes"), lines.back().at("peak_bytes").at("gpu"));
  EXPECT_EQ(prediction.at("measured_cpu_peak_bytes"), lines.back().at("peak_bytes").at("cpu"));
  EXPECT_NE(r.err.find("predicted vs measured (weights gpu, optimizer cpu"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(mean of steps 2-5; predicted bottleneck "), std::string::npos) << r.err;
  for (size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json& j = lines[i];
    EXPECT_EQ(j.at("step").get<uint64_t>(), i + 1);
    const double loss = j.at("loss").get<double>();
    EXPECT_GT(loss, 0.5);
    EXPECT_LT(loss, 7.0);  // ln(256) = 5.55 at the start
    EXPECT_GT(j.at("lr").get<double>(), 0.0);
    EXPECT_GT(j.at("tokens_per_s").get<double>(), 0.0);
    EXPECT_GT(j.at("step_s").get<double>(), 0.0);
    EXPECT_GT(j.at("peak_bytes").at("gpu").get<uint64_t>(), 0u);
    EXPECT_GT(j.at("peak_bytes").at("cpu").get<uint64_t>(), 0u);
  }
  EXPECT_TRUE(lines.back().contains("val_loss")) << "the last step evaluates";
}

TEST(TrainCli, TrainsOnATextFile) {
  const std::string text = temp_path("strata_train_text.txt");
  std::ofstream(text) << std::string(4000, 'a') + std::string(4000, 'b');
  CliResult r = run_cli({"train", "--device", "cpu", "--steps", "3", "--text", text, "--micro-batch", "2", "--seq",
                         "16", "--eval-batches", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "/3 | loss "), 3) << r.err;
  EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
}

// A constant rate, so a 3-step run is the first half of a 6-step run; the resume restores the
// weights, the moments, the step and the data loader position.
TEST(TrainCli, ResumedRunEqualsAStraightRunBitForBit) {
  const std::vector<std::string> common = {"train", "--device", "cpu", "--lr-schedule", "constant",
                                           "--warmup-steps", "0", "--eval-every", "0"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  const std::string straight = temp_path("strata_train_straight.jsonl"), halves = temp_path("strata_train_halves.jsonl");
  const std::string dir = temp_path("strata_train_ckpt");
  std::filesystem::remove_all(dir);
  CliResult a = with({"--steps", "6", "--metrics", straight});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  CliResult b = with({"--steps", "3", "--metrics", halves, "--checkpoint-dir", dir});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/step-000003/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/step-000003/optimizer.safetensors"));
  CliResult done = with({"--steps", "3", "--resume", dir});
  EXPECT_EQ(done.exit_code, 2);
  EXPECT_NE(done.err.find("already trained 3 steps"), std::string::npos) << done.err;
  CliResult c = with({"--steps", "6", "--metrics", halves, "--resume", dir});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("resumed from"), std::string::npos) << c.err;
  EXPECT_EQ(count_lines_with(c.err, "/6 | loss "), 3) << c.err;
  const std::vector<double> want = metric_losses(straight);
  ASSERT_EQ(want.size(), 6u);
  EXPECT_EQ(metric_losses(halves), want);
  // Resuming again from step 3 (the run directory's step-3 checkpoint) rewrites the metrics file's
  // steps 4-6 (and the run's closing prediction line) instead of repeating them.
  CliResult again = with({"--steps", "6", "--metrics", halves, "--resume", dir + "/step-000003"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("dropped 4 line(s)"), std::string::npos) << again.err;
  EXPECT_EQ(metric_losses(halves), want);
}

// Mixed precision on the CPU backend: bf16 and fp16 (with its loss scale in every metrics line)
// train with fp32 masters; fp16 also with 8-bit Adam moments, bf16 also with the optimizer on
// the device.
TEST(TrainCli, Bf16AndFp16Train) {
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--dtype", "bf16"},
        std::vector<std::string>{"--dtype", "fp16", "--optimizer-type", "adamw8bit"},
        std::vector<std::string>{"--dtype", "bf16", "--optimizer-device", "device"}}) {
    const std::string metrics = temp_path("strata_train_half.jsonl");
    std::vector<std::string> args = {"train", "--device", "cpu", "--steps", "30", "--eval-every", "0",
                                     "--metrics", metrics};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(extra[1]), std::string::npos) << r.err;  // the banner names the precision
    std::ifstream in(metrics);
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);)
      if (nlohmann::json j = nlohmann::json::parse(line); !j.contains("prediction")) lines.push_back(j);
    ASSERT_EQ(lines.size(), 30u);
    EXPECT_LT(lines.back().at("loss").get<double>(), lines.front().at("loss").get<double>() - 0.5) << r.err;
    EXPECT_EQ(lines.front().contains("loss_scale"), extra[1] == "fp16");
  }
}

// Random tokens stand in for data (throughput runs): uniform over the preset's vocabulary, so the
// first loss is about ln(V); the same seed gives the same losses. Not together with --text.
TEST(TrainCli, RandomTokensTrainWithoutData) {
  const std::vector<std::string> args = {"train", "--device", "cpu", "--preset", "llama-tiny", "--random-tokens",
                                         "64K", "--steps", "2", "--eval-every", "0"};
  CliResult a = run_cli(args), b = run_cli(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.err.find("65536 random tokens"), std::string::npos) << a.err;
  const size_t at = a.err.find("/2 | loss ");
  ASSERT_NE(at, std::string::npos) << a.err;
  EXPECT_NEAR(std::stod(a.err.substr(at + 10)), std::log(256.0), 0.3) << a.err;  // llama-tiny: V = 256
  EXPECT_EQ(count_lines_with(b.err, "/2 | loss "), 2) << b.err;
  EXPECT_EQ(a.err.substr(at, 20), b.err.substr(b.err.find("/2 | loss "), 20));
  CliResult both = run_cli({"train", "--random-tokens", "1M", "--text", "/etc/hostname"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("random_tokens"), std::string::npos) << both.err;
  EXPECT_NE(both.err.find("pass one of them"), std::string::npos) << both.err;
}

// Explicit dimensions over a preset: the run trains the changed model and names it.
TEST(TrainCli, DimensionFlagsChangeThePreset) {
  CliResult r = run_cli({"train", "--device", "cpu", "--preset", "llama-tiny", "--n-layer", "1", "--dim", "32",
                         "--n-head", "4", "--steps", "2", "--eval-every", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("model: llama-tiny[dim=32,n_layer=1,n_head=4]"), std::string::npos) << r.err;
  CliResult bad = run_cli({"train", "--preset", "llama-tiny", "--n-head", "5"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("not a multiple of n_head 5"), std::string::npos) << bad.err;
}

TEST(TrainCli, AnIntegerDtypeIsRefused) {
  CliResult r = run_cli({"train", "--dtype", "u8"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("u8"), std::string::npos) << r.err;
}

TEST(TrainCli, UnknownPresetListsThePresets) {
  CliResult r = run_cli({"train", "--preset", "gpt2-tinyy"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("gpt2-tinyy"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gpt2-tiny,"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("llama-tiny"), std::string::npos) << r.err;
}

TEST(TrainCli, SequenceLongerThanThePresetIsAUsageError) {
  CliResult r = run_cli({"train", "--seq", "65"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--seq 65 is longer than gpt2-tiny's 64 positions"), std::string::npos) << r.err;
}

TEST(TrainCli, MissingTextFileIsAUsageErrorNamingIt) {
  const std::string missing = temp_path("strata_train_no_such_file.txt");
  CliResult r = run_cli({"train", "--text", missing});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
}

}  // namespace
}  // namespace strata
