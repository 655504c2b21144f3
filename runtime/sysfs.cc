// One-value reads from /sys and /proc (see sysfs.h).
#include "runtime/sysfs.h"

#include <charconv>
#include <fstream>
#include <string_view>

namespace strata {
namespace {

std::string_view trim(std::string_view s) {
  const char* space = " \t\r\n";
  size_t b = s.find_first_not_of(space);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(space);
  return s.substr(b, e - b + 1);
}

}  // namespace

std::optional<std::string> read_sysfs_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return std::string(trim(line));
}

std::optional<int64_t> read_sysfs_int(const std::string& path) {
  auto line = read_sysfs_line(path);
  if (!line || line->empty()) return std::nullopt;
  int64_t v = 0;
  const char* end = line->data() + line->size();
  auto [ptr, ec] = std::from_chars(line->data(), end, v);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

std::optional<std::string> read_proc_field(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (trim(std::string_view(line).substr(0, colon)) == key)
      return std::string(trim(std::string_view(line).substr(colon + 1)));
  }
  return std::nullopt;
}

}  // namespace strata
