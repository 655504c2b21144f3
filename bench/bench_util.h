// Small helpers the benchmarks share: the median of repeated timings and running a peer program
// (fio, python3) with its output captured. Not a benchmarking framework: each bench owns its loop.
// Thread-safety: free functions without shared state.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

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

}  // namespace strata::bench
