// `strata train` against kill -9, signals and bad inputs, end to end on the CPU backend:
//  - a tiny model trained while SIGKILL lands 21+ times: at each named point of a checkpoint save
//    (before the files, between them, after the files, after the directory fsync, after the
//    rename, after `latest`, after rotation; STRATA_TEST_KILL_AT) and at random moments; after
//    every kill `strata ckpt verify` passes, and the run resumed after each kill ends with the
//    uninterrupted run's losses bit for bit, each step once in the metrics file;
//  - an injected ENOSPC during a save stops the run (exit 1) with the previous checkpoint intact;
//  - SIGINT/SIGTERM finish the step, write a checkpoint, print the resume command and exit
//    128 + signal; a second signal exits at once;
//  - bad inputs refused before a step: unwritable --checkpoint-dir, --nvme-path a file or /proc,
//    no room for a checkpoint, another run's checkpoint dir, another batch shape on resume, a
//    damaged checkpoint (naming the other one), a token file error naming --data-format;
//  - the consecutive-skip bound stops a run whose every step overflows (exit 1);
//  - default settings resume from a step past the held-out data's epoch.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tools/run_cli.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::CliResult;
using test::run_cli;

std::string temp_prefix() { return "strata-" + std::to_string(getpid()) + "-"; }

// Per test process, so two test runs at once never share a run directory.
std::string temp_path(const std::string& name) { return (fs::path(::testing::TempDir()) / (temp_prefix() + name)).string(); }

// Removes this process's run directories and files when the tests end.
class RemoveTempPaths : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(::testing::TempDir(), ec))
      if (e.path().filename().string().starts_with(temp_prefix())) fs::remove_all(e.path(), ec);
  }
};
[[maybe_unused]] ::testing::Environment* const kRemoveTempPaths =
    ::testing::AddGlobalTestEnvironment(new RemoveTempPaths);

// The metrics file as (step, loss) in file order.
std::vector<std::pair<uint64_t, double>> metric_steps(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::pair<uint64_t, double>> out;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("step")) out.emplace_back(j.at("step").get<uint64_t>(), j.at("loss").get<double>());
  }
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// `strata args...` in the background, stdout and stderr to `log`; the environment as run_cli's.
pid_t spawn_strata(const std::vector<std::string>& args, const std::string& log) {
  test::SpawnArgs spawn(args, {});
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, spawn.binary().c_str(), &actions, nullptr, spawn.argv(), spawn.envp());
  posix_spawn_file_actions_destroy(&actions);
  return err == 0 ? pid : -1;
}

