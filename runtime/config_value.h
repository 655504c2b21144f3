// One configuration key: its type, default, accepted range and help (ConfigKey), and the parsing
// of a user's text into a checked value (parse_config_value). Not the set of keys (ConfigSchema,
// config_schema.h) nor where values come from (Config, config.h).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace strata {

enum class ValueType : uint8_t {
  boolean,    // true/false (also 1/0, yes/no, on/off)
  integer,    // int64, e.g. "1234"
  real,       // double, e.g. "0.9"
  size,       // bytes with units: "512MiB", "24GB", "1.5TiB" (runtime/units.h)
  text,       // any string
  choice,     // one of ConfigKey::choices (matched case-insensitively)
  path,       // a file or directory path ("" = not set)
  path_list,  // comma-separated in env/flags; a JSON string or array of strings in files
};

std::string_view value_type_name(ValueType type);  // "integer", "size", "path list", ...

// The description of a key. Names are snake_case ("gpu_mem"); the flag is --gpu-mem, the
// environment variable STRATA_GPU_MEM, the JSON key "gpu_mem" (plus `file_aliases`).
struct ConfigKey {
  // Every member has an initializer so that designated initializers may omit any of them.
  std::string name{};
  ValueType type = ValueType::text;
  std::string default_text{};  // parsed like user input; must be valid for the key
  std::string help{};        // one line a user understands
  // Accepted range for integer/real/size, inclusive (sizes in bytes). Unbounded by default.
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices{};  // for ValueType::choice
  bool allow_auto = false;           // integer/real/size keys also accept the text "auto"
  // Extra dotted JSON paths that set this key in a config file (DeepSpeed-style), e.g.
  // "aio.block_size" or "zero_optimization.offload_optimizer.nvme_path". An alias with an index
  // suffix, "optimizer.params.betas[1]", names one element of a JSON array: a file that holds an
  // array at "optimizer.params.betas" sets each element's key (indices from 0, none skipped).
  std::vector<std::string> file_aliases{};
};

// A checked value. `text` is the canonical text (what `strata config` shows); the typed field
// that matches the key's type holds the value, unless is_auto.
struct ConfigValue {
  std::string text;
  bool is_auto = false;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  uint64_t size = 0;                // bytes
  std::vector<std::string> list;    // path_list
};

// What the key accepts, for messages and help: "an integer in [1, 4096]", "a size >= 16 MiB or
// auto", "one of auto, cpu, cuda".
std::string describe_accepted(const ConfigKey& key);

// Parses `text` for `key`. Errors (invalid_argument for a malformed value, out_of_range for a
// value outside [min, max]) say "<key> must be <accepted>" and what was wrong, without saying
// where the text came from (the caller adds that).
StatusOr<ConfigValue> parse_config_value(const ConfigKey& key, std::string_view text);

}  // namespace strata
