// Reading the small text files of /sys and /proc: one value per file ("16.0 GT/s PCIe", "-1",
// "0"). Not a parser for multi-line files such as /proc/cpuinfo beyond finding one "key : value".
// Thread-safe: no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace strata {

// The file's first line without surrounding whitespace; nullopt if it cannot be read.
std::optional<std::string> read_sysfs_line(const std::string& path);
// The first line parsed as a decimal integer; nullopt if unreadable or not a number.
std::optional<int64_t> read_sysfs_int(const std::string& path);
// The value of the first "key<spaces>: value" line of a /proc-style file, or nullopt.
std::optional<std::string> read_proc_field(const std::string& path, const std::string& key);

}  // namespace strata
