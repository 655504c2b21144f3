// Shared bench helpers (see bench_util.h).
#include "bench/bench_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>

#include <fmt/core.h>

namespace strata::bench {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Status run_command_lines(const std::string& command, const std::function<void(std::string_view line)>& on_line) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return errno_status(errno, "starting `" + command + "`");
  std::string line;
  int c;
  while ((c = std::fgetc(pipe)) != EOF) {
    if (c == '\n') {
      on_line(line);
      line.clear();
    } else {
      line.push_back(static_cast<char>(c));
    }
  }
  if (!line.empty()) on_line(line);
  const int rc = ::pclose(pipe);
  if (rc != 0)
    return error(Code::unavailable, "`{}` exited with status {}", command, WIFEXITED(rc) ? WEXITSTATUS(rc) : rc);
  return Status::ok();
}

StatusOr<std::string> run_command(const std::string& command) {
  std::string out;
  STRATA_RETURN_IF_ERROR(run_command_lines(command, [&](std::string_view line) {
    out.append(line);
    out.push_back('\n');
  }));
  return out;
}

Spread spread(const std::vector<double>& v) {
  if (v.empty()) return Spread{};
  return Spread{median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return error(Code::io_error, "cannot write {}", path);
  return Status::ok();
}

Status run_gnuplot(const std::string& script, const std::string& png_path) {
  if (!run_command("gnuplot --version >/dev/null 2>&1").is_ok())
    return Status(Code::unavailable, "gnuplot is not installed (apt-get install gnuplot-nox); the CSV has the data");
  const std::string script_path = png_path + ".gp";
  FILE* f = std::fopen(script_path.c_str(), "w");
  if (f == nullptr) return errno_status(errno, "write " + script_path);
  std::fputs(script.c_str(), f);
  std::fclose(f);
  auto out = run_command(fmt::format("gnuplot '{}' 2>&1", script_path));
  ::unlink(script_path.c_str());
  if (!out.is_ok()) return out.status().with_context("drawing " + png_path);
  return Status();
}

void print_progress(std::string_view command, size_t done, size_t total, const std::string& what) {
  static const bool tty = ::isatty(STDERR_FILENO) != 0;
  if (tty) {
    const size_t width = 30, filled = total ? std::min(done, total) * width / total : width;
    fmt::print(stderr, "\r[{}{}] {}/{} {:<40}", std::string(filled, '#'), std::string(width - filled, ' '), done,
               total, what);
    if (done >= total) fmt::print(stderr, "\n");
  } else if (done < total) {
    fmt::print(stderr, "{}: point {}/{}: {}\n", command, done + 1, total, what);
  }
  std::fflush(stderr);
}

StatusOr<BackendChoice> choose_backend(std::string_view device) {
  BackendChoice c;
  if (device == "cuda") {
    c.kind = BackendKind::cuda;
    c.why = "--device cuda";
  } else if (device == "cpu") {
    c.why = "--device cpu";
  } else if (device == "auto") {
    std::string reason;
    if (cuda_available(&reason)) {
      c.kind = BackendKind::cuda;
      c.why = "--device auto and a CUDA device is visible";
    } else {
      c.why = "--device auto: " + reason;
    }
  } else {
    return error(Code::invalid_argument, "--device {}: expected cpu, cuda or auto", device);
  }
  return c;
}

}  // namespace strata::bench
