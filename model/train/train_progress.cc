// The live line and the progress lines of a training run (see train_progress.h).
#include "model/train/train_progress.h"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

namespace strata::model {

uint64_t progress_line_every(uint64_t log_every, uint64_t total_steps, bool terminal) {
  if (log_every > 0) return log_every;
  if (!terminal) return 1;
  return std::max<uint64_t>(1, (total_steps + 9) / 10);
}

bool prints_progress_line(uint64_t step, uint64_t total_steps, uint64_t every, bool terminal, bool has_val_loss) {
  if (step == total_steps || (every > 0 && step % every == 0)) return true;
  return !terminal && has_val_loss;
}

TrainProgress::TrainProgress(const Options& options, std::shared_ptr<StatusLine> live)
    : options_(options),
      live_(std::move(live)),
      every_(progress_line_every(options.log_every, options.total_steps, live_ != nullptr)) {}

TrainProgress::~TrainProgress() { finish(); }

void TrainProgress::step(const StepMetrics& m) {
  const Clock::time_point now = Clock::now();
  if (++steps_seen_ == 1) {
    first_done_ = now;
  } else {
    steady_s_ = std::chrono::duration<double>(now - first_done_).count();
  }
  if (m.val_loss) last_val_loss_ = m.val_loss;
  const bool terminal = live_ != nullptr;
  if (terminal && m.step >= options_.total_steps) live_->clear();  // the run's last lines follow
  if (prints_progress_line(m.step, options_.total_steps, every_, terminal, m.val_loss.has_value()))
    spdlog::info("{}", format_progress_line(m, options_.total_steps, options_.device_label));
  if (terminal && m.step < options_.total_steps)
    live_->show(format_live_line(m, options_.total_steps, eta_seconds(m.step), last_val_loss_));
}

std::optional<double> TrainProgress::eta_seconds(uint64_t step) const {
  if (steps_seen_ < 2) return std::nullopt;
  const uint64_t left = options_.total_steps > step ? options_.total_steps - step : 0;
  return steady_s_ / double(steps_seen_ - 1) * double(left);
}

void TrainProgress::finish() {
  if (live_) live_->clear();
}

}  // namespace strata::model
