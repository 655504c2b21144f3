// StatusLine: one line at the bottom of a terminal, redrawn in place (a progress bar: step, loss,
// ETA), with every log message printed above it, so a long run shows a few lines and one moving
// line instead of a line per step. It owns strata's logger while it lives: install() replaces the
// logger init_logging made with one whose sink erases the line, writes the message and redraws it.
// Only for a terminal (stderr_is_terminal): where stderr is a pipe or a file the caller prints plain
// lines instead, since a redrawn line there is a mess of carriage returns. Not a curses screen: one
// line, carriage return and erase-to-end-of-line, nothing else.
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace strata {

// Whether stderr is a terminal that understands a carriage return and "erase to end of line":
// isatty(2), and TERM is set and not "dumb".
bool stderr_is_terminal();

class StatusLine {
 public:
  // Installs strata's logger (the pattern and `level` of init_logging) writing to stderr through a
  // sink that keeps the status line below every message. Thread-safe after the call: messages
  // from any thread and show() are serialized by the sink's mutex.
  static std::shared_ptr<StatusLine> install(spdlog::level::level_enum level);

  StatusLine(const StatusLine&) = delete;
  StatusLine& operator=(const StatusLine&) = delete;
  // Erases the line (as clear()); the logger stays installed and prints plain lines.
  ~StatusLine();

  // Replaces the line with `text` (one line: a newline in it ends it there), cut to the
  // terminal's width minus one column so it never wraps (a wrapped line cannot be redrawn).
  void show(const std::string& text);
  // Erases the line; later messages print as plain lines until the next show().
  void clear();

  class Sink;  // the spdlog sink (status_line.cc)

 private:
  explicit StatusLine(std::shared_ptr<Sink> sink) : sink_(std::move(sink)) {}
  std::shared_ptr<Sink> sink_;
};

// Erases the installed status line, if one is shown, before a write to stderr that does not go
// through the logger (the CLI's "strata: error: ..." line); it is drawn again at the next show().
// Thread-safe; does nothing when no StatusLine lives.
void clear_status_line();

// `text` cut to `columns` - 1 characters at most (a terminal of `columns` columns; none when
// columns is 0, unknown) and at its first newline. The characters are bytes: callers pass ASCII.
std::string fit_status_text(const std::string& text, int columns);

}  // namespace strata
