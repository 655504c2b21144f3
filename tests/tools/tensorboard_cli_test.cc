// `strata train --tensorboard-enabled` (and DeepSpeed's `tensorboard` block in a config file)
// writes an event file into OUTPUT_PATH/JOB_NAME and names it in the run's last lines; the files
// open in TensorBoard's own reader (tools/tensorboard_check.py: both CRCs of every record, the
// Events, the scalars as `tensorboard --logdir` loads them, the losses equal to the --metrics
// file's) where the tensorboard Python package is installed, and that test says it skipped where not.
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
using test::CliResult;
using test::run_cli;

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(e.path());
  return out;
}

const std::vector<std::string> kTiny = {"train", "--device", "cpu", "--steps", "6", "--eval-every", "3",
                                        "--eval-batches", "1"};

TEST(TensorBoardCli, FlagsWriteAnEventFileAndTheRunSaysWhere) {
  const fs::path out = fs::path(test::temp_path("strata_tb_flags"));
  fs::remove_all(out);
  std::vector<std::string> args = kTiny;
  args.insert(args.end(), {"--tensorboard-enabled", "--tensorboard-output-path", out.string(),
                           "--tensorboard-job-name", "tiny"});
  CliResult r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<fs::path> files = event_files(out / "tiny");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_GT(fs::file_size(files[0]), 6u * 16);  // the version record and six steps of framed scalars
  EXPECT_NE(r.err.find("tensorboard: " + files[0].string() + " (view it: tensorboard --logdir " + out.string() + ")"),
            std::string::npos)
      << r.err;
  fs::remove_all(out);
}

TEST(TensorBoardCli, DeepSpeedBlockInAConfigFile) {
  const fs::path out = fs::path(test::temp_path("strata_tb_ds"));
  fs::remove_all(out);
  fs::create_directories(out);
  const std::string config = (out / "ds.json").string();
  std::ofstream(config) << R"({"tensorboard": {"enabled": true, "output_path": ")" << (out / "logs").string()
                        << R"(", "job_name": "ds_job"}})";
  std::vector<std::string> args = kTiny;
  args.insert(args.end(), {"--config", config});
  CliResult r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(event_files(out / "logs" / "ds_job").size(), 1u);
  CliResult shown = run_cli({"config", "--config", config});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("tensorboard_job_name"), std::string::npos);
  EXPECT_NE(shown.out.find("ds_job"), std::string::npos) << shown.out;
  fs::remove_all(out);
}

TEST(TensorBoardCli, EmptyJobNameIsRefused) {
  std::vector<std::string> args = kTiny;
  args.insert(args.end(), {"--tensorboard-enabled", "--tensorboard-job-name", ""});
  CliResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("tensorboard_job_name"), std::string::npos) << r.err;
}

TEST(TensorBoardCli, TensorBoardsReaderOpensTheEvents) {
  if (std::system("python3 -c 'import tensorboard' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "the tensorboard Python package is not installed (pip install tensorboard): "
                    "tools/tensorboard_check.py cannot run";
  const fs::path out = fs::path(test::temp_path("strata_tb_reader"));
  fs::remove_all(out);
  fs::create_directories(out);
  const std::string metrics = (out / "m.jsonl").string();
  std::vector<std::string> args = kTiny;
  args.insert(args.end(), {"--tensorboard-enabled", "--tensorboard-output-path", out.string(), "--metrics", metrics});
  CliResult r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path source = fs::path(STRATA_TEST_DATA_DIR).parent_path().parent_path();
  const std::string log = (out / "check.log").string();
  const std::string command = "python3 '" + (source / "tools/tensorboard_check.py").string() + "' '" +
                              (out / "strata").string() + "' --metrics '" + metrics + "' > '" + log + "' 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text.str();
  EXPECT_NE(text.str().find("7 records"), std::string::npos) << text.str();  // the version and six steps
  EXPECT_NE(text.str().find("Train/Samples/val_loss"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("train_loss: the 6 steps of " + metrics + ", value for value"), std::string::npos)
      << text.str();
  fs::remove_all(out);
}

}  // namespace
}  // namespace strata
