// How subcommands plug into the `strata` CLI. Each subcommand lives in its own file under
// tools/strata/ and exposes one add_*_command() function that adds a CLI11 subcommand to its
// parent and registers the function that runs it. main.cc calls the add_* functions, parses the
// command line, and runs the one command that was selected. Not thread-safe; CLI setup only.
#pragma once

#include <functional>
#include <vector>

#include <CLI/CLI.hpp>

namespace strata::cli {

// Exit codes of the strata CLI.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the command ran and failed (I/O error, OOM, bad data)
inline constexpr int kExitUsage = 2;    // bad flags, config or environment

struct Command {
  CLI::App* app;              // the parsed subcommand
  std::function<int()> run;   // returns an exit code; prints its own errors
};

class CommandRegistry {
 public:
  void add(CLI::App* app, std::function<int()> run) { commands_.push_back({app, std::move(run)}); }
  const std::vector<Command>& commands() const { return commands_; }

 private:
  std::vector<Command> commands_;
};

// Prints "strata: error: <message>" to stderr (and nothing else); returns `exit_code`.
int report_error(const std::string& message, int exit_code = kExitFailure);

// One add_* per subcommand (each defined in its own cmd_*.cc).
void add_info_command(CLI::App& root, CommandRegistry& registry);
void add_config_command(CLI::App& root, CommandRegistry& registry);
void add_train_command(CLI::App& root, CommandRegistry& registry);
void add_plan_command(CLI::App& root, CommandRegistry& registry);  // `strata plan`: memory fit and placement
void add_ckpt_command(CLI::App& root, CommandRegistry& registry);  // `strata ckpt verify|inspect`
void add_clean_command(CLI::App& root, CommandRegistry& registry);  // `strata clean [PATH...]`
void add_export_command(CLI::App& root, CommandRegistry& registry);  // `strata export --hf`
void add_plot_command(CLI::App& root, CommandRegistry& registry);  // `strata plot METRICS -o PNG`
// `strata bench` groups the benchmarks; each benchmark adds itself to the `bench` app.
void add_bench_io_command(CLI::App& bench, CommandRegistry& registry);
void add_bench_adam_command(CLI::App& bench, CommandRegistry& registry);
void add_bench_pcie_command(CLI::App& bench, CommandRegistry& registry);
void add_bench_device_command(CLI::App& bench, CommandRegistry& registry);
void add_bench_comm_command(CLI::App& bench, CommandRegistry& registry);  // run under mpirun

}  // namespace strata::cli
