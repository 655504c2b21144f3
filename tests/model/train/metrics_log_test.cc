// Tests of the --metrics JSON lines file (fields, flushing per line, errors naming the path) and
// of the progress line and run summary text.
#include "model/train/metrics_log.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/model/model_test_files.h"

namespace strata::model {
namespace {

using testing::expect_value;
using testing::TempDir;
using testing::write_text;

constexpr uint64_t kMiB = 1024 * 1024;

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

StepMetrics sample_step(uint64_t step) {
  StepMetrics m;
  m.step = step;
  m.loss = 3.4512;
  m.lr = 6e-4;
  m.tokens_per_s = 12345;
  m.step_s = 0.083;
  m.bytes = {41 * kMiB, 0, 0};
  m.peak_bytes = {52 * kMiB, 7 * kMiB, 0};
  return m;
}

TEST(MetricsLogTest, EachStepIsOneJsonObjectWithTheFields) {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  {
    MetricsLog log = expect_value(MetricsLog::open(path));
    ASSERT_TRUE(log.write(sample_step(1)).is_ok());
    StepMetrics eval = sample_step(2);
    eval.val_loss = 3.25;
    eval.grad_norm = 0.75;
    eval.loss_scale = 65536;
    eval.skipped = true;
    ASSERT_TRUE(log.write(eval).is_ok());
  }
  const std::vector<std::string> lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  const nlohmann::json first = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(first.at("step").get<uint64_t>(), 1u);
  EXPECT_DOUBLE_EQ(first.at("loss").get<double>(), 3.4512);
  EXPECT_DOUBLE_EQ(first.at("lr").get<double>(), 6e-4);
  EXPECT_DOUBLE_EQ(first.at("tokens_per_s").get<double>(), 12345.0);
  EXPECT_DOUBLE_EQ(first.at("step_s").get<double>(), 0.083);
  EXPECT_EQ(first.at("peak_bytes").at("gpu").get<uint64_t>(), 52 * kMiB);
  EXPECT_EQ(first.at("peak_bytes").at("cpu").get<uint64_t>(), 7 * kMiB);
  EXPECT_EQ(first.at("peak_bytes").at("nvme").get<uint64_t>(), 0u);
  for (const char* absent : {"val_loss", "grad_norm", "loss_scale", "skipped", "tflops", "mfu", "device_used_bytes"})
    EXPECT_FALSE(first.contains(absent)) << absent;
  EXPECT_EQ(lines[0].rfind("{\"step\":1,", 0), 0u) << lines[0];  // step first, for people reading it
  const nlohmann::json second = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(second.at("step").get<uint64_t>(), 2u);
  EXPECT_DOUBLE_EQ(second.at("val_loss").get<double>(), 3.25);
  EXPECT_DOUBLE_EQ(second.at("grad_norm").get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(second.at("loss_scale").get<double>(), 65536.0);
  EXPECT_TRUE(second.at("skipped").get<bool>());
}

TEST(MetricsLogTest, GpuFieldsAndNonFiniteLoss) {
  StepMetrics m = sample_step(3);
  m.loss = std::numeric_limits<double>::quiet_NaN();
  m.tflops = 45.25;
  m.mfu = 0.381;
  m.device_used_bytes = 10 * 1024 * kMiB;
  const nlohmann::json j = nlohmann::json::parse(metrics_json_line(m));
  EXPECT_TRUE(j.at("loss").is_null());
  EXPECT_DOUBLE_EQ(j.at("tflops").get<double>(), 45.25);
  EXPECT_DOUBLE_EQ(j.at("mfu").get<double>(), 0.381);
  EXPECT_EQ(j.at("device_used_bytes").get<uint64_t>(), 10 * 1024 * kMiB);
}

TEST(MetricsLogTest, EveryLineIsOnDiskAsSoonAsItIsWritten) {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  MetricsLog log = expect_value(MetricsLog::open(path));
  ASSERT_TRUE(log.write(sample_step(1)).is_ok());
  // Read through another handle while the log is still open: the line is complete.
  EXPECT_EQ(read_all(path), metrics_json_line(sample_step(1)) + "\n");
  ASSERT_TRUE(log.write(sample_step(2)).is_ok());
  EXPECT_EQ(read_lines(path).size(), 2u);
}

TEST(MetricsLogTest, AppendKeepsTheLinesOfTheRunBeingResumed) {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  write_text(path, metrics_json_line(sample_step(1)) + "\n");
  {
    MetricsLog log = expect_value(MetricsLog::open(path, MetricsLog::Mode::append));
    ASSERT_TRUE(log.write(sample_step(2)).is_ok());
  }
  const std::vector<std::string> lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(lines[1]).at("step").get<uint64_t>(), 2u);
  {
    MetricsLog log = expect_value(MetricsLog::open(path));  // truncate: a fresh run
    ASSERT_TRUE(log.write(sample_step(1)).is_ok());
  }
  EXPECT_EQ(read_lines(path).size(), 1u);
}

TEST(MetricsLogTest, OpeningInAMissingDirectoryNamesThePath) {
  TempDir dir;
  const std::string path = dir.file("no_such_dir/metrics.jsonl");
  const StatusOr<MetricsLog> log = MetricsLog::open(path);
  ASSERT_FALSE(log.is_ok());
  EXPECT_EQ(log.status().code(), Code::not_found);
  EXPECT_NE(log.status().message().find(path), std::string::npos) << log.status().message();
  EXPECT_NE(log.status().message().find("--metrics"), std::string::npos) << log.status().message();
}

TEST(MetricsLogTest, AFullDiskIsAnErrorNamingTheFile) {
  StatusOr<MetricsLog> log = MetricsLog::open("/dev/full");
  if (!log.is_ok()) GTEST_SKIP() << "/dev/full cannot be opened here: " << log.status().to_string();
  const Status s = log->write(sample_step(7));
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), Code::no_space);
  EXPECT_NE(s.message().find("step 7"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("/dev/full"), std::string::npos) << s.message();
}

TEST(MetricsLogTest, AMovedFromLogRefusesToWrite) {
  TempDir dir;
  MetricsLog a = expect_value(MetricsLog::open(dir.file("m.jsonl")));
  MetricsLog b = std::move(a);
  EXPECT_TRUE(b.write(sample_step(1)).is_ok());
  const Status s = a.write(sample_step(2));  // NOLINT(bugprone-use-after-move): the contract under test
  EXPECT_EQ(s.code(), Code::failed_precondition);
  EXPECT_NE(s.message().find("moved"), std::string::npos) << s.message();
}

// The reader takes back what the log wrote (step rows only: the prediction row that ends a run is
// skipped), reads a null loss as NaN, skips a last line cut short, and names the line of a bad one.
TEST(MetricsFileTest, ReadsTheStepRowsBack) {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  {
    MetricsLog log = expect_value(MetricsLog::open(path));
    StepMetrics a = sample_step(1);
    a.val_loss = 3.25;
    ASSERT_TRUE(log.write(a).is_ok());
    StepMetrics b = sample_step(2);
    b.loss = std::nan("");
    ASSERT_TRUE(log.write(b).is_ok());
  }
  std::ofstream(path, std::ios::app) << "{\"prediction\": {\"step_s\": 1.0}}\n{\"step\": 3, \"lo";
  const std::vector<StepMetrics> rows = expect_value(read_metrics_file(path));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].step, 1u);
  EXPECT_DOUBLE_EQ(rows[0].loss, sample_step(1).loss);
  EXPECT_DOUBLE_EQ(rows[0].tokens_per_s, sample_step(1).tokens_per_s);
  EXPECT_EQ(rows[0].peak_bytes.gpu, sample_step(1).peak_bytes.gpu);
  EXPECT_EQ(rows[0].val_loss, 3.25);
  EXPECT_TRUE(std::isnan(rows[1].loss));
  EXPECT_FALSE(rows[1].val_loss.has_value());

  std::ofstream(path, std::ios::app) << "\n{\"step\": 4, \"loss\": 1.0}\n";  // the cut line is no longer last
  const Status bad = read_metrics_file(path).status();
  EXPECT_EQ(bad.code(), Code::invalid_argument);
  EXPECT_NE(bad.message().find(path + " line 4 is not a JSON object"), std::string::npos) << bad.message();
  EXPECT_EQ(read_metrics_file(dir.file("absent.jsonl")).status().code(), Code::not_found);
}

