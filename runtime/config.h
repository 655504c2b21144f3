// Config: the effective value of every key of a ConfigSchema and where it came from. Values are
// layered defaults < JSON config file < environment (STRATA_*) < command-line flags; each layer
// overwrites the ones below, and every value remembers its source and origin (file path, variable
// or flag). Not the key definitions (config_value.h, config_schema.h) nor the CLI binding
// (tools/strata/config_flags.h). Thread-safety: const methods may be called concurrently once
// loading is done; loading and set() are single-threaded.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/config_schema.h"
#include "runtime/status.h"

namespace strata {

enum class ConfigSource : uint8_t { default_value, file, env, flag };
std::string_view config_source_name(ConfigSource source);  // "default", "file", "env", "flag"

// A setting a config file held at one of the schema's ignored file paths: accepted, not applied.
struct IgnoredFileSetting {
  std::string path;    // "zero_optimization.stage"
  std::string value;   // the JSON value as written, e.g. "3", "\"nvme\"", "true"
  std::string file;    // the config file
  std::string reason;  // ConfigSchema::ignored_file_path_reason
};

class Config {
 public:
  // Every key at its default. The schema is copied: the Config does not depend on its lifetime.
  explicit Config(ConfigSchema schema);

  // Validates `text` for `key` and stores it with its source. `origin` is the file path, the
  // environment variable name or the flag as written. Errors name where the value came from,
  // the key, the value and what is accepted, e.g.
  // "STRATA_AIO_QUEUE_DEPTH=0: aio_queue_depth must be an integer in [1, 4096]".
  // An unknown key is invalid_argument with a did-you-mean. On error nothing changes.
  Status set(std::string_view key, std::string_view text, ConfigSource source, std::string_view origin);

  // Reads a JSON object of keys (top-level names, or the dotted paths of file_aliases through
  // nested objects). Unknown keys, wrong JSON types and malformed JSON (with line and column) are
  // errors naming the file; a missing file is not_found. Nothing is kept from a file that fails.
  // Two paths of one file that set the same key (a name and an alias, or two aliases) must agree:
  // the same value is kept once, different values are an error naming both paths and values.
  // A scalar at an ignored file path (ConfigSchema::ignore_file_paths) is recorded, not applied.
  Status load_file(const std::string& path);
  // Reads every STRATA_* variable of `envp` (NAME=VALUE strings, nullptr-terminated). A key's
  // variable sets it (a bad value is an error, as set()'s); variables the schema ignores are
  // skipped; STRATA_CONFIG names the config file, so it is skipped when the schema has no `config`
  // key. Any other STRATA_* variable is not an error: the environment is inherited from shells,
  // scripts and other tools, so it is skipped with a warning naming it, with a did-you-mean
  // (unknown_env_warnings).
  Status load_env(char** envp);

  // Typed getters. An unknown key, the wrong type for the key, or a plain getter on a value that
  // is "auto" is a programming bug: throws std::logic_error naming the key.
  bool get_bool(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_real(std::string_view key) const;
  uint64_t get_size(std::string_view key) const;  // bytes
  const std::string& get_text(std::string_view key) const;  // text, choice and path keys
  const std::vector<std::string>& get_list(std::string_view key) const;  // path_list keys
  std::optional<int64_t> get_int_or_auto(std::string_view key) const;    // nullopt = auto
  std::optional<uint64_t> get_size_or_auto(std::string_view key) const;  // nullopt = auto

  ConfigSource source(std::string_view key) const;
  const std::string& origin(std::string_view key) const;  // "" for defaults
  const std::string& text(std::string_view key) const;    // canonical text of the value
  // "default", "file /etc/cfg.json", "env STRATA_GPU_MEM", "flag --gpu-mem".
  std::string describe_source(std::string_view key) const;

  // An aligned table: one row per key with its value and describe_source.
  std::string render_table() const;
  // {"gpu_mem": {"value": 8589934592 or "auto", "source": "flag", "origin": "--gpu-mem"}, ...}.
  // Values are typed: booleans, numbers (sizes in bytes), strings, arrays for path lists.
  nlohmann::json to_json() const;

  const ConfigSchema& schema() const { return schema_; }

  // The ignored settings the loaded files held: file by file, each file's in the order of
  // ConfigSchema::ignored_file_paths.
  const std::vector<IgnoredFileSetting>& ignored_file_settings() const { return ignored_; }
  // One message per file and reason, for the caller to log as a warning: "config file ds.json:
  // zero_optimization.stage=3, wall_clock_breakdown=false have no effect: <reason>". Empty when none.
  std::vector<std::string> ignored_file_warnings() const;
  // One message per unknown STRATA_* variable load_env skipped, in the environment's order, for
  // the caller to log as a warning: "environment variable STRATA_GPU_MME is not a strata setting
  // and is ignored; did you mean STRATA_GPU_MEM? ...". Empty when none.
  const std::vector<std::string>& unknown_env_warnings() const { return unknown_env_; }

 private:
  struct Entry {
    ConfigValue value;
    ConfigSource source = ConfigSource::default_value;
    std::string origin;
  };

  // set() with `where` as the message prefix ("STRATA_X=1", "cfg.json: aio.block_size=4").
  Status set_from(const ConfigKey& key, std::string_view text, ConfigSource source, std::string_view origin,
                  std::string_view where);
  const Entry& entry(std::string_view key, std::initializer_list<ValueType> types, std::string_view getter) const;
  const ConfigKey& key_or_throw(std::string_view key) const;

  ConfigSchema schema_;
  std::vector<Entry> entries_;  // parallel to schema_.keys()
  std::vector<IgnoredFileSetting> ignored_;
  std::vector<std::string> unknown_env_;  // unknown_env_warnings
};

// The effective configuration: defaults < file < env < flags. The file is the value of the flag
// --config when given, else of STRATA_CONFIG. `flags` are (flag as written, value) pairs such as
// {"--gpu-mem", "8GiB"}, applied in order; an unknown flag is an error with a did-you-mean.
StatusOr<Config> resolve_config(const ConfigSchema& schema,
                                const std::vector<std::pair<std::string, std::string>>& flags, char** envp);

}  // namespace strata
