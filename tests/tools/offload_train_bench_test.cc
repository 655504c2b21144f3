// bench/offload_train_bench.sh end to end on the tiny presets (CPU backend, a few seconds): it
// sizes the paged runs' device budget from `strata plan`'s least budget for that placement, trains
// resident, cpu-homed and NVMe-homed, reads only the step rows of each --metrics file (which ends
// with the planner's prediction row) and finds the three runs' losses identical.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tools/run_cli.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class OffloadTrainBench : public ::testing::TestWithParam<const char*> {};

TEST_P(OffloadTrainBench, PassesWithThePlansLeastBudget) {
  const std::string preset = GetParam();
  const fs::path source = fs::path(STRATA_TEST_DATA_DIR).parent_path().parent_path();  // tests/data -> the tree
  const fs::path dir = fs::path(test::temp_path("offload_train_bench_" + preset));
  fs::remove_all(dir);
  fs::create_directories(dir / "out");
  const std::string log = (dir / "bench.log").string();
  const std::string command = "env STRATA_CALIBRATION=none STRATA='" + test::strata_binary() + "' PRESET=" + preset +
                              " STEPS=3 OUT='" + (dir / "out").string() + "' bash '" +
                              (source / "bench/offload_train_bench.sh").string() + "' '" + (dir / "swap").string() +
                              "' > '" + log + "' 2>&1";
  const int status = std::system(command.c_str());
  const std::string out = read_all(log);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  // The budget is the plan's least, here the smallest --gpu-mem there is (a tiny model fits it).
  EXPECT_NE(out.find("paged runs get --gpu-mem 16MiB (cpu home), 16MiB (nvme home): the plan's least"),
            std::string::npos)
      << out;
  EXPECT_EQ(test::occurrences(out, " identical ("), 3u) << out;
  EXPECT_EQ(out.find("DIFFER"), std::string::npos) << out;
  // Each metrics file holds three step rows and the prediction row the summary skipped; the nvme
  // run's also its --bench line, which the summary reads against #24's targets.
  for (const char* run : {"resident", "cpu", "nvme"}) {
    const std::string metrics = read_all((dir / "out" / (std::string(run) + ".jsonl")).string());
    EXPECT_EQ(test::occurrences(metrics, "\"tokens_per_s\""), 3u) << run << ":\n" << metrics;
    EXPECT_EQ(test::occurrences(metrics, "\n"), std::string(run) == "nvme" ? 5u : 4u) << run << ":\n" << metrics;
  }
  EXPECT_NE(out.find("nvme --bench ("), std::string::npos) << out;
  EXPECT_NE(out.find("of the acquires in time"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(dir / "out" / "nvme-trace.json"));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(TinyPresets, OffloadTrainBench, ::testing::Values("gpt2-tiny", "llama-tiny"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace strata
