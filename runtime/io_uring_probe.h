// Whether io_uring works in this process: reads kernel.io_uring_disabled, sets up a small ring and
// completes one NOP through it. The I/O engine uses the answer to choose between io_uring and its
// POSIX fallback; `strata info` prints it. Not an I/O engine and not a feature matrix.
// Thread-safe: no shared state; each call builds and tears down its own ring (~100 us).
#pragma once

#include <string>

namespace strata {

struct IoUringProbe {
  bool works = false;
  std::string reason;               // why not, when !works ("kernel without io_uring", ...)
  int kernel_disabled_setting = -1;  // /proc/sys/kernel/io_uring_disabled: 0, 1, 2; -1 absent
};

IoUringProbe probe_io_uring();

}  // namespace strata
