// Runs the built `strata` binary for CLI tests and captures its exit code, stdout and stderr.
// The child gets this process's environment without any STRATA_* variable (so the caller's shell
// cannot change the result), plus STRATA_CALIBRATION=none unless the test sets it (so no test reads
// or writes the user's calibration cache, and plans use the rates a test gives), plus the variables
// the test gives. Also a run in the background (output to a file) and a wait for a file's lines,
// for tests that act on a live run. Not a general process library: no stdin, no timeout (the CLI
// commands tested here finish in well under a second).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace strata::test {

struct CliResult {
  int exit_code = -1;  // the exit status, or 128 + signal when killed, or -1 when it did not start
  std::string out;     // stdout
  std::string err;     // stderr
};

// The training losses of a `strata train --metrics` file, in step order (its JSON lines with a
// "loss"; not the closing prediction line).
inline std::vector<double> metric_losses(const std::string& metrics) {
  std::ifstream in(metrics);
  std::vector<double> out;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.push_back(j.at("loss").get<double>());
  }
  return out;
}

// `name` inside googletest's temporary directory.
inline std::string temp_path(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

inline std::string strata_binary() { return std::string(STRATA_BINARY_DIR) + "/bin/strata"; }

// How many times `needle` occurs in `text`, not overlapping.
inline size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

// argv and envp for posix_spawn of `strata args...`: this process's environment without STRATA_*
// variables and those `env` sets, STRATA_CALIBRATION=none unless `env` sets it, plus `env`
// ("NAME=VALUE"). The pointers stay valid while the object lives.
class SpawnArgs {
 public:
  SpawnArgs(const std::vector<std::string>& args, const std::vector<std::string>& env) {
    argv_s_ = {strata_binary()};
    argv_s_.insert(argv_s_.end(), args.begin(), args.end());
    // A variable the test gives replaces the inherited one (getenv would find the first).
    const auto given = [&](const std::string& entry) {
      const std::string name = entry.substr(0, entry.find('=') + 1);
      for (const std::string& e : env)
        if (e.rfind(name, 0) == 0) return true;
      return false;
    };
    for (char** e = environ; *e != nullptr; e++)
      if (std::string(*e).rfind("STRATA_", 0) != 0 && !given(*e)) env_s_.emplace_back(*e);
    if (!given("STRATA_CALIBRATION=")) env_s_.emplace_back("STRATA_CALIBRATION=none");
    env_s_.insert(env_s_.end(), env.begin(), env.end());
    for (std::string& a : argv_s_) argv_.push_back(a.data());
    argv_.push_back(nullptr);
    for (std::string& e : env_s_) envp_.push_back(e.data());
    envp_.push_back(nullptr);
  }
  SpawnArgs(const SpawnArgs&) = delete;
  SpawnArgs& operator=(const SpawnArgs&) = delete;

  const std::string& binary() const { return argv_s_[0]; }
  char* const* argv() { return argv_.data(); }
  char* const* envp() { return envp_.data(); }

 private:
  std::vector<std::string> argv_s_, env_s_;
  std::vector<char*> argv_, envp_;
};

// Runs `strata args...` with the environment described above plus `env` ("NAME=VALUE" entries).
inline CliResult run_cli(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  CliResult result;
  SpawnArgs spawn(args, env);

  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0) return result;
  if (pipe(err_pipe) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, out_pipe[0]);
  posix_spawn_file_actions_addclose(&actions, err_pipe[0]);
  pid_t pid = -1;
  const int spawn_err =
      posix_spawn(&pid, spawn.binary().c_str(), &actions, nullptr, spawn.argv(), spawn.envp());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (spawn_err != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    result.err = "posix_spawn " + spawn.binary() + " failed: errno " + std::to_string(spawn_err);
    return result;
  }

  // Drain both pipes together so neither can fill up and block the child.
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        open_fds--;
      }
    }
  }
  for (pollfd& f : fds)
    if (f.fd >= 0) close(f.fd);

  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
  return result;
}

// `strata args...` in the background, stdout and stderr to the file `log`, the environment as
// run_cli's; its pid (reap it with waitpid or wait4), or -1 when it did not start.
inline pid_t spawn_cli(const std::vector<std::string>& args, const std::string& log) {
  SpawnArgs spawn(args, {});
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, spawn.binary().c_str(), &actions, nullptr, spawn.argv(), spawn.envp());
  posix_spawn_file_actions_destroy(&actions);
  return err == 0 ? pid : -1;
}

// Waits (up to 60 s) until the file `path` has `lines` complete lines; false when it did not.
inline bool wait_for_lines(const std::string& path, size_t lines) {
  for (int i = 0; i < 6000; ++i) {
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (size_t(std::count(text.begin(), text.end(), '\n')) >= lines) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace strata::test
