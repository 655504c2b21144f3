// Size and count parsing/printing (see units.h for the accepted forms).
#include "runtime/units.h"

#include <cctype>
#include <charconv>
#include <cmath>

#include "runtime/text.h"

namespace strata {
namespace {

// Splits " 1.5 GiB " into 1.5 and "GiB" (a view into `text`). Out-parameters rather than a
// StatusOr<struct with a string>: GCC 12 reports a false -Wmaybe-uninitialized through the variant.
Status split_number(std::string_view text, std::string_view what, double* number, std::string_view* unit) {
  const std::string_view t = trim(text);
  if (t.empty()) return error(Code::invalid_argument, "empty {}", what);
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) i++;
  if (i == 0) return error(Code::invalid_argument, "'{}' is not a {}: it must start with a number", text, what);
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + i, *number);
  if (ec != std::errc() || ptr != t.data() + i)
    return error(Code::invalid_argument, "'{}' is not a {}: bad number '{}'", text, what, t.substr(0, i));
  *unit = trim(t.substr(i));
  return Status::ok();
}

StatusOr<uint64_t> to_integer(double value, std::string_view text, std::string_view what) {
  if (!std::isfinite(value) || value >= 9.2e18)
    return error(Code::out_of_range, "{} '{}' is too large (the limit is 2^63)", what, text);
  return static_cast<uint64_t>(std::llround(value));
}

// At most 3 significant digits, never an exponent ("1000", not "1e+03"), no trailing zeros.
std::string trim_number(double v) {
  const int decimals = v >= 99.5 ? 0 : v >= 9.995 ? 1 : 2;
  std::string s = fmt::format("{:.{}f}", v, decimals);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

}  // namespace

StatusOr<uint64_t> parse_size(std::string_view text) {
  double number = 0;
  std::string_view u;
  STRATA_RETURN_IF_ERROR(split_number(text, "size", &number, &u));
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
  return to_integer(number * scale, text, "size");
}

StatusOr<uint64_t> parse_count(std::string_view text) {
  double number = 0;
  std::string_view u;
  STRATA_RETURN_IF_ERROR(split_number(text, "count", &number, &u));
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
  return to_integer(number * scale, text, "count");
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
