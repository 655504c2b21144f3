// Parsing and checking of one config value against its ConfigKey (see config_value.h).
#include "runtime/config_value.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "runtime/text.h"
#include "runtime/units.h"

namespace strata {
namespace {

// A bound as the user writes it: sizes with units, numbers plainly.
std::string format_bound(const ConfigKey& key, double v) {
  if (key.type == ValueType::size) return format_size(static_cast<uint64_t>(v));
  if (key.type == ValueType::integer) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

std::string describe_range(const ConfigKey& key) {
  const bool has_min = std::isfinite(key.min), has_max = std::isfinite(key.max);
  if (has_min && has_max) return fmt::format(" in [{}, {}]", format_bound(key, key.min), format_bound(key, key.max));
  if (has_min) return fmt::format(" >= {}", format_bound(key, key.min));
  if (has_max) return fmt::format(" <= {}", format_bound(key, key.max));
  return "";
}

Status value_error(Code code, const ConfigKey& key, std::string_view detail) {
  if (detail.empty()) return error(code, "{} must be {}", key.name, describe_accepted(key));
  return error(code, "{} must be {} ({})", key.name, describe_accepted(key), detail);
}

Status check_range(const ConfigKey& key, double v) {
  if (v >= key.min && v <= key.max) return Status::ok();
  return value_error(Code::out_of_range, key, "");
}

StatusOr<bool> parse_bool(std::string_view text) {
  const std::string t = to_lower(text);
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  return Status(Code::invalid_argument, "");
}

}  // namespace

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::boolean: return "boolean";
    case ValueType::integer: return "integer";
    case ValueType::real: return "number";
    case ValueType::size: return "size";
    case ValueType::text: return "text";
    case ValueType::choice: return "choice";
    case ValueType::path: return "path";
    case ValueType::path_list: return "path list";
  }
  return "value";
}

std::string describe_accepted(const ConfigKey& key) {
  std::string base;
  switch (key.type) {
    case ValueType::boolean: base = "true or false"; break;
    case ValueType::integer: base = "an integer" + describe_range(key); break;
    case ValueType::real: base = "a number" + describe_range(key); break;
    case ValueType::size: base = "a size" + describe_range(key) + " (e.g. 512MiB, 24GB, 1.5TiB)"; break;
    case ValueType::text: base = "text"; break;
    case ValueType::choice: base = fmt::format("one of {}", fmt::join(key.choices, ", ")); break;
    case ValueType::path: base = "a path"; break;
    case ValueType::path_list: base = "a comma-separated list of paths"; break;
  }
  if (key.allow_auto) base += " or auto";
  return base;
}

StatusOr<ConfigValue> parse_config_value(const ConfigKey& key, std::string_view raw) {
  const std::string_view text = trim(raw);
  ConfigValue v;
  const bool numeric = key.type == ValueType::integer || key.type == ValueType::real || key.type == ValueType::size;
  if (numeric && key.allow_auto && to_lower(text) == "auto") {
    v.text = "auto";
    v.is_auto = true;
    return v;
  }
  switch (key.type) {
    case ValueType::boolean: {
      StatusOr<bool> b = parse_bool(text);
      if (!b.is_ok()) return value_error(Code::invalid_argument, key, "");
      v.boolean = *b;
      v.text = v.boolean ? "true" : "false";
      return v;
    }
    case ValueType::integer: {
      int64_t i = 0;
      const char* end = text.data() + text.size();
      auto [ptr, ec] = std::from_chars(text.data(), end, i);
      if (text.empty() || ec == std::errc::result_out_of_range)
        return value_error(text.empty() ? Code::invalid_argument : Code::out_of_range, key, "");
      if (ec != std::errc() || ptr != end) return value_error(Code::invalid_argument, key, "");
      STRATA_RETURN_IF_ERROR(check_range(key, static_cast<double>(i)));
      v.integer = i;
      v.text = fmt::format("{}", i);
      return v;
    }
    case ValueType::real: {
      double d = 0;
      const char* end = text.data() + text.size();
      auto [ptr, ec] = std::from_chars(text.data(), end, d);
      if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(d))
        return value_error(Code::invalid_argument, key, "");
      STRATA_RETURN_IF_ERROR(check_range(key, d));
      v.real = d;
      v.text = fmt::format("{}", d);
      return v;
    }
    case ValueType::size: {
      StatusOr<uint64_t> bytes = parse_size(text);
      if (!bytes.is_ok()) return value_error(bytes.status().code(), key, bytes.status().message());
      STRATA_RETURN_IF_ERROR(check_range(key, static_cast<double>(*bytes)));
      v.size = *bytes;
      v.text = std::string(text);
      return v;
    }
    case ValueType::text:
      v.text = std::string(raw);
      return v;
    case ValueType::choice: {
      const std::string t = to_lower(text);
      for (const std::string& c : key.choices)
        if (to_lower(c) == t) {
          v.text = c;
          return v;
        }
      return value_error(Code::invalid_argument, key, "");
    }
    case ValueType::path:
      v.text = std::string(text);
      return v;
    case ValueType::path_list: {
      size_t start = 0;
      while (start <= text.size() && !text.empty()) {
        size_t comma = text.find(',', start);
        if (comma == std::string_view::npos) comma = text.size();
        const std::string_view item = trim(text.substr(start, comma - start));
        if (item.empty())
          return value_error(Code::invalid_argument, key, "an entry is empty");
        v.list.emplace_back(item);
        start = comma + 1;
      }
      v.text = fmt::format("{}", fmt::join(v.list, ","));
      return v;
    }
  }
  return value_error(Code::internal, key, "unknown value type");
}

}  // namespace strata
