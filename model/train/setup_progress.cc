// The setup's live line, its plain progress lines and its summary (see setup_progress.h).
#include "model/train/setup_progress.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "runtime/units.h"

namespace strata::model {
namespace {

constexpr auto kTick = std::chrono::milliseconds(250);
constexpr double kShortestPhase = 0.1;  // seconds: shorter phases are summed as "other"

std::string amount(const SetupCounter& c, uint64_t n) {
  return c.bytes ? format_size(n) : format_count(double(n));
}

}  // namespace

std::string format_setup_status(std::string_view phase, double elapsed_s, const std::vector<SetupCounterSample>& now) {
  std::string line = fmt::format("setup {:.1f} s: {}", elapsed_s, phase);
  for (const SetupCounterSample& s : now) {
    if (s.counter == nullptr || s.done == 0) continue;
    const SetupCounter& c = *s.counter;
    line += fmt::format(" | {} {}", c.name, amount(c, s.done));
    if (c.total > 0) line += fmt::format(" of {}", amount(c, c.total));
    if (!c.bytes) line += " parameters";
    if (s.per_second > 0)
      line += ", " + (c.bytes ? format_rate(s.per_second) : format_count(s.per_second) + "/s");
  }
  return line;
}

std::string format_setup_summary(double total_s, const std::vector<SetupPhaseTime>& phases, std::string_view detail) {
  std::string parts;
  double other = 0;
  for (const SetupPhaseTime& p : phases) {
    if (p.seconds < kShortestPhase) {
      other += p.seconds;
      continue;
    }
    parts += fmt::format("{}{} {:.1f} s", parts.empty() ? "" : ", ", p.name, p.seconds);
  }
  if (other > 0) parts += fmt::format("{}other {:.1f} s", parts.empty() ? "" : ", ", other);
  if (!detail.empty()) parts += fmt::format("{}{}", parts.empty() ? "" : "; ", detail);
  return fmt::format("setup: {:.1f} s ({})", total_s, parts);
}

SetupProgress::SetupProgress(std::shared_ptr<StatusLine> live, double plain_every_s)
    : live_(std::move(live)), plain_every_s_(plain_every_s), start_(Clock::now()) {
  {
    MutexLock lock(mu_);
    phase_start_ = start_;
  }
  ticker_ = std::thread([this] { tick(); });
}

SetupProgress::~SetupProgress() {
  if (ticker_.joinable()) (void)finish("");
}

double SetupProgress::elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

void SetupProgress::begin(std::string phase) {
  std::vector<Tracked*> tracked;
  {
    MutexLock lock(mu_);
    for (const auto& t : tracked_) tracked.push_back(t.get());
  }
  std::vector<uint64_t> at(tracked.size());
  for (size_t i = 0; i < tracked.size(); ++i) at[i] = tracked[i]->counter.done();
  const Clock::time_point now = Clock::now();
  MutexLock lock(mu_);
  if (!phase_.empty()) phases_.push_back({phase_, std::chrono::duration<double>(now - phase_start_).count()});
  phase_ = std::move(phase);
  phase_start_ = now;
  for (size_t i = 0; i < tracked.size(); ++i) tracked[i]->at_phase_begin = at[i];
}

void SetupProgress::track(SetupCounter counter) {
  auto t = std::make_unique<Tracked>();
  t->at_phase_begin = counter.done();
  t->counter = std::move(counter);
  MutexLock lock(mu_);
  tracked_.push_back(std::move(t));
}

std::string SetupProgress::finish(std::string_view detail) {
  const Clock::time_point now = Clock::now();
  std::vector<SetupPhaseTime> phases;
  {
    MutexLock lock(mu_);
    if (!phase_.empty()) phases_.push_back({phase_, std::chrono::duration<double>(now - phase_start_).count()});
    phase_.clear();
    stopping_ = true;
    phases = phases_;
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  if (live_) live_->clear();
  return format_setup_summary(std::chrono::duration<double>(now - start_).count(), phases, detail);
}

void SetupProgress::tick() {
  // Per tracked counter (the ticker's own): where and when it was first seen moving in the phase,
  // and when it last moved.
  struct Moving {
    uint64_t from = 0, last = 0;
    Clock::time_point since{}, last_change{};
  };
  std::vector<Moving> moving;
  std::string moving_phase;
  for (;;) {
    std::string phase;
    std::vector<std::pair<Tracked*, uint64_t>> tracked;  // and its value at the phase's beginning
    bool plain_due = false;
    {
      MutexLock lock(mu_);
      if (!stopping_) wake_.wait_for(mu_, kTick);
      if (stopping_) return;
      if (phase_.empty()) continue;
      phase = phase_;
      for (const auto& t : tracked_) tracked.emplace_back(t.get(), t->at_phase_begin);
      const double now_s = elapsed();
      if (!live_ && now_s >= last_plain_s_ + plain_every_s_) {
        plain_due = true;
        last_plain_s_ = now_s;
      }
    }
    // The counters are read without the lock (a pool reserving a slab holds its own for a while),
    // every tick, so a rate starts within a tick of the counter's first move.
    if (moving_phase != phase) moving.clear();
    moving_phase = phase;
    moving.resize(tracked.size());
    std::vector<SetupCounterSample> now;
    const Clock::time_point t_now = Clock::now();
    for (size_t i = 0; i < tracked.size(); ++i) {
      const auto [t, at] = tracked[i];
      const uint64_t done = t->counter.done();
      Moving& m = moving[i];
      if (m.since == Clock::time_point{} && done > at) m = {.from = at, .last = at, .since = t_now - kTick};
      if (done != m.last) m.last = done, m.last_change = t_now;  // the rate is of the time it moved
      const double s =
          m.since == Clock::time_point{} ? 0 : std::chrono::duration<double>(m.last_change - m.since).count();
      now.push_back({&t->counter, done, s > 0 && done > m.from ? double(done - m.from) / s : 0});
    }
    if (!live_ && !plain_due) continue;
    const std::string text = format_setup_status(phase, elapsed(), now);
    if (live_)
      live_->show(text);
    else
      spdlog::info("{}", text);
  }
}

}  // namespace strata::model
