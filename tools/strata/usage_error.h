// The message the strata CLI prints for a command-line error CLI11 reports: "strata: error: ..."
// with a did-you-mean for an unknown flag (among the flags of the subcommand being parsed and its
// parents) or an unknown subcommand. Installed once in main.cc with app.failure_message(). Not
// for errors of a command that runs (those use report_error).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace strata::cli {

// For CLI::App::failure_message: `root` is the app parse() was called on.
std::string usage_error_message(const CLI::App* root, const CLI::Error& error);

}  // namespace strata::cli
