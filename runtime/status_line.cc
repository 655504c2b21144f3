// The status line under the log (see status_line.h).
#include "runtime/status_line.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <spdlog/sinks/ansicolor_sink.h>
#include <spdlog/sinks/sink.h>

#include "runtime/log.h"
#include "runtime/mutex.h"

namespace strata {
namespace {

constexpr const char* kErase = "\r\033[K";  // to column 0, erase to the end of the line

int terminal_columns() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) != 0) return 0;
  return ws.ws_col;
}

}  // namespace

bool stderr_is_terminal() {
  if (::isatty(STDERR_FILENO) == 0) return false;
  const char* term = std::getenv("TERM");
  return term != nullptr && *term != '\0' && std::strcmp(term, "dumb") != 0;
}

std::string fit_status_text(const std::string& text, int columns) {
  std::string out = text.substr(0, text.find('\n'));
  if (columns > 1 && out.size() > size_t(columns - 1)) out.resize(size_t(columns - 1));
  return out;
}

// Writes each message through spdlog's colour sink for stderr, with the status line erased first
// and drawn again after, all under mu_. A sink of its own rather than a base_sink<Mutex>: the
// packaged (compiled) spdlog instantiates base_sink only for its own mutex types.
class StatusLine::Sink final : public spdlog::sinks::sink {
 public:
  void show(const std::string& text) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    line_ = fit_status_text(text, terminal_columns());
    std::fputs(kErase, stderr);
    std::fputs(line_.c_str(), stderr);
    std::fflush(stderr);
  }

  void clear() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (line_.empty()) return;
    line_.clear();
    std::fputs(kErase, stderr);
    std::fflush(stderr);
  }

  void log(const spdlog::details::log_msg& msg) override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (!line_.empty()) std::fputs(kErase, stderr);
    inner_.log(msg);  // writes the message and its newline, flushes
    if (!line_.empty()) {
      std::fputs(line_.c_str(), stderr);
      std::fflush(stderr);
    }
  }
  void flush() override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    inner_.flush();
  }
  void set_pattern(const std::string& pattern) override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    inner_.set_pattern(pattern);
  }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    inner_.set_formatter(std::move(formatter));
  }

 private:
  Mutex mu_;
  spdlog::sinks::ansicolor_stderr_sink_st inner_ GUARDED_BY(mu_);  // single-threaded: mu_ serializes it
  std::string line_ GUARDED_BY(mu_);                               // "" when no line is shown
};

namespace {

// The sink of the living StatusLine, for clear_status_line.
Mutex g_active_mutex;
std::weak_ptr<StatusLine::Sink> g_active GUARDED_BY(g_active_mutex);

}  // namespace

void clear_status_line() {
  std::shared_ptr<StatusLine::Sink> sink;
  {
    MutexLock lock(g_active_mutex);
    sink = g_active.lock();
  }
  if (sink) sink->clear();
}

std::shared_ptr<StatusLine> StatusLine::install(spdlog::level::level_enum level) {
  auto sink = std::make_shared<Sink>();
  {
    MutexLock lock(g_active_mutex);
    g_active = sink;
  }
  spdlog::drop("strata");
  auto logger = std::make_shared<spdlog::logger>("strata", sink);
  logger->set_pattern(kLogPattern);
  logger->set_level(level);
  spdlog::set_default_logger(logger);
  return std::shared_ptr<StatusLine>(new StatusLine(std::move(sink)));
}

StatusLine::~StatusLine() { clear(); }

void StatusLine::show(const std::string& text) { sink_->show(text); }

void StatusLine::clear() { sink_->clear(); }

}  // namespace strata
