// SetupProgress: what `strata train` shows while its setup runs -- pinning host memory and writing
// the weights and the optimizer state take minutes on a large model -- and the one line that sums
// it up ("setup: 41.2 s (weight homes 3.0 s, optimizer state and weights 37.5 s, ...)"). The setup's
// thread names each phase as it begins and hands over the counters the work moves (the pinned
// pool's reserved bytes, the parameters written); a ticker thread samples them: on a terminal it
// redraws the live line (runtime/status_line.h) four times a second, in a pipe it logs a plain line
// every `plain_every_s` once the setup has run that long, so a short setup prints only the summary.
// Not the steps' progress (train_progress.h) and not a profiler: phases are wall-clock seconds.
// Thread-safety: begin(), track() and finish() from one thread (the setup's); the counters' `done`
// is called on the ticker thread, so it must be safe to call from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/mutex.h"
#include "runtime/status_line.h"

namespace strata::model {

// Something the setup moves towards a known total: bytes pinned, parameters written.
struct SetupCounter {
  std::string name;                // "pinned", "weights"
  std::function<uint64_t()> done;  // called from the ticker thread
  uint64_t total = 0;              // 0: not known
  bool bytes = true;               // bytes (GiB, GB/s), else a count (parameters, per second)
};

// One counter as the live line shows it: its value now, and its rate since it began to move in
// this phase (0: it has not moved in this phase).
struct SetupCounterSample {
  const SetupCounter* counter = nullptr;
  uint64_t done = 0;
  double per_second = 0;
};

// "setup 12.3 s: optimizer state and weights | pinned 7.1 GiB of 14 GiB, 1.20 GB/s | weights
// 400M of 1.24B parameters, 25M/s": the phase, then each counter that has begun.
std::string format_setup_status(std::string_view phase, double elapsed_s, const std::vector<SetupCounterSample>& now);

// A phase's name and its seconds.
struct SetupPhaseTime {
  std::string name;
  double seconds = 0;
};

// "setup: 41.2 s (checks 0.3 s, weight homes 3.0 s, optimizer state and weights 37.5 s, other 0.1 s;
// pinning 12.0 s for 14 GiB)": the total, every phase of 0.1 s or more in order (the shorter ones
// summed as "other"), then `detail` when not empty.
std::string format_setup_summary(double total_s, const std::vector<SetupPhaseTime>& phases, std::string_view detail);

class SetupProgress {
 public:
  // `live`: the terminal's status line, or null (plain lines). The clock starts here.
  explicit SetupProgress(std::shared_ptr<StatusLine> live, double plain_every_s = 10);
  SetupProgress(const SetupProgress&) = delete;
  SetupProgress& operator=(const SetupProgress&) = delete;
  ~SetupProgress();  // stops the ticker (as finish(), without the line)

  // Ends the phase in progress (if any) and begins `phase`.
  void begin(std::string phase) EXCLUDES(mu_);
  // Samples `counter` from now on; its rate is measured from the phase it moves in.
  void track(SetupCounter counter) EXCLUDES(mu_);
  // Ends the last phase, stops the ticker, erases the live line and returns the summary line
  // (format_setup_summary with `detail`) for the caller to log. Once.
  std::string finish(std::string_view detail) EXCLUDES(mu_);
  // Seconds since construction.
  double elapsed() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Tracked {
    SetupCounter counter;
    uint64_t at_phase_begin = 0;
  };
  void tick() EXCLUDES(mu_);  // the ticker thread's loop

  // Constant after construction.
  const std::shared_ptr<StatusLine> live_;
  const double plain_every_s_;
  const Clock::time_point start_;

  // State below is protected by mu_.
  mutable Mutex mu_;
  CondVar wake_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::string phase_ GUARDED_BY(mu_);
  Clock::time_point phase_start_ GUARDED_BY(mu_);
  std::vector<SetupPhaseTime> phases_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Tracked>> tracked_ GUARDED_BY(mu_);
  double last_plain_s_ GUARDED_BY(mu_) = 0;

  std::thread ticker_;  // last: started once the state above is
};

}  // namespace strata::model
