// TrainProgress: how `strata train` shows its steps as they happen. On a terminal, one live line
// (runtime/status_line.h) redrawn every step -- step, bar, loss, tokens/s, ETA, the latest held-out
// loss -- plus the full progress line (format_progress_line) as a summary every few steps, so the
// default 1000-step run fits one screen; in a pipe or a file, the full line every log_every steps,
// as before: the log stays line-based for grep, CI and `tee` (DeepSpeed's steps_per_print).
// Not the --metrics file (every step goes there, whatever is shown) and not the end-of-run summary.
// Not thread-safe: the training loop's thread calls it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "model/train/metrics_log.h"
#include "runtime/status_line.h"

namespace strata::model {

// The steps between full progress lines. log_every > 0 is the user's: kept everywhere. 0 (auto):
// every step in a pipe or file; on a terminal a tenth of the run's steps (at least 1), so the
// live line is joined by about ten summaries.
uint64_t progress_line_every(uint64_t log_every, uint64_t total_steps, bool terminal);

// Whether step `step` (1-based) prints the full line: every `every` steps and the last; in plain
// mode (no terminal) also any step with a held-out loss, which the line carries.
bool prints_progress_line(uint64_t step, uint64_t total_steps, uint64_t every, bool terminal, bool has_val_loss);

class TrainProgress {
 public:
  struct Options {
    uint64_t total_steps = 0;  // the run's last step (TrainOptions::steps)
    uint64_t log_every = 0;    // TrainOptions::log_every (0: auto)
    std::string_view device_label = kGpuTierLabel;  // format_progress_line's
  };

  // `live`: the terminal's status line, or null for plain lines. The clock starts here.
  TrainProgress(const Options& options, std::shared_ptr<StatusLine> live);
  TrainProgress(const TrainProgress&) = delete;
  TrainProgress& operator=(const TrainProgress&) = delete;
  ~TrainProgress();  // erases the live line

  // After each step, its metrics (val_loss set on evaluation steps): logs the full line when it
  // is due (spdlog::info) and redraws the live line.
  void step(const StepMetrics& metrics);

  // The estimated seconds left after `step`: the mean time of the steps after this run's first
  // (the first records traces and warms caches) times the steps left; nullopt before a second step.
  std::optional<double> eta_seconds(uint64_t step) const;

  // Erases the live line, before the end-of-run lines.
  void finish();

 private:
  using Clock = std::chrono::steady_clock;

  // Constant after construction.
  Options options_;
  std::shared_ptr<StatusLine> live_;
  uint64_t every_ = 1;

  // Updated by step().
  Clock::time_point first_done_{};  // when this run's first step ended
  uint64_t steps_seen_ = 0;
  double steady_s_ = 0;  // seconds from the end of the first step to the end of the latest
  std::optional<double> last_val_loss_;
};

}  // namespace strata::model