TEST(ProgressLineTest, CpuRun) {
  EXPECT_EQ(format_progress_line(sample_step(12), 200),
            "step  12/200 | loss 3.4512 | lr 6.00e-04 | 12.3K tok/s | 0.083 s | gpu 41 MiB (peak 52 MiB) | "
            "cpu 0 B (peak 7 MiB)");
}

TEST(ProgressLineTest, Fp16GpuRunWithEvaluation) {
  StepMetrics m = sample_step(1000);
  m.peak_bytes.cpu = 0;
  m.bytes.nvme = 3 * 1024 * kMiB;
  m.peak_bytes.nvme = 4 * 1024 * kMiB;
  m.val_loss = 3.21;
  m.grad_norm = 0.9123;
  m.loss_scale = 32768;
  m.skipped = true;
  m.tflops = 45.21;
  m.mfu = 0.3814;
  m.device_used_bytes = 10 * 1024 * kMiB + 200 * kMiB;
  EXPECT_EQ(format_progress_line(m, 1000),
            "step 1000/1000 | loss 3.4512 | lr 6.00e-04 | 12.3K tok/s | 0.083 s | gpu 41 MiB (peak 52 MiB) | "
            "nvme 3 GiB (peak 4 GiB) | val 3.2100 | norm 0.912 | scale 32768 | skipped | 45.2 TFLOP/s | "
            "MFU 38.1% | nvml 10.2 GiB");
}

