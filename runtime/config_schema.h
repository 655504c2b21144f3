// ConfigSchema: the set of keys a program accepts, and their names as flags, environment
// variables and JSON paths. Each layer adds its keys once at start-up (e.g.
// add_runtime_config_keys); after that the schema is only read. Not the values (Config, config.h).
// Thread-safety: const methods may be called concurrently; add() must not race with anything.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/config_value.h"

namespace strata {

class ConfigSchema {
 public:
  // Adds a key. A duplicate name or alias, a default that does not parse, or a choice key without
  // choices is a programming bug: throws std::logic_error naming the key.
  void add(ConfigKey key);

  // Environment variables that start with STRATA_ but are not config keys (e.g. build-script
  // variables); load_env skips them instead of calling them unknown.
  void ignore_env(std::string env_name);
  bool env_ignored(std::string_view env_name) const;

  // Dotted JSON paths a config file may hold that set no key because they have no effect here
  // (DeepSpeed settings such as "zero_optimization.stage" on one GPU); `reason` says why, for the
  // warning (Config::ignored_file_warnings). File-only: no flag, no variable. A path already taken
  // by a key's name or alias, or ignored twice, is a programming bug: std::logic_error (add()
  // checks the other way round).
  void ignore_file_paths(const std::vector<std::string>& paths, const std::string& reason);
  const std::string* ignored_file_path_reason(std::string_view path) const;  // nullptr: not ignored
  std::vector<std::string> ignored_file_paths() const;

  // nullptr when there is no such key.
  const ConfigKey* find(std::string_view name) const;
  const ConfigKey* find_by_env(std::string_view env_name) const;     // "STRATA_GPU_MEM"
  const ConfigKey* find_by_flag(std::string_view flag) const;        // "--gpu-mem" or "gpu-mem"
  const ConfigKey* find_by_file_path(std::string_view path) const;   // "gpu_mem", "aio.block_size"

  const std::vector<ConfigKey>& keys() const { return keys_; }
  // Position of the key named `name` in keys(); an unknown name throws std::logic_error.
  size_t index_of(std::string_view name) const;

  static std::string env_name(std::string_view key_name);   // "gpu_mem" -> "STRATA_GPU_MEM"
  static std::string flag_name(std::string_view key_name);  // "gpu_mem" -> "--gpu-mem"

  // Every name of each kind, in key order, for did-you-mean.
  std::vector<std::string> key_names() const;
  std::vector<std::string> env_names() const;
  std::vector<std::string> flag_names() const;
  std::vector<std::string> file_paths() const;  // names and aliases

 private:
  std::vector<ConfigKey> keys_;
  std::unordered_map<std::string, size_t> by_name_;
  std::unordered_map<std::string, size_t> by_file_path_;
  std::vector<std::string> ignored_env_;
  std::unordered_map<std::string, std::string> ignored_file_paths_;  // path -> reason
  std::vector<std::string> ignored_file_path_order_;
};

}  // namespace strata
