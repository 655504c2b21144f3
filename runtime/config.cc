// Config: storing checked values with their source, typed getters, and the two printed forms
// (table and JSON). Loading from files and the environment is in config_load.cc.
#include "runtime/config.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/suggest.h"

namespace strata {

std::string_view config_source_name(ConfigSource source) {
  switch (source) {
    case ConfigSource::default_value: return "default";
    case ConfigSource::file: return "file";
    case ConfigSource::env: return "env";
    case ConfigSource::flag: return "flag";
  }
  return "unknown";
}

Config::Config(ConfigSchema schema) : schema_(std::move(schema)) {
  entries_.reserve(schema_.keys().size());
  for (const ConfigKey& key : schema_.keys()) {
    // ConfigSchema::add checked every default, so this cannot fail.
    entries_.push_back(Entry{std::move(parse_config_value(key, key.default_text)).value(),
                             ConfigSource::default_value, ""});
  }
}

Status Config::set(std::string_view key, std::string_view text, ConfigSource source, std::string_view origin) {
  const ConfigKey* k = schema_.find(key);
  if (k == nullptr)
    return error(Code::invalid_argument, "unknown config key '{}'{}", key, did_you_mean(key, schema_.key_names()));
  std::string where;
  switch (source) {
    case ConfigSource::default_value: where = fmt::format("default {}={}", key, text); break;
    case ConfigSource::file: where = fmt::format("{}: {}={}", origin, key, text); break;
    case ConfigSource::env: where = fmt::format("{}={}", origin, text); break;
    case ConfigSource::flag: where = fmt::format("{} {}", origin, text); break;
  }
  return set_from(*k, text, source, origin, where);
}

Status Config::set_from(const ConfigKey& key, std::string_view text, ConfigSource source, std::string_view origin,
                        std::string_view where) {
  StatusOr<ConfigValue> value = parse_config_value(key, text);
  if (!value.is_ok()) return value.status().with_context(where);
  Entry& e = entries_[schema_.index_of(key.name)];
  e.value = std::move(value).value();
  e.source = source;
  e.origin = std::string(origin);
  return Status::ok();
}

const ConfigKey& Config::key_or_throw(std::string_view key) const {
  const ConfigKey* k = schema_.find(key);
  if (k == nullptr) throw std::logic_error(fmt::format("config key '{}' is not in the schema", key));
  return *k;
}

const Config::Entry& Config::entry(std::string_view key, std::initializer_list<ValueType> types,
                                   std::string_view getter) const {
  const ConfigKey& k = key_or_throw(key);
  if (std::find(types.begin(), types.end(), k.type) == types.end())
    throw std::logic_error(fmt::format("config key '{}' is a {}; {} cannot read it", key, value_type_name(k.type), getter));
  return entries_[schema_.index_of(k.name)];
}

namespace {
void throw_if_auto(const ConfigValue& v, std::string_view key, std::string_view getter) {
  if (v.is_auto)
    throw std::logic_error(fmt::format("config key '{}' is auto; read it with {}_or_auto", key, getter));
}
}  // namespace

bool Config::get_bool(std::string_view key) const { return entry(key, {ValueType::boolean}, "get_bool").value.boolean; }

int64_t Config::get_int(std::string_view key) const {
  const ConfigValue& v = entry(key, {ValueType::integer}, "get_int").value;
  throw_if_auto(v, key, "get_int");
  return v.integer;
}

double Config::get_real(std::string_view key) const {
  const ConfigValue& v = entry(key, {ValueType::real}, "get_real").value;
  if (v.is_auto) throw std::logic_error(fmt::format("config key '{}' is auto; check text() first", key));
  return v.real;
}

uint64_t Config::get_size(std::string_view key) const {
  const ConfigValue& v = entry(key, {ValueType::size}, "get_size").value;
  throw_if_auto(v, key, "get_size");
  return v.size;
}

const std::string& Config::get_text(std::string_view key) const {
  return entry(key, {ValueType::text, ValueType::choice, ValueType::path}, "get_text").value.text;
}

const std::vector<std::string>& Config::get_list(std::string_view key) const {
  return entry(key, {ValueType::path_list}, "get_list").value.list;
}

std::optional<int64_t> Config::get_int_or_auto(std::string_view key) const {
  const ConfigValue& v = entry(key, {ValueType::integer}, "get_int_or_auto").value;
  if (v.is_auto) return std::nullopt;
  return v.integer;
}

std::optional<uint64_t> Config::get_size_or_auto(std::string_view key) const {
  const ConfigValue& v = entry(key, {ValueType::size}, "get_size_or_auto").value;
  if (v.is_auto) return std::nullopt;
  return v.size;
}

ConfigSource Config::source(std::string_view key) const {
  return entries_[schema_.index_of(key)].source;
}

const std::string& Config::origin(std::string_view key) const {
  return entries_[schema_.index_of(key)].origin;
}

const std::string& Config::text(std::string_view key) const {
  return entries_[schema_.index_of(key)].value.text;
}

std::string Config::describe_source(std::string_view key) const {
  const Entry& e = entries_[schema_.index_of(key)];
  if (e.source == ConfigSource::default_value) return "default";
  return fmt::format("{} {}", config_source_name(e.source), e.origin);
}

std::string Config::render_table() const {
  const std::vector<ConfigKey>& keys = schema_.keys();
  std::vector<std::string> values, sources;
  size_t key_w = 3, value_w = 5;
  for (size_t i = 0; i < keys.size(); i++) {
    values.push_back(entries_[i].value.text.empty() ? "-" : entries_[i].value.text);
    sources.push_back(describe_source(keys[i].name));
    key_w = std::max(key_w, keys[i].name.size());
    value_w = std::max(value_w, values.back().size());
  }
  std::string out = fmt::format("{:<{}}  {:<{}}  {}\n", "key", key_w, "value", value_w, "source");
  for (size_t i = 0; i < keys.size(); i++)
    out += fmt::format("{:<{}}  {:<{}}  {}\n", keys[i].name, key_w, values[i], value_w, sources[i]);
  return out;
}

std::vector<std::string> Config::ignored_file_warnings() const {
  struct Group {
    const IgnoredFileSetting* first;
    std::vector<std::string> settings;  // "path=value"
  };
  std::vector<Group> groups;
  for (const IgnoredFileSetting& s : ignored_) {
    auto same = std::find_if(groups.begin(), groups.end(),
                             [&](const Group& g) { return g.first->file == s.file && g.first->reason == s.reason; });
    if (same == groups.end()) same = groups.insert(groups.end(), Group{&s, {}});
    same->settings.push_back(fmt::format("{}={}", s.path, s.value));
  }
  std::vector<std::string> out;
  for (const Group& g : groups)
    out.push_back(fmt::format("config file {}: {} {} no effect: {}", g.first->file, fmt::join(g.settings, ", "),
                              g.settings.size() == 1 ? "has" : "have", g.first->reason));
  return out;
}

nlohmann::json Config::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  const std::vector<ConfigKey>& keys = schema_.keys();
  for (size_t i = 0; i < keys.size(); i++) {
    const ConfigValue& v = entries_[i].value;
    nlohmann::json value;
    if (v.is_auto) {
      value = "auto";
    } else {
      switch (keys[i].type) {
        case ValueType::boolean: value = v.boolean; break;
        case ValueType::integer: value = v.integer; break;
        case ValueType::real: value = v.real; break;
        case ValueType::size: value = v.size; break;
        case ValueType::path_list: value = v.list; break;
        case ValueType::text:
        case ValueType::choice:
        case ValueType::path: value = v.text; break;
      }
    }
    out[keys[i].name] = {{"value", std::move(value)},
                         {"source", config_source_name(entries_[i].source)},
                         {"origin", entries_[i].origin}};
  }
  return out;
}

}  // namespace strata