// The exit code, or 128 + the signal that ended it.
int wait_exit(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits (up to 60 s) until `path` has `lines` complete lines.
bool wait_for_lines(const std::string& path, size_t lines) {
  for (int i = 0; i < 6000; ++i) {
    const std::string text = read_text(path);
    if (size_t(std::count(text.begin(), text.end(), '\n')) >= lines) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A tiny run with the default schedule and evaluation every 4 steps (the held-out loader is
// where resuming past its epoch used to fail), a checkpoint after every step.
std::vector<std::string> tiny_run(uint64_t steps, const std::string& metrics, const std::string& dir) {
  std::vector<std::string> args = {"train", "--device", "cpu", "--steps", std::to_string(steps), "--micro-batch", "4",
                                   "--seq", "32", "--eval-every", "4", "--eval-batches", "2", "--metrics", metrics};
  if (!dir.empty()) args.insert(args.end(), {"--checkpoint-dir", dir, "--checkpoint-every", "1"});
  return args;
}

// A complete step-N/ is there (`latest` may not be yet: a kill between the rename and it).
bool has_checkpoint(const std::string& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().starts_with("step-")) return true;
  return false;
}

TEST(TrainKill, EveryKillLeavesAVerifiedCheckpointAndTheResumedRunMatchesBitForBit) {
  constexpr uint64_t kSteps = 300;  // more than 24 short-lived processes get through
  const std::string ref_metrics = temp_path("kill_ref.jsonl"), metrics = temp_path("kill.jsonl");
  const std::string dir = temp_path("kill_run");
  fs::remove_all(dir);
  fs::remove(metrics);
  CliResult ref = run_cli(tiny_run(kSteps, ref_metrics, ""));
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const auto want = metric_steps(ref_metrics);
  ASSERT_EQ(want.size(), kSteps);

  auto args_now = [&]() {
    std::vector<std::string> args = tiny_run(kSteps, metrics, dir);
    if (has_checkpoint(dir)) args.insert(args.end(), {"--resume", dir});
    return args;
  };
  const std::vector<std::string> points = {"begin",    "model_written",  "files_written", "dir_synced",
                                           "renamed", "latest_written", "rotated"};
  int kills = 0;
  std::mt19937 rng(20261124);
  for (int round = 0; round < 24; ++round) {
    int code = 0;
    std::string log;
    if (round < 14) {
      // Each named point of a save, at the first and at the second save of a process.
      const std::string at = points[round % points.size()] + ":" + std::to_string(1 + round / points.size());
      CliResult r = run_cli(args_now(), {"STRATA_TEST_KILL_AT=" + at});
      code = r.exit_code;
      log = at + "\n" + r.err;
    } else {
      const std::string log_path = temp_path("kill_round.log");
      const pid_t pid = spawn_strata(args_now(), log_path);
      ASSERT_GT(pid, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(20, 250)(rng)));
      ::kill(pid, SIGKILL);
      code = wait_exit(pid);
      log = read_text(log_path);
    }
    ASSERT_TRUE(code == 128 + SIGKILL || code == 0) << "round " << round << " exit " << code << "\n" << log;
    kills += code == 128 + SIGKILL;
    if (has_checkpoint(dir)) {
      CliResult v = run_cli({"ckpt", "verify", dir});
      ASSERT_EQ(v.exit_code, 0) << "round " << round << ":\n" << v.out << v.err << "\nthe killed run:\n" << log;
    }
    if (code == 0) break;  // it finished before the kill
  }
  EXPECT_GE(kills, 20);
  CliResult last = run_cli(args_now());
  ASSERT_EQ(last.exit_code, 0) << last.err;
  EXPECT_EQ(metric_steps(metrics), want);  // steps 1..300 once each, every loss bit for bit
  // Only the kept checkpoints and `latest` remain: the leftovers of the killed saves are gone.
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-000299", "step-000300"}));
}

TEST(TrainKill, EnospcDuringASaveStopsTheRunWithThePreviousCheckpointIntact) {
  const std::string dir = temp_path("enospc_run"), metrics = temp_path("enospc.jsonl");
  fs::remove_all(dir);
  CliResult r = run_cli(tiny_run(10, metrics, dir), {"STRATA_TEST_KILL_AT=model_written:enospc:4"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("checkpoint at step 4"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("previous checkpoints are intact"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(dir + "/latest"), "step-000003\n");
  CliResult v = run_cli({"ckpt", "verify", dir});
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  CliResult resumed = run_cli([&] {
    auto a = tiny_run(10, metrics, dir);
    a.insert(a.end(), {"--resume", dir});
    return a;
  }());
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resumed from " + dir + "/step-000003 at step 3"), std::string::npos) << resumed.err;
}

// A signal once three steps are in the metrics file (the handlers are installed by then).
struct Signalled {
  int exit_code = -1;
  std::string log;
};
Signalled run_and_signal(const std::vector<std::string>& args, const std::string& metrics, std::vector<int> signals) {
  const std::string log_path = temp_path("signal.log");
  const pid_t pid = spawn_strata(args, log_path);
  Signalled s;
  if (pid <= 0) return s;
  if (!wait_for_lines(metrics, 3)) ::kill(pid, SIGKILL);
  for (size_t i = 0; i < signals.size(); ++i) {
    // Signals of one kind sent together merge into one: the next waits for the first's notice.
    for (int wait = 0; i > 0 && wait < 500 && read_text(log_path).find("stopping after") == std::string::npos; ++wait)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ::kill(pid, signals[i]);
  }
  s.exit_code = wait_exit(pid);
  s.log = read_text(log_path);
  return s;
}

TEST(TrainSignals, SigintAndSigtermFinishTheStepWriteACheckpointAndPrintTheResumeCommand) {
  for (int sig : {SIGINT, SIGTERM}) {
    const std::string dir = temp_path("signal_run"), metrics = temp_path("signal.jsonl");
    fs::remove_all(dir);
    fs::remove(metrics);
    std::vector<std::string> args = {"train", "--device", "cpu", "--steps", "100000", "--lr-schedule-steps", "1000",
                                     "--eval-every", "0", "--metrics", metrics, "--checkpoint-dir", dir};
    const Signalled s = run_and_signal(args, metrics, {sig});
    ASSERT_EQ(s.exit_code, 128 + sig) << s.log;
    const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    EXPECT_NE(s.log.find(name + ": stopped after step"), std::string::npos) << s.log;
    EXPECT_NE(s.log.find("--resume " + dir), std::string::npos) << s.log;
    const auto done = metric_steps(metrics);
    ASSERT_GE(done.size(), 3u);
    // The checkpoint is of the last step trained, complete and verified.
    char want_name[32];
    std::snprintf(want_name, sizeof(want_name), "step-%06zu\n", done.size());
    EXPECT_EQ(read_text(dir + "/latest"), want_name) << s.log;
    EXPECT_EQ(run_cli({"ckpt", "verify", dir}).exit_code, 0);
    if (sig != SIGINT) continue;
    // Resumed for 2 more steps, it matches a straight run of that length step for step.
    const uint64_t total = done.size() + 2;
    std::vector<std::string> more = {"train", "--device", "cpu", "--steps", std::to_string(total),
                                     "--lr-schedule-steps", "1000", "--eval-every", "0", "--metrics", metrics,
                                     "--resume", dir};
    CliResult c = run_cli(more);
    ASSERT_EQ(c.exit_code, 0) << c.err;
    const std::string straight = temp_path("signal_straight.jsonl");
    CliResult ref = run_cli({"train", "--device", "cpu", "--steps", std::to_string(total), "--lr-schedule-steps",
                             "1000", "--eval-every", "0", "--metrics", straight});
    ASSERT_EQ(ref.exit_code, 0) << ref.err;
    EXPECT_EQ(metric_steps(metrics), metric_steps(straight));
  }
}

TEST(TrainSignals, ASecondSignalStopsAtOnce) {
  const std::string dir = temp_path("signal2_run"), metrics = temp_path("signal2.jsonl");
  fs::remove_all(dir);
  fs::remove(metrics);
  const Signalled s = run_and_signal({"train", "--device", "cpu", "--steps", "100000", "--eval-every", "0",
                                      "--metrics", metrics, "--checkpoint-dir", dir},
                                     metrics, {SIGINT, SIGINT});
  EXPECT_EQ(s.exit_code, 128 + SIGINT) << s.log;
  EXPECT_NE(s.log.find("second signal: stopping at once"), std::string::npos) << s.log;
}

TEST(TrainPreflight, BadPathsAndNoRoomAreRefusedBeforeAnyStep) {
  const std::string file = temp_path("preflight_file");
  std::ofstream(file) << "x";
  struct Case {
    std::vector<std::string> flags;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{"--checkpoint-dir", file + "/run"}, "pass a writable --checkpoint-dir"},
           {{"--nvme-path", file}, "is not a directory"},
           {{"--nvme-path", "/proc"}, "--nvme-path /proc"},
           {{"--preset", "llama-70b", "--checkpoint-dir", temp_path("preflight_big")}, "needs about"},
           {{"--preset", "llama-70b", "--offload-param", "none"}, "of host memory for its fp32 master weights"},
           {{"--preset", "llama-70b"}, "llama-70b fits no placement on this machine"},
           {{"--cpu-mem", "64TiB"}, "--cpu-mem 64 TiB is more than"},
       }) {
    std::vector<std::string> args = {"train", "--device", "cpu", "--steps", "3"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("| loss"), std::string::npos) << "trained before refusing:\n" << r.err;
  }
}

TEST(TrainPreflight, ResumeMismatchesAndDamagedCheckpointsAreRefusedInWords) {
  const std::string dir = temp_path("mismatch_run"), metrics = temp_path("mismatch.jsonl");
  fs::remove_all(dir);
  ASSERT_EQ(run_cli(tiny_run(3, metrics, dir)).exit_code, 0);
  // A fresh run into a directory holding another run's checkpoints.
  CliResult fresh = run_cli(tiny_run(5, metrics, dir));
  EXPECT_EQ(fresh.exit_code, 2);
  EXPECT_NE(fresh.err.find("already holds checkpoints"), std::string::npos) << fresh.err;
  // Another micro-batch: the data position cannot carry over.
  auto resume = tiny_run(5, metrics, "");
  resume.insert(resume.end(), {"--resume", dir});
  auto other_batch = resume;
  other_batch.insert(other_batch.end(), {"--micro-batch", "8"});
  CliResult shape = run_cli(other_batch);
  EXPECT_EQ(shape.exit_code, 2);
  EXPECT_NE(shape.err.find("pass --micro-batch 4 --seq 32"), std::string::npos) << shape.err;
  // Another precision: warned, and the run continues.
  auto other_dtype = resume;
  other_dtype.insert(other_dtype.end(), {"--dtype", "bf16"});
  CliResult dtype = run_cli(other_dtype);
  EXPECT_EQ(dtype.exit_code, 0) << dtype.err;
  EXPECT_NE(dtype.err.find("trained in fp32, this run computes in bf16"), std::string::npos) << dtype.err;
  // A flipped byte in the newest checkpoint: refused, naming the older one to resume from.
  {
    std::fstream f(dir + "/step-000003/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-8, std::ios::end);
    char b = 0;
    f.read(&b, 1);
    b ^= 0x10;
    f.seekp(-8, std::ios::end);
    f.write(&b, 1);
  }
  CliResult damaged = run_cli(resume);
  EXPECT_EQ(damaged.exit_code, 1);
  EXPECT_NE(damaged.err.find("CRC-32C"), std::string::npos) << damaged.err;
  EXPECT_NE(damaged.err.find(dir + "/step-000002"), std::string::npos) << damaged.err;
  CliResult verify = run_cli({"ckpt", "verify", dir});
  EXPECT_EQ(verify.exit_code, 1);
  EXPECT_NE(verify.out.find("step-000003: FAILED"), std::string::npos) << verify.out;
  EXPECT_NE(verify.out.find("step-000002: ok"), std::string::npos) << verify.out;
  CliResult inspect = run_cli({"ckpt", "inspect", dir + "/step-000002", "--json"});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const nlohmann::json j = nlohmann::json::parse(inspect.out);
  EXPECT_EQ(j.at("step").get<uint64_t>(), 2u);
  EXPECT_EQ(j.at("model").get<std::string>(), "gpt2-tiny");
  EXPECT_EQ(j.at("micro_batch").get<uint64_t>(), 4u);
  EXPECT_EQ(j.at("tensors").at(0).at("crc32c").get<std::string>().size(), 8u);
}

// The reproduction: default settings hold out 18 batches of 16 x 64, so a checkpoint at
// step 20 is past the held-out loader's epoch; that position is the training loader's alone.
TEST(TrainResume, PastTheHeldOutEpochWithDefaultSettings) {
  const std::string dir = temp_path("resume_defaults");
  fs::remove_all(dir);
  ASSERT_EQ(run_cli({"train", "--device", "cpu", "--steps", "20", "--checkpoint-dir", dir}).exit_code, 0);
  CliResult r = run_cli({"train", "--device", "cpu", "--steps", "21", "--resume", dir});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("resumed from " + dir + "/step-000020 at step 20"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step 21/21"), std::string::npos) << r.err;
}

TEST(TrainPreflight, TokenFileErrorsNameTheDataFormatFlag) {
  const std::string bin = temp_path("short.bin");
  std::ofstream(bin) << "0123456789";
  CliResult r = run_cli({"train", "--device", "cpu", "--data", bin});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--data-format"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--data-kind"), std::string::npos) << r.err;
}

// fp16 with a fixed loss scale of 2^24 overflows every step: each is skipped, and the bound ends
// the run instead of "training" on with frozen weights and exit 0.
TEST(TrainPreflight, ConsecutiveSkippedStepsStopTheRun) {
  CliResult r = run_cli({"train", "--device", "cpu", "--steps", "20", "--eval-every", "0", "--dtype", "fp16",
                         "--loss-scale", "16777216", "--max-skipped-steps", "3"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("step 3: 3 steps in a row were skipped"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace strata
