// Loading a Config from a JSON file and from the environment, and resolve_config, which layers
// defaults < file < env < flags. The key definitions and value checks are in config_value.cc.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/config.h"
#include "runtime/json_duplicates.h"
#include "runtime/suggest.h"

namespace strata {
namespace {

constexpr std::string_view kConfigKey = "config";
constexpr std::string_view kConfigEnv = "STRATA_CONFIG";
constexpr std::string_view kConfigFlag = "--config";

// A config file is a few KB; anything past this (a wrong path, /dev/zero, a data file) is refused
// after reading at most this much, never parsed or read to its end.
constexpr size_t kMaxConfigFileBytes = 4u << 20;

StatusOr<std::string> read_text_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return errno_status(errno, fmt::format("cannot open config file {}", path));
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    text.append(buf, n);
    if (text.size() > kMaxConfigFileBytes) {
      std::fclose(f);
      return error(Code::invalid_argument,
                   "config file {} is larger than {} MiB; a strata or DeepSpeed JSON config is a few KB: pass the "
                   "right file to --config",
                   path, kMaxConfigFileBytes >> 20);
    }
  }
  const int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (err != 0) return errno_status(err, fmt::format("cannot read config file {}", path));
  return text;
}

// "line 3, column 7" of the byte offset `byte` (1-based, as nlohmann reports it: the offset just
// past the character where parsing failed).
std::string line_and_column(const std::string& text, size_t byte) {
  const size_t end = std::min(byte == 0 ? 0 : byte - 1, text.size());
  size_t line = 1, column = 1;
  for (size_t i = 0; i < end; i++) {
    if (text[i] == '\n') {
      line++;
      column = 1;
    } else {
      column++;
    }
  }
  return fmt::format("line {}, column {}", line, column);
}

// nlohmann's message without its "[json.exception.parse_error.101] parse error at ...: " prefix.
std::string parse_error_reason(const std::string& what) {
  const size_t at = what.find("column ");
  const size_t colon = at == std::string::npos ? std::string::npos : what.find(": ", at);
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

std::string_view json_type_name(const nlohmann::json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

std::string_view json_types_for(ValueType type) {
  switch (type) {
    case ValueType::boolean: return "a boolean or a string";
    case ValueType::integer:
    case ValueType::real:
    case ValueType::size:
    case ValueType::choice: return "a number or a string";
    case ValueType::text:
    case ValueType::path: return "a string";
    case ValueType::path_list: return "a string or an array of strings";
  }
  return "a value";
}

// The text a JSON value stands for, or "" with *ok = false when the JSON type does not fit.
std::string json_to_text(const nlohmann::json& v, ValueType type, bool* ok) {
  *ok = true;
  if (v.is_string()) return v.get<std::string>();
  const bool numeric_key = type == ValueType::integer || type == ValueType::real || type == ValueType::size ||
                           type == ValueType::choice;
  if (v.is_boolean() && type == ValueType::boolean) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer() && numeric_key) return v.dump();
  if (v.is_number_float() && numeric_key) {
    const double d = v.get<double>();
    // 1e9 written in a file means the integer 1000000000, not the text "1e+09".
    if (std::trunc(d) == d && std::fabs(d) < 9.0e15) return fmt::format("{}", static_cast<int64_t>(d));
    return fmt::format("{}", d);
  }
  if (v.is_array() && type == ValueType::path_list) {
    std::string joined;
    for (const nlohmann::json& item : v) {
      if (!item.is_string() || item.get<std::string>().find(',') != std::string::npos) {
        *ok = false;
        return "";
      }
      if (!joined.empty()) joined += ",";
      joined += item.get<std::string>();
    }
    return joined;
  }
  *ok = false;
  return "";
}

// Every known path and each of its sections ("zero_optimization", "zero_optimization.offload_optimizer"),
// so that a typo in a section name gets a suggestion too.
std::vector<std::string> paths_and_sections(const std::vector<std::string>& known) {
  std::vector<std::string> out;
  for (const std::string& k : known) {
    for (size_t dot = k.find('.'); dot != std::string::npos; dot = k.find('.', dot + 1))
      if (std::find(out.begin(), out.end(), k.substr(0, dot)) == out.end()) out.push_back(k.substr(0, dot));
    out.push_back(k);
  }
  return out;
}

// True if `path` is a proper prefix (whole components) of a known file path.
bool is_known_prefix(const std::vector<std::string>& known, const std::string& path) {
  for (const std::string& k : known)
    if (k.size() > path.size() && k.compare(0, path.size(), path) == 0 && k[path.size()] == '.') return true;
  return false;
}

// "optimizer.params.betas[1]": the file path of element `index` of the array at `path`.
std::string indexed_path(const std::string& path, size_t index) { return fmt::format("{}[{}]", path, index); }

}  // namespace

