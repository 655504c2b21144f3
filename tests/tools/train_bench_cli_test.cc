// `strata train --bench` end to end on the CPU backend: with weights and optimizer state homed on
// NVMe the run measures the disk (read and write GB/s > 0), prints a line per step after the
// warm-up and a mean line, a positive bound and an efficiency in (0, 1.5], and ends its --metrics
// file with one bench JSON line (before the prediction line every run ends with); a resident run's
// bound is its compute alone.
#include <filesystem>
#include <fstream>
#include <regex>
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

// gpt2-tiny deepened to 6 layers (two layer slots must page), three steps: a warm-up and two more.
const std::vector<std::string> kModel = {"train", "--device", "cpu", "--n-layer", "6", "--steps", "3",
                                         "--eval-every", "0", "--bench"};

// The table's rows: the first word of each line that starts with a step number or "mean", with
// the line's numbers.
struct Row {
  std::string label;
  std::vector<double> values;  // step s, compute s, ..., nvme s, bound s, efficiency
};
std::vector<Row> table_rows(const std::string& out) {
  std::vector<Row> rows;
  std::istringstream in(out);
  const std::regex row_start("^([0-9]+|mean) ");
  for (std::string line; std::getline(in, line);) {
    if (!std::regex_search(line, row_start) || line.find("(warm-up)") != std::string::npos) continue;
    std::istringstream words(line);
    Row r;
    words >> r.label;
    for (double v; words >> v;) r.values.push_back(v);
    rows.push_back(r);
  }
  return rows;
}

double number_after(const std::string& text, const std::string& before) {
  const size_t at = text.find(before);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + before.size()));
}

TEST(TrainBenchCli, NvmeRunMeasuresTheDiskAndPrintsEachStepsBound) {
  const std::string swap = temp_path("strata_train_bench_swap");
  std::filesystem::create_directories(swap);
  const std::string metrics = temp_path("strata_train_bench.jsonl");
  std::vector<std::string> args = kModel;
  args.insert(args.end(), {"--offload-param", "nvme", "--offload-optimizer", "nvme", "--nvme-path", swap, "--metrics",
                           metrics});
  const CliResult r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;

  EXPECT_NE(r.out.find("1 (warm-up)"), std::string::npos) << r.out;
  const std::vector<Row> rows = table_rows(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;  // steps 2 and 3, then the mean
  EXPECT_EQ(rows[0].label, "2");
  EXPECT_EQ(rows[1].label, "3");
  EXPECT_EQ(rows[2].label, "mean");
  for (const Row& row : rows) {
    ASSERT_EQ(row.values.size(), 12u) << r.out;
    EXPECT_GT(row.values[0], 0.0) << "step s: " << r.out;
    EXPECT_GT(row.values[1], 0.0) << "compute s: " << r.out;
    EXPECT_GT(row.values[5] + row.values[6], 0.0) << "nvme bytes: " << r.out;
    EXPECT_GT(row.values[10], 0.0) << "bound s: " << r.out;
    EXPECT_GT(row.values[11], 0.0) << "efficiency: " << r.out;
    EXPECT_LE(row.values[11], 1.5) << "efficiency: " << r.out;
  }
  EXPECT_GT(number_after(r.out, "disk: read "), 0.0) << r.out;
  EXPECT_GT(number_after(r.out, " GB/s, write "), 0.0) << r.out;
  EXPECT_NE(r.out.find("one at a time"), std::string::npos) << r.out;
  // The paged weights' arrivals: a share in [0, 100] of a step's acquires, which page (6 layers, 2 slots).
  const double in_time = number_after(r.out, "weights: ");
  EXPECT_GE(in_time, 0.0) << r.out;
  EXPECT_LE(in_time, 100.0) << r.out;
  EXPECT_NE(r.out.find("acquires arrived before the compute needed them"), std::string::npos) << r.out;
  EXPECT_TRUE(r.out.find("bottleneck: compute") != std::string::npos ||
              r.out.find("bottleneck: NVMe") != std::string::npos)
      << r.out;
  // The measurement's store and the run's swap files are gone at exit.
  for (const auto& e : std::filesystem::directory_iterator(swap)) ADD_FAILURE() << "left behind: " << e.path();

  std::ifstream in(metrics);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u);  // three steps, the bench line, the prediction line
  EXPECT_TRUE(nlohmann::json::parse(lines.back()).at("prediction").get<bool>());
  const nlohmann::json j = nlohmann::json::parse(lines[3]);
  EXPECT_EQ(j.at("bench"), true);
  for (const char* key : {"step_s", "compute_s", "disk_read_gbps", "disk_write_gbps", "bound_s", "efficiency"})
    EXPECT_GT(j.at(key).get<double>(), 0.0) << key << ": " << lines.back();
  EXPECT_GT(j.at("nvme_read_bytes").get<uint64_t>() + j.at("nvme_write_bytes").get<uint64_t>(), 0u);
  EXPECT_LE(j.at("efficiency").get<double>(), 1.5);
  EXPECT_NEAR(j.at("step_s").get<double>(), rows[2].values[0], 1e-3);
  EXPECT_GT(j.at("acquires").get<uint64_t>(), 0u);
  EXPECT_LE(j.at("late_arrivals").get<uint64_t>(), j.at("acquires").get<uint64_t>());
  EXPECT_NEAR(j.at("fetches_in_time").get<double>(), in_time / 100.0, 1e-3);
}

TEST(TrainBenchCli, ResidentRunIsBoundByItsCompute) {
  const CliResult r = run_cli(kModel);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<Row> rows = table_rows(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  const Row& mean = rows.back();
  ASSERT_EQ(mean.values.size(), 12u) << r.out;
  EXPECT_EQ(mean.values[5] + mean.values[6], 0.0) << "no NVMe bytes: " << r.out;
  EXPECT_NEAR(mean.values[10], mean.values[1], 1e-3) << "bound = compute: " << r.out;
  EXPECT_GT(mean.values[11], 0.0) << r.out;
  EXPECT_LE(mean.values[11], 1.5) << r.out;
  EXPECT_NE(r.out.find("bound: compute alone"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bottleneck: compute"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("disk: read"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("weights: "), std::string::npos) << "nothing pages: " << r.out;
}

}  // namespace
}  // namespace strata
