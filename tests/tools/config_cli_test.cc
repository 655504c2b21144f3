// `strata config` end to end: the built binary prints sources, flags beat the environment,
// unknown flags exit 2 with a did-you-mean, and --json is one JSON document.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tools/run_cli.h"

namespace strata {
namespace {

using test::CliResult;
using test::run_cli;

// The table row of `key`, or "" when it has none.
std::string row_of(const std::string& table, const std::string& key) {
  const size_t at = table.find("\n" + key + " ");
  if (at == std::string::npos) return "";
  return table.substr(at + 1, table.find('\n', at + 1) - at - 1);
}

TEST(ConfigCli, PrintsEveryKeyWithItsSource) {
  CliResult r = run_cli({"config"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("source"), std::string::npos) << r.out;
  const std::string seed = row_of(r.out, "seed");
  EXPECT_NE(seed.find("1234"), std::string::npos) << r.out;
  EXPECT_NE(seed.find("default"), std::string::npos) << r.out;
  for (const char* key : {"config", "log_level", "device", "gpu_index", "gpu_mem", "cpu_mem", "threads", "simd"})
    EXPECT_NE(row_of(r.out, key), "") << key << " missing from:\n" << r.out;
}

TEST(ConfigCli, FlagBeatsEnvironmentBeatsFile) {
  const std::string file = (std::filesystem::path(::testing::TempDir()) / "strata_cli_cfg.json").string();
  std::ofstream(file) << R"({"gpu_mem": "2GiB", "threads": 3})";
  CliResult r = run_cli({"config", "--gpu-mem", "8GiB", "--config", file}, {"STRATA_GPU_MEM=4GiB", "STRATA_SEED=5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string gpu = row_of(r.out, "gpu_mem");
  EXPECT_NE(gpu.find("8GiB"), std::string::npos) << r.out;
  EXPECT_NE(gpu.find("flag --gpu-mem"), std::string::npos) << r.out;
  EXPECT_NE(row_of(r.out, "seed").find("env STRATA_SEED"), std::string::npos) << r.out;
  EXPECT_NE(row_of(r.out, "threads").find("file " + file), std::string::npos) << r.out;
  EXPECT_NE(row_of(r.out, "config").find("flag --config"), std::string::npos) << r.out;

  CliResult env_only = run_cli({"config"}, {"STRATA_GPU_MEM=4GiB"});
  ASSERT_EQ(env_only.exit_code, 0) << env_only.err;
  EXPECT_NE(row_of(env_only.out, "gpu_mem").find("env STRATA_GPU_MEM"), std::string::npos) << env_only.out;
}

// A DeepSpeed file: its keys land on strata's, and settings with no effect here are named on
// stderr (the table on stdout stays clean for scripts).
TEST(ConfigCli, DeepSpeedFileMapsKeysAndWarnsAboutInertOnes) {
  const std::string file = (std::filesystem::path(::testing::TempDir()) / "strata_cli_ds.json").string();
  std::ofstream(file) << R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
                             "zero_optimization": {"stage": 3, "overlap_comm": true}})";
  CliResult r = run_cli({"config", "--config", file});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(row_of(r.out, "micro_batch").find("4"), std::string::npos) << r.out;
  EXPECT_NE(row_of(r.out, "grad_accum").find("2"), std::string::npos) << r.out;
  EXPECT_NE(row_of(r.out, "zero_stage").find("3"), std::string::npos) << r.out;  // what ranks partition
  EXPECT_NE(r.err.find("zero_optimization.overlap_comm=true has no effect"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("has no effect"), std::string::npos) << r.out;
}

TEST(ConfigCli, LogLevelBeforeTheCommandCountsAsTheFlag) {
  CliResult before = run_cli({"--log-level", "debug", "config"});
  ASSERT_EQ(before.exit_code, 0) << before.err;
  const std::string before_row = row_of(before.out, "log_level");
  EXPECT_NE(before_row.find("debug"), std::string::npos) << before.out;
  EXPECT_NE(before_row.find("flag --log-level"), std::string::npos) << before.out;
  CliResult env = run_cli({"config"}, {"STRATA_LOG_LEVEL=warn"});
  ASSERT_EQ(env.exit_code, 0) << env.err;
  const std::string env_row = row_of(env.out, "log_level");
  EXPECT_NE(env_row.find("warn"), std::string::npos) << env.out;
  EXPECT_NE(env_row.find("env STRATA_LOG_LEVEL"), std::string::npos) << env.out;
  CliResult bad = run_cli({"info"}, {"STRATA_LOG_LEVEL=bogus"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("unknown log level 'bogus'"), std::string::npos) << bad.err;
}

TEST(ConfigCli, UnknownFlagExitsTwoWithDidYouMean) {
  CliResult r = run_cli({"config", "--gpu-mme", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown flag --gpu-mme; did you mean --gpu-mem?"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(ConfigCli, UnknownCommandSuggestsTheCommand) {
  CliResult r = run_cli({"confg"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("did you mean config?"), std::string::npos) << r.err;
}

TEST(ConfigCli, BadValuesAndVariablesExitTwoNamingThem) {
  CliResult value = run_cli({"config", "--gpu-index", "99"});
  EXPECT_EQ(value.exit_code, 2);
  EXPECT_NE(value.err.find("--gpu-index 99: gpu_index must be an integer in [0, 63]"), std::string::npos)
      << value.err;
  CliResult missing = run_cli({"config", "--config", "/nonexistent/strata.json"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("/nonexistent/strata.json"), std::string::npos) << missing.err;
}

TEST(ConfigCli, JsonIsOneDocumentWithValuesAndSources) {
  CliResult r = run_cli({"config", "--json", "--threads", "8"}, {"STRATA_SIMD=scalar"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  EXPECT_EQ(j["threads"]["value"], 8);
  EXPECT_EQ(j["threads"]["source"], "flag");
  EXPECT_EQ(j["threads"]["origin"], "--threads");
  EXPECT_EQ(j["simd"]["value"], "scalar");
  EXPECT_EQ(j["simd"]["source"], "env");
  EXPECT_EQ(j["simd"]["origin"], "STRATA_SIMD");
  EXPECT_EQ(j["gpu_mem"]["value"], "auto");
  EXPECT_EQ(j["seed"]["source"], "default");
}

TEST(ConfigCli, HelpListsFlagsWithTypesAndEnvNames) {
  CliResult r = run_cli({"config", "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--gpu-mem SIZE|auto"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("STRATA_GPU_MEM"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--config FILE"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace strata

namespace strata::test {
namespace {

// The environment is inherited (a shell that ran tools/test.sh, a GPU check), so STRATA_* variables
// strata does not know never stop a command: the project's own harness variables are ignored in
// silence, any other is a warning naming it with a did-you-mean, and the known ones still apply.
TEST(ConfigCli, HarnessAndUnknownVariablesDoNotBreakTheCommand) {
  CliResult harness = run_cli({"config", "--json"}, {"STRATA_TEST_STAGES=unit", "STRATA_REQUIRE_GPU=1"});
  ASSERT_EQ(harness.exit_code, 0) << harness.err;
  EXPECT_EQ(harness.err, "");
  EXPECT_NO_THROW((void)nlohmann::json::parse(harness.out)) << harness.out;

  CliResult typo = run_cli({"config", "--json"}, {"STRATA_GPU_MME=1GiB", "STRATA_SEED=77"});
  ASSERT_EQ(typo.exit_code, 0) << typo.err;
  EXPECT_NE(typo.err.find("[warning] environment variable STRATA_GPU_MME is not a strata setting and is ignored; "
                          "did you mean STRATA_GPU_MEM?"),
            std::string::npos)
      << typo.err;
  const nlohmann::json j = nlohmann::json::parse(typo.out);  // stdout stays one JSON document
  EXPECT_EQ(j["seed"]["value"], 77);
  EXPECT_EQ(j["seed"]["origin"], "STRATA_SEED");
  EXPECT_EQ(j["gpu_mem"]["source"], "default");
}

}  // namespace
}  // namespace strata::test
