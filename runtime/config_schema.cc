// ConfigSchema: key registration and the name mappings (flag, env, JSON path).
#include "runtime/config_schema.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include <fmt/format.h>

namespace strata {

void ConfigSchema::add(ConfigKey key) {
  if (key.name.empty()) throw std::logic_error("config key with an empty name");
  if (by_name_.count(key.name) != 0) throw std::logic_error(fmt::format("config key '{}' added twice", key.name));
  if (key.type == ValueType::choice && key.choices.empty())
    throw std::logic_error(fmt::format("config key '{}' is a choice without choices", key.name));
  StatusOr<ConfigValue> def = parse_config_value(key, key.default_text);
  if (!def.is_ok())
    throw std::logic_error(fmt::format("config key '{}': default '{}' is invalid: {}", key.name, key.default_text,
                                       def.status().message()));
  std::vector<std::string> paths = key.file_aliases;
  paths.push_back(key.name);
  for (const std::string& p : paths)
    if (by_file_path_.count(p) != 0 || ignored_file_paths_.count(p) != 0)
      throw std::logic_error(fmt::format("config key '{}': file path '{}' is already taken", key.name, p));
  const size_t index = keys_.size();
  by_name_.emplace(key.name, index);
  for (const std::string& p : paths) by_file_path_.emplace(p, index);
  keys_.push_back(std::move(key));
}

void ConfigSchema::ignore_env(std::string env_name) { ignored_env_.push_back(std::move(env_name)); }

bool ConfigSchema::env_ignored(std::string_view env_name) const {
  return std::find(ignored_env_.begin(), ignored_env_.end(), env_name) != ignored_env_.end();
}

void ConfigSchema::ignore_file_paths(const std::vector<std::string>& paths, const std::string& reason) {
  for (const std::string& p : paths) {
    if (by_file_path_.count(p) != 0 || ignored_file_paths_.count(p) != 0)
      throw std::logic_error(fmt::format("ignored config file path '{}' is already taken", p));
    ignored_file_paths_.emplace(p, reason);
    ignored_file_path_order_.push_back(p);
  }
}

const std::string* ConfigSchema::ignored_file_path_reason(std::string_view path) const {
  auto it = ignored_file_paths_.find(std::string(path));
  return it == ignored_file_paths_.end() ? nullptr : &it->second;
}

std::vector<std::string> ConfigSchema::ignored_file_paths() const { return ignored_file_path_order_; }

const ConfigKey* ConfigSchema::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &keys_[it->second];
}

size_t ConfigSchema::index_of(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) throw std::logic_error(fmt::format("config key '{}' is not in the schema", name));
  return it->second;
}

const ConfigKey* ConfigSchema::find_by_env(std::string_view env) const {
  constexpr std::string_view prefix = "STRATA_";
  if (env.substr(0, prefix.size()) != prefix) return nullptr;
  std::string name(env.substr(prefix.size()));
  for (char& c : name) {
    if (std::islower(static_cast<unsigned char>(c))) return nullptr;  // variables are upper case
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return find(name);
}

const ConfigKey* ConfigSchema::find_by_flag(std::string_view flag) const {
  while (!flag.empty() && flag.front() == '-') flag.remove_prefix(1);
  std::string name(flag);
  for (char& c : name) {
    if (c == '_') return nullptr;  // flags are spelled with '-'
    if (c == '-') c = '_';
  }
  return find(name);
}

const ConfigKey* ConfigSchema::find_by_file_path(std::string_view path) const {
  auto it = by_file_path_.find(std::string(path));
  return it == by_file_path_.end() ? nullptr : &keys_[it->second];
}

std::string ConfigSchema::env_name(std::string_view key_name) {
  std::string out = "STRATA_";
  for (char c : key_name) out.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  return out;
}

std::string ConfigSchema::flag_name(std::string_view key_name) {
  std::string out = "--";
  for (char c : key_name) out.push_back(c == '_' ? '-' : c);
  return out;
}

std::vector<std::string> ConfigSchema::key_names() const {
  std::vector<std::string> out;
  for (const ConfigKey& k : keys_) out.push_back(k.name);
  return out;
}

std::vector<std::string> ConfigSchema::env_names() const {
  std::vector<std::string> out;
  for (const ConfigKey& k : keys_) out.push_back(env_name(k.name));
  return out;
}

std::vector<std::string> ConfigSchema::flag_names() const {
  std::vector<std::string> out;
  for (const ConfigKey& k : keys_) out.push_back(flag_name(k.name));
  return out;
}

std::vector<std::string> ConfigSchema::file_paths() const {
  std::vector<std::string> out;
  for (const ConfigKey& k : keys_) {
    out.push_back(k.name);
    out.insert(out.end(), k.file_aliases.begin(), k.file_aliases.end());
  }
  return out;
}

}  // namespace strata