TEST(ProgressLineTest, GpuWithoutAKnownPeakShowsTflopsWithoutMfu) {
  StepMetrics m = sample_step(5);
  m.peak_bytes.cpu = 0;
  m.tflops = 12.34;
  EXPECT_EQ(format_progress_line(m, 9),
            "step 5/9 | loss 3.4512 | lr 6.00e-04 | 12.3K tok/s | 0.083 s | gpu 41 MiB (peak 52 MiB) | 12.3 TFLOP/s");
}

TEST(ProgressLineTest, CpuBackendNamesItsDeviceTierSo) {
  EXPECT_EQ(format_progress_line(sample_step(12), 200, kCpuBackendTierLabel),
            "step  12/200 | loss 3.4512 | lr 6.00e-04 | 12.3K tok/s | 0.083 s | device (cpu backend) 41 MiB "
            "(peak 52 MiB) | cpu 0 B (peak 7 MiB)");
}

TEST(LiveLineTest, BarPercentEtaAndHeldOutLoss) {
  EXPECT_EQ(format_live_line(sample_step(12), 200, 83.4, std::nullopt),
            " 12/200 [..........]   6%  loss 3.4512  12.3K tok/s  ETA 1:23");
  EXPECT_EQ(format_live_line(sample_step(150), 200, std::nullopt, 3.21),
            "150/200 [#######...]  75%  loss 3.4512  12.3K tok/s  ETA ?  val 3.2100");
  EXPECT_EQ(format_live_line(sample_step(200), 200, 0.0, std::nullopt),
            "200/200 [##########] 100%  loss 3.4512  12.3K tok/s  ETA 0:00");
  // Within 80 columns up to 9999 steps, hours of ETA and a held-out loss (a longer one is cut to
  // the terminal by StatusLine).
  EXPECT_LE(format_live_line(sample_step(9998), 9999, 9 * 3600.0, 12.345).size(), 80u);
}

TEST(LiveLineTest, Durations) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(27.4), "0:27");
  EXPECT_EQ(format_duration(59.6), "1:00");
  EXPECT_EQ(format_duration(725), "12:05");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(-5), "0:00");
  EXPECT_EQ(format_duration(std::nan("")), "0:00");
}

TEST(RunSummaryTest, Text) {
  RunSummary s;
  s.steps = 200;
  s.tokens = 51200;
  s.seconds = 41.3;
  s.first_loss = 5.5452;
  s.last_loss = 2.311;
  s.last_val_loss = 2.4012;
  s.last_val_step = 200;
  s.peak_bytes = {52 * kMiB, 310 * kMiB, 0};
  EXPECT_EQ(format_run_summary(s),
            "trained 200 steps in 41.3 s: 51.2K tokens at 1.24K tok/s\n"
            "loss 5.5452 -> 2.3110, val 2.4012 at step 200\n"
            "peak memory: gpu 52 MiB, cpu 310 MiB, nvme 0 B");
  s.steps = 1;
  s.last_val_loss.reset();
  s.skipped_steps = 3;
  s.mean_mfu = 0.25;
  EXPECT_EQ(format_run_summary(s),
            "trained 1 step in 41.3 s: 51.2K tokens at 1.24K tok/s\n"
            "loss 5.5452 -> 2.3110\n"
            "peak memory: gpu 52 MiB, cpu 310 MiB, nvme 0 B\n"
            "skipped 3 updates (non-finite gradients)\n"
            "mean MFU 25.0%");
  s.device_label = kCpuBackendTierLabel;
  EXPECT_NE(format_run_summary(s).find("peak memory: device (cpu backend) 52 MiB, cpu 310 MiB, nvme 0 B"),
            std::string::npos);
}

}  // namespace
}  // namespace strata::model