Status Config::load_file(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(const std::string text, read_text_file(path));
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return error(Code::invalid_argument, "config file {} is not valid JSON at {}: {}", path,
                 line_and_column(text, e.byte), parse_error_reason(e.what()));
  } catch (const nlohmann::json::exception& e) {  // e.g. out_of_range: a number past double's range
    return error(Code::invalid_argument, "config file {} holds a value JSON cannot represent here ({}); fix the file",
                 path, parse_error_reason(e.what()));
  }
  if (!doc.is_object())
    return error(Code::invalid_argument, "config file {} must hold a JSON object ({{\"key\": value, ...}}), not {}",
                 path, json_type_name(doc));
  if (const std::optional<std::string> twice = first_duplicate_json_key(text))
    return error(Code::invalid_argument,
                 "config file {} sets '{}' twice in one object; JSON readers would keep the last one silently: keep "
                 "one of them",
                 path, *twice);

  std::vector<std::string> known = schema_.file_paths();
  for (std::string& p : schema_.ignored_file_paths()) known.push_back(std::move(p));
  Config staged = *this;  // nothing is kept from a file that fails
  // key name -> (JSON path that set it, the JSON value there)
  std::map<std::string, std::pair<std::string, std::string>> set_by;
  // Sets `key` from the JSON leaf `value` found at `json_path` (with an index suffix for an array
  // element), into `staged`.
  auto assign = [&](const ConfigKey& key, const std::string& json_path, const nlohmann::json& value) -> Status {
    if (key.name == kConfigKey)
      return error(Code::invalid_argument,
                   "config file {}: '{}' cannot be set inside a config file; pass --config or STRATA_CONFIG", path,
                   json_path);
    bool ok = false;
    const std::string value_text = json_to_text(value, key.type, &ok);
    if (!ok)
      return error(Code::invalid_argument, "config file {}: {} must be {} ({} in JSON), not {} ({})", path, json_path,
                   describe_accepted(key), json_types_for(key.type), json_type_name(value), value.dump());
    const std::string where = fmt::format("config file {}: {}={}", path, json_path, value.dump());
    if (auto [it, fresh] = set_by.emplace(key.name, std::pair{json_path, value.dump()}); !fresh) {
      // A second path for the same key (DeepSpeed's offload_optimizer.nvme_path and
      // offload_param.nvme_path, or optimizer.params.lr and scheduler.params.warmup_max_lr) is fine
      // when both say the same.
      StatusOr<ConfigValue> again = parse_config_value(key, value_text);
      if (!again.is_ok()) return again.status().with_context(where);
      if (again->text == staged.text(key.name)) return Status::ok();
      return error(Code::invalid_argument,
                   "config file {}: {} is set twice, to different values: '{}'={} and '{}'={}; keep one", path,
                   key.name, it->second.first, it->second.second, json_path, value.dump());
    }
    return staged.set_from(key, value_text, ConfigSource::file, path, where);
  };
  // Depth-first over nested objects; each leaf must be a key (by name or alias).
  std::vector<std::pair<std::string, const nlohmann::json*>> todo;
  for (auto it = doc.begin(); it != doc.end(); ++it) todo.emplace_back(it.key(), &it.value());
  while (!todo.empty()) {
    auto [json_path, value] = todo.front();
    todo.erase(todo.begin());
    const ConfigKey* key = schema_.find_by_file_path(json_path);
    if (key == nullptr) {
      if (const std::string* reason = schema_.ignored_file_path_reason(json_path)) {
        if (value->is_object() || value->is_array() || value->is_null())
          return error(Code::invalid_argument,
                       "config file {}: {} must be a single value (a number, string or boolean), not {} ({})", path,
                       json_path, json_type_name(*value), value->dump());
        staged.ignored_.push_back({json_path, value->dump(), path, *reason});
        continue;
      }
      if (value->is_object() && is_known_prefix(known, json_path)) {
        size_t at = 0;
        for (auto it = value->begin(); it != value->end(); ++it)
          todo.insert(todo.begin() + static_cast<ptrdiff_t>(at++), {json_path + "." + it.key(), &it.value()});
        continue;
      }
      // An array whose elements are keys of their own: "betas": [0.9, 0.95] sets the keys with the
      // file aliases "betas[0]" and "betas[1]".
      if (value->is_array() && schema_.find_by_file_path(indexed_path(json_path, 0)) != nullptr) {
        for (size_t i = 0; i < value->size(); i++) {
          const ConfigKey* element_key = schema_.find_by_file_path(indexed_path(json_path, i));
          if (element_key == nullptr)
            return error(Code::invalid_argument,
                         "config file {}: {} has {} elements but only {} are known ({} to {}); index {} has no key: "
                         "remove the extra elements",
                         path, json_path, value->size(), i, indexed_path(json_path, 0), indexed_path(json_path, i - 1),
                         i);
          STRATA_RETURN_IF_ERROR(assign(*element_key, indexed_path(json_path, i), (*value)[i]));
        }
        continue;
      }
      return error(Code::invalid_argument, "config file {}: unknown key '{}'{}", path, json_path,
                   did_you_mean(json_path, paths_and_sections(known)));
    }
    STRATA_RETURN_IF_ERROR(assign(*key, json_path, *value));
  }
  // This file's ignored settings in the schema's order (nlohmann sorts object members by name).
  const std::vector<std::string> order = schema_.ignored_file_paths();
  auto rank = [&](const IgnoredFileSetting& s) {
    return std::find(order.begin(), order.end(), s.path) - order.begin();
  };
  std::stable_sort(staged.ignored_.begin() + static_cast<ptrdiff_t>(ignored_.size()), staged.ignored_.end(),
                   [&](const IgnoredFileSetting& a, const IgnoredFileSetting& b) { return rank(a) < rank(b); });
  *this = std::move(staged);
  return Status::ok();
}

