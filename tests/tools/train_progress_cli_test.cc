// `strata train`'s progress output where a person reads it and where a program does: under a
// pseudo-terminal (what a terminal emulator gives) one live line redrawn in place with "\r" and
// erase-to-end-of-line, never wider than the terminal, and a full progress line every tenth of the
// run, so a run fits one screen; in a pipe plain lines only (no carriage return, no escape code),
// one per step, or one per --log-every steps.
#include <fcntl.h>
#include <pty.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tools/run_cli.h"

namespace strata {
namespace {

using test::CliResult;
using test::run_cli;
using test::SpawnArgs;

// `strata args...` with stdout and stderr on a pseudo-terminal `columns` wide, TERM=xterm; what
// the terminal received, and the exit code.
CliResult run_cli_on_terminal(const std::vector<std::string>& args, int columns) {
  CliResult result;
  int master = -1, slave = -1;
  winsize size{};
  size.ws_row = 50;
  size.ws_col = static_cast<unsigned short>(columns);
  if (::openpty(&master, &slave, nullptr, nullptr, &size) != 0) {
    result.err = "openpty failed: errno " + std::to_string(errno);
    return result;
  }
  SpawnArgs spawn(args, {"TERM=xterm"});
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, slave, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, slave, STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, master);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, spawn.binary().c_str(), &actions, nullptr, spawn.argv(), spawn.envp());
  posix_spawn_file_actions_destroy(&actions);
  ::close(slave);
  if (err != 0) {
    ::close(master);
    result.err = "posix_spawn failed: errno " + std::to_string(err);
    return result;
  }
  char buf[4096];
  for (;;) {  // until the child's side closes (EIO on Linux)
    const ssize_t n = ::read(master, buf, sizeof(buf));
    if (n > 0) {
      result.out.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  ::close(master);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// The live line's drawings: the text after each "\r\x1b[K" (to column 0, erase the line) up to
// the next carriage return or newline, when it is a progress bar of a 40-step run.
std::vector<std::string> live_drawings(const std::string& out) {
  std::vector<std::string> drawings;
  const std::string erase = "\r\x1b[K";
  for (size_t at = out.find(erase); at != std::string::npos; at = out.find(erase, at + 1)) {
    const size_t begin = at + erase.size(), end = out.find_first_of("\r\n", begin);
    const std::string text = out.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (text.find("/40 [") != std::string::npos) drawings.push_back(text);
  }
  return drawings;
}

const std::vector<std::string> kRun = {"train", "--device", "cpu", "--steps", "40", "--eval-every", "10",
                                       "--eval-batches", "1"};

TEST(TrainProgressCli, TerminalGetsOneLiveLineAndATenthOfTheSteps) {
  CliResult r = run_cli_on_terminal(kRun, 100);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // Summaries at steps 4, 8, ..., 40: ten full lines, whatever the evaluations (the live line
  // carries the held-out loss).
  EXPECT_EQ(test::occurrences(r.out, "[info]\x1b[m step "), 10u) << r.out;
  EXPECT_NE(r.out.find(" step  4/40 | loss "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" step 40/40 | loss "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" step  5/40 | loss "), std::string::npos) << r.out;
  // The live line, drawn in place for steps 1..39 (and again under each summary); later ones
  // carry the held-out loss.
  const std::vector<std::string> drawings = live_drawings(r.out);
  EXPECT_GE(drawings.size(), 39u) << r.out;
  EXPECT_NE(r.out.find("\r\x1b[K20/40 [#####.....]  50%  loss "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  ETA 0:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  val "), std::string::npos) << r.out;
  // Never wider than the terminal (a wrapped line cannot be redrawn): at most 99 columns.
  for (const std::string& d : drawings) EXPECT_LE(d.size(), 99u) << d;
  // The whole run fits one screen: setup, ten summaries, the end-of-run lines.
  EXPECT_LE(test::occurrences(r.out, "\n"), 30u) << r.out;
  // The live line is gone before the end: no drawing after the last step's line.
  const size_t last_step = r.out.find(" step 40/40 | loss ");
  ASSERT_NE(last_step, std::string::npos) << r.out;
  EXPECT_TRUE(live_drawings(r.out.substr(last_step)).empty()) << r.out.substr(last_step);
  EXPECT_NE(r.out.find("trained 40 steps", last_step), std::string::npos) << r.out;
  // The CPU backend's arena is host memory: not called "gpu".
  EXPECT_NE(r.out.find("peak memory: device (cpu backend) "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| device (cpu backend) "), std::string::npos) << r.out;
}

TEST(TrainProgressCli, LogEveryIsKeptOnATerminal) {
  std::vector<std::string> args = kRun;
  args.insert(args.end(), {"--log-every", "8"});
  CliResult r = run_cli_on_terminal(args, 60);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(test::occurrences(r.out, "[info]\x1b[m step "), 5u) << r.out;  // 8, 16, 24, 32, 40
  const std::vector<std::string> drawings = live_drawings(r.out);
  EXPECT_GE(drawings.size(), 39u) << r.out;
  for (const std::string& d : drawings) EXPECT_LE(d.size(), 59u) << d;  // cut to the 60 columns
}

TEST(TrainProgressCli, PipeGetsPlainLinesAtLogEvery) {
  CliResult every = run_cli(kRun);
  ASSERT_EQ(every.exit_code, 0) << every.err;
  EXPECT_EQ(every.err.find('\r'), std::string::npos) << every.err;
  EXPECT_EQ(every.err.find('\x1b'), std::string::npos) << every.err;
  EXPECT_EQ(test::occurrences(every.err, "[info] step "), 40u) << every.err;  // auto in a pipe: every step

  std::vector<std::string> args = kRun;
  args.insert(args.end(), {"--log-every", "15"});
  CliResult sparse = run_cli(args);
  ASSERT_EQ(sparse.exit_code, 0) << sparse.err;
  // Steps 15 and 30, the evaluations at 10, 20 (and 30, 40), and the last: 10, 15, 20, 30, 40.
  EXPECT_EQ(test::occurrences(sparse.err, "[info] step "), 5u) << sparse.err;
  EXPECT_NE(sparse.err.find("step 15/40 | loss "), std::string::npos) << sparse.err;
  EXPECT_NE(sparse.err.find("step 10/40 | loss "), std::string::npos) << sparse.err;
  EXPECT_EQ(sparse.err.find("step 16/40 | loss "), std::string::npos) << sparse.err;
}

}  // namespace
}  // namespace strata
