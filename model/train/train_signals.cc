// The stop-signal handlers of `strata train` and the resume command they print (see
// train_signals.h).
#include "model/train/train_signals.h"

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <vector>

#include <fmt/core.h>

namespace strata::model {
namespace {

volatile sig_atomic_t g_stop_signal = 0;

void write_stderr(const char* text, size_t n) {
  ssize_t ignored = ::write(STDERR_FILENO, text, n);
  (void)ignored;
}

void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    static const char kAbort[] = "\nstrata: second signal: stopping at once, without a checkpoint\n";
    write_stderr(kAbort, sizeof(kAbort) - 1);
    ::_exit(128 + sig);
  }
  g_stop_signal = sig;
  static const char kStop[] =
      "\nstrata: stopping after the current step (and its checkpoint); signal again to stop at once\n";
  write_stderr(kStop, sizeof(kStop) - 1);
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@") ==
                        std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() { return g_stop_signal; }

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return fmt::format("signal {}", sig);
  }
}

std::string resume_command(const std::string& resume_dir) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t begin = 0; begin < all.size();) {
    const size_t end = all.find('\0', begin);
    args.push_back(all.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  if (args.empty()) args = {"strata", "train"};
  std::string out;
  bool replaced = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "--resume" && i + 1 < args.size()) {
      out += " --resume " + shell_quote(resume_dir);
      ++i;
      replaced = true;
      continue;
    }
    if (a.starts_with("--resume=")) {
      out += " --resume " + shell_quote(resume_dir);
      replaced = true;
      continue;
    }
    out += (i == 0 ? "" : " ") + shell_quote(a);
  }
  if (!replaced) out += " --resume " + shell_quote(resume_dir);
  return out;
}

}  // namespace strata::model
