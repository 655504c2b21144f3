// CLI11 failure message with did-you-mean (see usage_error.h).
#include "tools/strata/usage_error.h"

#include <fmt/format.h>

#include "runtime/suggest.h"

namespace strata::cli {
namespace {

// The deepest subcommand that was selected on the command line (root when none was).
const CLI::App* parsed_leaf(const CLI::App* root) {
  const CLI::App* app = root;
  while (!app->get_subcommands().empty()) app = app->get_subcommands().front();
  return app;
}

// Long flags of `app` and of its parents (unknown flags fall through to the parents).
std::vector<std::string> known_flags(const CLI::App* app) {
  std::vector<std::string> flags;
  for (const CLI::App* a = app; a != nullptr; a = a->get_parent())
    for (const CLI::Option* opt : a->get_options())
      for (const std::string& name : opt->get_lnames()) flags.push_back("--" + name);
  return flags;
}

std::vector<std::string> subcommand_names(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

std::string command_path(const CLI::App* app) {
  std::string path;
  for (const CLI::App* a = app; a != nullptr && a->get_parent() != nullptr; a = a->get_parent())
    path = path.empty() ? a->get_name() : a->get_name() + " " + path;
  return path.empty() ? "strata" : "strata " + path;
}

// "unknown flag --gpu-mme; did you mean --gpu-mem?" for each unexpected argument.
std::string describe_extras(const CLI::App* root, const CLI::App* leaf) {
  std::vector<std::string> parts;
  const std::vector<std::string> args = root->remaining(true);
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) == 0) {
      const size_t eq = arg.find('=');
      const std::string flag = arg.substr(0, eq);
      parts.push_back(fmt::format("unknown flag {}{}", flag, did_you_mean(flag, known_flags(leaf), "")));
      // "--gpu-mme 1": the word after an unknown flag is most likely its value, not a second error.
      if (eq == std::string::npos && i + 1 < args.size() && args[i + 1].rfind("-", 0) != 0) i++;
    } else if (arg.rfind("-", 0) == 0 && arg.size() > 1) {
      parts.push_back(fmt::format("unknown flag {}", arg));
    } else {
      const std::vector<std::string> subs = subcommand_names(leaf);
      const std::string hint = subs.empty() ? "" : did_you_mean(arg, subs, "");
      parts.push_back(hint.empty() ? fmt::format("unexpected argument '{}'", arg)
                                   : fmt::format("unknown command '{}'{}", arg, hint));
    }
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace

std::string usage_error_message(const CLI::App* root, const CLI::Error& error) {
  const CLI::App* leaf = parsed_leaf(root);
  std::string what = error.what();
  // Left-over arguments explain both errors: "not expected" and "a subcommand is required"
  // (the latter when the subcommand itself is misspelled). get_name() is not the error's class
  // for every CLI11 error, hence the casts.
  const bool leftovers_explain = dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr ||
                                 dynamic_cast<const CLI::RequiredError*>(&error) != nullptr;
  if (leftovers_explain && !root->remaining(true).empty()) what = describe_extras(root, leaf);
  return fmt::format("strata: error: {}\nRun `{} --help` for the flags.\n", what, command_path(leaf));
}

}  // namespace strata::cli
