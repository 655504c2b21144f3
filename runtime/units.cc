// Size and count parsing/printing (see units.h for the accepted forms).
#include "runtime/units.h"

#include <cctype>
#include <charconv>
#include <cmath>

namespace strata {
namespace {

struct Split {
  double number;
  std::string unit;
};

StatusOr<Split> split_number(std::string_view text, std::string_view what) {
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) b++;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) e--;
  std::string_view t = text.substr(b, e - b);
  if (t.empty()) return error(Code::invalid_argument, "empty {}", what);
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) i++;
  if (i == 0) return error(Code::invalid_argument, "'{}' is not a {}: it must start with a number", text, what);
  double number = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + i, number);
  if (ec != std::errc() || ptr != t.data() + i)
    return error(Code::invalid_argument, "'{}' is not a {}: bad number '{}'", text, what, t.substr(0, i));
  std::string unit;
  for (size_t j = i; j < t.size(); j++)
    if (!std::isspace(static_cast<unsigned char>(t[j]))) unit.push_back(t[j]);
  return Split{number, unit};
}

StatusOr<uint64_t> to_integer(double value, std::string_view text, std::string_view what) {
  if (!std::isfinite(value) || value >= 9.2e18)
    return error(Code::out_of_range, "{} '{}' is too large (the limit is 2^63)", what, text);
  return static_cast<uint64_t>(std::llround(value));
}

std::string trim_number(double v) {
  std::string s = fmt::format("{:.3g}", v);
  return s;
}

}  // namespace

StatusOr<uint64_t> parse_size(std::string_view text) {
  STRATA_ASSIGN_OR_RETURN(Split s, split_number(text, "size"));
  const std::string& u = s.unit;
  double scale = 0;
  if (u.empty() || u == "B" || u == "b") scale = 1;
  else if (u == "KiB" || u == "k" || u == "K") scale = 1024.0;
  else if (u == "MiB" || u == "m" || u == "M") scale = 1024.0 * 1024;
  else if (u == "GiB" || u == "g" || u == "G") scale = 1024.0 * 1024 * 1024;
  else if (u == "TiB" || u == "t" || u == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (u == "KB" || u == "kB") scale = 1e3;
  else if (u == "MB") scale = 1e6;
  else if (u == "GB") scale = 1e9;
  else if (u == "TB") scale = 1e12;
  else
    return error(Code::invalid_argument,
                 "'{}' is not a size: unknown unit '{}' (use B, KiB, MiB, GiB, TiB (x1024), "
                 "KB, MB, GB, TB (x1000), or k, M, G, T (x1024))",
                 text, u);
  return to_integer(s.number * scale, text, "size");
}

StatusOr<uint64_t> parse_count(std::string_view text) {
  STRATA_ASSIGN_OR_RETURN(Split s, split_number(text, "count"));
  const std::string& u = s.unit;
  double scale = 0;
  if (u.empty()) scale = 1;
  else if (u == "K" || u == "k") scale = 1e3;
  else if (u == "M" || u == "m") scale = 1e6;
  else if (u == "B" || u == "G" || u == "b" || u == "g") scale = 1e9;
  else if (u == "T" || u == "t") scale = 1e12;
  else
    return error(Code::invalid_argument,
                 "'{}' is not a count: unknown suffix '{}' (use K = 1e3, M = 1e6, B or G = 1e9, T = 1e12)",
                 text, u);
  return to_integer(s.number * scale, text, "count");
}

std::string format_size(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int i = 0;
  while (v >= 1024.0 && i < 6) {
    v /= 1024.0;
    i++;
  }
  if (i == 0) return fmt::format("{} B", bytes);
  return fmt::format("{} {}", trim_number(v), units[i]);
}

std::string format_rate(double bytes_per_second) {
  static const char* units[] = {"B/s", "KB/s", "MB/s", "GB/s", "TB/s"};
  double v = bytes_per_second;
  int i = 0;
  while (v >= 1000.0 && i < 4) {
    v /= 1000.0;
    i++;
  }
  return fmt::format("{:.2f} {}", v, units[i]);
}

std::string format_count(double count) {
  static const char* units[] = {"", "K", "M", "B", "T"};
  double v = count;
  int i = 0;
  while (v >= 1000.0 && i < 4) {
    v /= 1000.0;
    i++;
  }
  if (i == 0) return fmt::format("{}", trim_number(v));
  return fmt::format("{}{}", trim_number(v), units[i]);
}

}  // namespace strata