Status Config::load_env(char** envp) {
  if (envp == nullptr) return Status::ok();
  for (char** e = envp; *e != nullptr; e++) {
    const std::string_view entry(*e);
    if (entry.substr(0, 7) != "STRATA_") continue;
    const size_t eq = entry.find('=');
    const std::string_view name = entry.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view() : entry.substr(eq + 1);
    if (schema_.env_ignored(name)) continue;
    const ConfigKey* key = schema_.find_by_env(name);
    if (key == nullptr) {
      if (name == kConfigEnv) continue;  // names the file when the schema has no `config` key
      // The environment is inherited by every process (another tool's or another strata version's
      // STRATA_* variable), so an unknown one is a warning, not a refusal: flags and file keys,
      // which a user writes for this command, stay errors.
      unknown_env_.push_back(fmt::format(
          "environment variable {} is not a strata setting and is ignored{}; `strata config --help` lists the "
          "settings (unset it to silence this warning)",
          name, did_you_mean(name, schema_.env_names(), "")));
      continue;
    }
    STRATA_RETURN_IF_ERROR(set_from(*key, value, ConfigSource::env, name, fmt::format("{}={}", name, value)));
  }
  return Status::ok();
}

StatusOr<Config> resolve_config(const ConfigSchema& schema,
                                const std::vector<std::pair<std::string, std::string>>& flags, char** envp) {
  Config config(schema);
  std::string file;
  for (const auto& [flag, value] : flags)
    if (flag == kConfigFlag) file = value;
  if (file.empty() && envp != nullptr)
    for (char** e = envp; *e != nullptr; e++) {
      const std::string_view entry(*e);
      if (entry.substr(0, kConfigEnv.size() + 1) == fmt::format("{}=", kConfigEnv))
        file = std::string(entry.substr(kConfigEnv.size() + 1));
    }
  if (!file.empty()) STRATA_RETURN_IF_ERROR(config.load_file(file));
  STRATA_RETURN_IF_ERROR(config.load_env(envp));
  for (const auto& [flag, value] : flags) {
    const ConfigKey* key = schema.find_by_flag(flag);
    if (key == nullptr) {
      if (flag == kConfigFlag) continue;  // named the file; the schema has no `config` key to show it
      return error(Code::invalid_argument, "unknown flag {}{}", flag, did_you_mean(flag, schema.flag_names(), ""));
    }
    STRATA_RETURN_IF_ERROR(config.set(key->name, value, ConfigSource::flag, flag));
  }
  return config;
}

}  // namespace strata
