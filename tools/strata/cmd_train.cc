// `strata train [config flags]`: reads the config (every train key is a flag, a STRATA_* variable
// or a config-file key: ConfigFlags), sets up logging and, on a terminal, the live status line,
// then runs model::TrainingRun (model/train/run.h: the preflight, the resume, the placement, the
// model, the step loop and the end-of-run lines all live there) and maps how it ended to an exit
// code: 2 for bad flags, config or data arguments (and anything refused before the first step); 1
// when the run itself fails; 128 + signal when SIGINT/SIGTERM stopped it (model/train/train_signals.h).
// Under mpirun every rank runs this; rank 0 logs (the others only their errors), and a rank whose
// run fails takes the world down (abort_mpi_world) so no peer waits on it.
// What the CLI adds to the library run: --bench's observer (train_bench.h) and the test seams
// STRATA_TEST_KILL_AT (the kill tests) and STRATA_TEST_SIGNAL_IN_SETUP (the signal tests).
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>

#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include "model/train/run.h"
#include "runtime/communicator.h"
#include "runtime/log.h"
#include "runtime/mpi_communicator.h"
#include "runtime/status_line.h"
#include "tools/strata/command.h"
#include "tools/strata/config_flags.h"
#include "tools/strata/schema.h"
#include "tools/strata/train_bench.h"

namespace strata::cli {
namespace {

// The test seam of the kill tests: STRATA_TEST_KILL_AT="<point>[:<n>]" sends this process SIGKILL
// the n-th time (default 1st) a checkpoint save reaches <point> (CheckpointStore::save's names, and
// across ranks save_checkpoint_shard's "shard_open" and "shard_written" on the ranks but 0);
// "<point>:enospc[:<n>]" fails the save there with an injected ENOSPC instead. Unset: no hook.
model::CheckpointHook test_checkpoint_hook() {
  const char* env = std::getenv("STRATA_TEST_KILL_AT");
  if (env == nullptr || *env == '\0') return {};
  std::string spec = env;
  bool enospc = false;
  uint64_t nth = 1;
  std::string point = spec.substr(0, spec.find(':'));
  std::string rest = spec.find(':') == std::string::npos ? "" : spec.substr(spec.find(':') + 1);
  if (rest.starts_with("enospc")) {
    enospc = true;
    rest = rest.size() > 7 ? rest.substr(7) : "";
  }
  if (!rest.empty()) nth = std::strtoull(rest.c_str(), nullptr, 10);
  auto seen = std::make_shared<uint64_t>(0);
  return [point, nth, enospc, seen](std::string_view at) -> Status {
    if (at != point || ++*seen != nth) return Status::ok();
    if (enospc) return errno_status(ENOSPC, fmt::format("injected at '{}' by STRATA_TEST_KILL_AT", at));
    ::raise(SIGKILL);
    return Status::ok();
  };
}

// Exit 0 trained, 2 refused (flags, config, files, sizes), 1 failed, 128 + signal when stopped.
// `me`: "rank r of N: " across ranks, else empty.
int exit_code(const model::RunOutcome& out, const std::string& me) {
  switch (out.end) {
    case model::RunEnd::trained:
      return kExitOk;
    case model::RunEnd::refused:
      return report_error(me + out.status.message(), kExitUsage);
    case model::RunEnd::failed:
      return report_error(me + out.status.message(), kExitFailure);
    case model::RunEnd::stopped:
      return out.status.is_ok() ? 128 + out.signal : report_error(me + out.status.message(), 128 + out.signal);
  }
  return kExitFailure;
}

// The whole run after the config is read (model/train/run.h); returns the exit code. `live`: the
// terminal's status line, or null where stderr is not a terminal.
int train(const Config& config, std::shared_ptr<StatusLine> live) {
  model::RunHooks hooks{.live = std::move(live),
                        .make_observer = make_train_bench,
                        .checkpoint_hook = test_checkpoint_hook(),
                        .signal_in_setup = std::getenv("STRATA_TEST_SIGNAL_IN_SETUP") != nullptr};
  model::TrainingRun run(config, std::move(hooks));
  model::RunOutcome out = run.setup();
  if (out.ok()) out = run.train();
  const StatusOr<LaunchInfo> launch = detect_launch();
  const std::string me =
      launch.is_ok() && launch->size > 1 ? fmt::format("rank {} of {}: ", launch->rank, launch->size) : "";
  const int code = exit_code(out, me);  // reported before the run (its live line, its swap files, its locks) goes
  if (run.world_size() > 1 && out.end != model::RunEnd::trained && out.end != model::RunEnd::stopped) {
    // The peers may be waiting in a collective for this rank (and MPI cannot finalize while they do).
    std::fflush(stdout);
    std::fflush(stderr);
    abort_mpi_world(code);
  }
  return code;
}

}  // namespace

void add_train_command(CLI::App& root, CommandRegistry& registry) {
  CLI::App* app = root.add_subcommand(
      "train",
      "Train a model preset (default: gpt2-tiny on the built-in corpus) in fp32, bf16 or fp16 with AdamW, "
      "its state and update on the CPU or on the device, weights, gradients and optimizer state paged to pinned "
      "memory or NVMe when the model does not fit.\n"
      "Every setting is a flag, a STRATA_* variable or a --config file key; see `strata config`.");
  auto flags = std::make_shared<ConfigFlags>(*app, strata_config_schema());
  registry.add(app, [flags]() {
    StatusOr<Config> config = flags->resolve(environ);
    if (!config.is_ok()) return report_error(config.status().message(), kExitUsage);
    StatusOr<spdlog::level::level_enum> level = parse_log_level(config->get_text("log_level"));
    if (!level.is_ok()) return report_error(level.status().message(), kExitUsage);
    // Across ranks, rank 0 tells the run; the others say only what goes wrong on them.
    const StatusOr<LaunchInfo> launch = detect_launch();
    if (launch.is_ok() && launch->rank != 0) *level = std::max(*level, spdlog::level::err);
    // A terminal gets a live progress line under the log; at warn or above there is nothing to show.
    std::shared_ptr<StatusLine> live;
    if (stderr_is_terminal() && *level <= spdlog::level::info) {
      live = StatusLine::install(*level);
    } else {
      init_logging(*level);
    }
    return train(*config, std::move(live));
  });
}

}  // namespace strata::cli
