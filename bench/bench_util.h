// Small helpers the benchmarks share: the median (and spread) of repeated timings, running a peer
// program (fio, python3, gnuplot) with its output captured, the progress line of a sweep and the
// backend `--device cpu|cuda|auto` picks. Not a benchmarking framework: each bench owns its loop.
// Thread-safety: free functions without shared state (print_progress writes stderr).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/backend.h"
#include "runtime/status.h"

namespace strata::bench {

// The middle element of `v` after sorting (the upper one of the two for an even count); 0 if empty.
double median(std::vector<double> v);

// Runs `command` through /bin/sh and calls `on_line` with each line of its stdout (without the
// newline) as it arrives. A command that cannot start is the errno status; one that exits
// non-zero is `unavailable` naming the command and its exit status.
Status run_command_lines(const std::string& command, const std::function<void(std::string_view line)>& on_line);

// The whole stdout of `command` (same errors as run_command_lines).
StatusOr<std::string> run_command(const std::string& command);

// The median, smallest and largest of repeated figures (all 0 when there are none).
struct Spread {
  double median = 0, min = 0, max = 0;
};
Spread spread(const std::vector<double>& v);

// Runs gnuplot on `script` (its text; the script names its own output file). unavailable, saying
// how to install it, when gnuplot is missing; the script's errors are `unavailable` with its output.
Status run_gnuplot(const std::string& script, const std::string& png_path);

// Writes `text` to `path` (a report: JSON, CSV), replacing it; io_error naming the path on failure.
Status write_text_file(const std::string& path, const std::string& text);

// One progress report of a sweep on stderr, as "<command>: point 3/20: <what>" lines (logs, CI),
// or a bar redrawn in place when stderr is a terminal. done == total ends the sweep.
void print_progress(std::string_view command, size_t done, size_t total, const std::string& what);

// The backend `--device` asks for: "cpu", "cuda" or "auto" (CUDA when cuda_available(), else the
// CPU backend), with `why` saying how it was chosen ("--device auto: built without CUDA ...").
// Anything else is invalid_argument naming the value and the choices. Does not create a backend.
struct BackendChoice {
  BackendKind kind = BackendKind::cpu;
  std::string why;
};
StatusOr<BackendChoice> choose_backend(std::string_view device);

}  // namespace strata::bench
