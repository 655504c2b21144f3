// The `strata` command line: parses the subcommand and its flags with CLI11, sets up logging, and
// runs the selected command. Each subcommand is its own file (tools/strata/cmd_*.cc).
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/core.h>

#include "runtime/log.h"
#include "runtime/status_line.h"
#include "tools/strata/command.h"
#include "tools/strata/usage_error.h"

namespace strata::cli {

int report_error(const std::string& message, int exit_code) {
  clear_status_line();  // a training run's live line, if one is drawn
  fmt::print(stderr, "strata: error: {}\n", message);
  return exit_code;
}

}  // namespace strata::cli

int main(int argc, char** argv) {
  using namespace strata::cli;
  CLI::App app{"strata: train transformer models far larger than GPU memory on one workstation.\n"
               "Parameters, gradients and optimizer states are paged between GPU memory, pinned\n"
               "CPU RAM and NVMe. Run `strata COMMAND --help` for a command's flags."};
  app.set_version_flag("--version", std::string("strata ") + STRATA_VERSION);
  app.require_subcommand(1);
  std::string log_level;
  // Read here for every command; commands that resolve the configuration also see it as the
  // flag --log-level (ConfigFlags looks at parent options). The environment is read below, not by
  // CLI11, so that a value from STRATA_LOG_LEVEL is never mistaken for a flag.
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off (env STRATA_LOG_LEVEL)");
  app.fallthrough();
  app.failure_message(usage_error_message);  // "strata: error: ...; did you mean --gpu-mem?"

  CommandRegistry registry;
  // Subcommands, one line each (their add_* functions are declared in command.h).
  CLI::App* bench = app.add_subcommand("bench", "Measure this machine: NVMe I/O, CPU Adam, PCIe, GEMMs, collectives");
  bench->require_subcommand(1);
  add_info_command(app, registry);
  add_config_command(app, registry);
  add_train_command(app, registry);
  add_plan_command(app, registry);
  add_ckpt_command(app, registry);
  add_clean_command(app, registry);
  add_export_command(app, registry);
  add_plot_command(app, registry);
  add_bench_io_command(*bench, registry);
  add_bench_adam_command(*bench, registry);
  add_bench_pcie_command(*bench, registry);
  add_bench_device_command(*bench, registry);
  add_bench_comm_command(*bench, registry);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }

  if (log_level.empty())
    if (const char* env = std::getenv("STRATA_LOG_LEVEL")) log_level = env;
  auto level = strata::parse_log_level(log_level.empty() ? "info" : log_level);
  if (!level.is_ok()) return report_error(level.status().message(), kExitUsage);
  strata::init_logging(*level);

  for (const Command& c : registry.commands())
    if (c.app->parsed()) return c.run();
  return report_error("no command given; run `strata --help`", kExitUsage);
}
