// `strata config [--json] [config flags]`: prints every effective config value and where it came
// from (default, file, env, flag), as an aligned table or one JSON document. It resolves the
// configuration exactly as the commands that run do, so it is the way to check a setup. It does
// not write config files.
#include <unistd.h>

#include <memory>

#include <fmt/core.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "runtime/log.h"
#include "tools/strata/command.h"
#include "tools/strata/config_flags.h"
#include "tools/strata/schema.h"

namespace strata::cli {

void add_config_command(CLI::App& root, CommandRegistry& registry) {
  CLI::App* app = root.add_subcommand(
      "config",
      "Print the effective configuration: every key, its value and where it came from.\n"
      "Values are layered defaults < config file (--config / STRATA_CONFIG) < STRATA_* environment < flags.");
  auto json = std::make_shared<bool>(false);
  app->add_flag("--json", *json, "Print one JSON document {\"key\": {\"value\", \"source\", \"origin\"}}");
  auto flags = std::make_shared<ConfigFlags>(*app, strata_config_schema());
  registry.add(app, [flags, json]() {
    StatusOr<Config> config = flags->resolve(environ);
    if (!config.is_ok()) return report_error(config.status().message(), kExitUsage);
    // log_level is a choice key whose every choice parse_log_level knows.
    StatusOr<spdlog::level::level_enum> level = parse_log_level(config->get_text("log_level"));
    if (!level.is_ok()) return report_error(level.status().message(), kExitUsage);
    init_logging(*level);
    for (const std::string& w : config->ignored_file_warnings()) spdlog::warn("{}", w);  // on stderr
    for (const std::string& w : config->unknown_env_warnings()) spdlog::warn("{}", w);
    if (*json) {
      fmt::print("{}\n", config->to_json().dump(2));
    } else {
      fmt::print("{}", config->render_table());
    }
    return kExitOk;
  });
}

}  // namespace strata::cli
