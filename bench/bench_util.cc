// Shared bench helpers (see bench_util.h).
#include "bench/bench_util.h"

#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

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

}  // namespace strata::bench
