// ConfigFlags: binds a ConfigSchema to a CLI11 subcommand. It adds --config FILE and one
// --<flag> option per key (help text with the type, default and environment variable), and after
// parsing turns the flags given into a Config (defaults < file < env < flags). Values are kept as
// text and checked by Config, so CLI11 never rejects a value with its own message. Unknown flags
// get their did-you-mean from usage_error.h. Not thread-safe; CLI setup only.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/config.h"
#include "runtime/config_schema.h"

namespace strata::cli {

class ConfigFlags {
 public:
  // Adds the options to `app`, which must outlive this object (it keeps the Option pointers).
  ConfigFlags(CLI::App& app, ConfigSchema schema);
  ConfigFlags(const ConfigFlags&) = delete;
  ConfigFlags& operator=(const ConfigFlags&) = delete;

  // After app has parsed: the (flag, value) pairs given on the command line, in schema order; the
  // last value wins when a flag is repeated. A flag given before the subcommand to a parent app
  // that has an option of the same name (`strata --log-level debug config`) counts as given.
  std::vector<std::pair<std::string, std::string>> given() const;

  // resolve_config over this schema, the given flags and `envp` (normally `environ`).
  StatusOr<Config> resolve(char** envp) const;

 private:
  ConfigSchema schema_;
  CLI::App* app_;
  std::vector<std::pair<std::string, CLI::Option*>> options_;  // (flag, option)
};

}  // namespace strata::cli
