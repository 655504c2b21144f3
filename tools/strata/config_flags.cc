// ConfigFlags: one CLI11 option per config key (see config_flags.h).
#include "tools/strata/config_flags.h"

#include <cctype>

#include <fmt/format.h>

namespace strata::cli {
namespace {

std::string type_label(const ConfigKey& key) {
  std::string label;
  switch (key.type) {
    case ValueType::boolean: label = "BOOL"; break;
    case ValueType::integer: label = "INT"; break;
    case ValueType::real: label = "NUMBER"; break;
    case ValueType::size: label = "SIZE"; break;
    case ValueType::text: label = "TEXT"; break;
    case ValueType::choice: label = fmt::format("{{{}}}", fmt::join(key.choices, ",")); break;
    case ValueType::path: label = key.name == "config" ? "FILE" : "PATH"; break;
    case ValueType::path_list: label = "PATH[,PATH...]"; break;
  }
  if (key.allow_auto) label += "|auto";
  return label;
}

std::string help_text(const ConfigKey& key) {
  std::string help = key.help;
  if (key.type == ValueType::integer || key.type == ValueType::real || key.type == ValueType::size)
    help += fmt::format("; {}", describe_accepted(key));
  if (!key.default_text.empty()) help += fmt::format(" [default: {}]", key.default_text);
  help += fmt::format(" (env {})", ConfigSchema::env_name(key.name));
  return help;
}

}  // namespace

ConfigFlags::ConfigFlags(CLI::App& app, ConfigSchema schema) : schema_(std::move(schema)), app_(&app) {
  if (schema_.find("config") == nullptr) {
    CLI::Option* opt = app.add_option("--config", "JSON config file to read (env STRATA_CONFIG)");
    opt->type_name("FILE")->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    options_.emplace_back("--config", opt);
  }
  for (const ConfigKey& key : schema_.keys()) {
    const std::string flag = ConfigSchema::flag_name(key.name);
    CLI::Option* opt = nullptr;
    if (key.type == ValueType::boolean) {
      opt = app.add_flag(flag);  // "--pin" means true; "--pin=false" is accepted too
    } else {
      opt = app.add_option(flag);
      opt->type_name(type_label(key));
    }
    opt->description(help_text(key));
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    options_.emplace_back(flag, opt);
  }
}

std::vector<std::pair<std::string, std::string>> ConfigFlags::given() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [flag, opt] : options_) {
    if (opt->count() > 0 && !opt->results().empty()) {
      out.emplace_back(flag, opt->results().back());
      continue;
    }
    for (const CLI::App* parent = app_->get_parent(); parent != nullptr; parent = parent->get_parent()) {
      const CLI::Option* up = parent->get_option_no_throw(flag);
      if (up != nullptr && up->count() > 0 && !up->results().empty()) {
        out.emplace_back(flag, up->results().back());
        break;
      }
    }
  }
  return out;
}

StatusOr<Config> ConfigFlags::resolve(char** envp) const { return resolve_config(schema_, given(), envp); }

}  // namespace strata::cli
