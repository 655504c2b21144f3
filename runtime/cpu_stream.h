// CpuStream and CpuEvent: the CPU backend's streams and events. A CpuStream is one worker thread
// running queued closures in FIFO order; a CpuEvent is a generation counter that a stream marks
// complete when it reaches the point where the event was recorded. Together they give CUDA stream
// semantics on the host, so overlap logic runs (and is tested) without a GPU. Not a thread pool:
// one thread, one queue, strict order.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "runtime/backend.h"
#include "runtime/mutex.h"
#include "runtime/status.h"

namespace strata {

// Thread-safety: every method may be called from any thread. enqueue() from several threads
// interleaves their work in call order. Lifetime: the destructor runs all queued work, then joins.
class CpuStream {
 public:
  explicit CpuStream(std::string name);
  ~CpuStream();
  CpuStream(const CpuStream&) = delete;
  CpuStream& operator=(const CpuStream&) = delete;

  // Queues `work` to run after everything queued before it. failed_precondition after shutdown().
  Status enqueue(std::function<void()> work) EXCLUDES(mu_);
  // Blocks until everything queued before this call has run. Returns first_error().
  Status drain() EXCLUDES(mu_);
  // Runs what is queued, stops the worker and joins it. Idempotent.
  void shutdown() EXCLUDES(mu_);
  // The first failure of queued work (an exception escaping a closure becomes `internal`), sticky.
  Status first_error() const EXCLUDES(mu_);
  // Closures queued and not yet finished.
  uint64_t pending() const EXCLUDES(mu_);
  const std::string& name() const { return name_; }

 private:
  void run() EXCLUDES(mu_);

  // Constant after construction.
  const std::string name_;

  // State below is protected by mu_.
  mutable Mutex mu_;
  CondVar work_ready_;  // queue_ non-empty, or stopping_
  CondVar work_done_;   // finished_ advanced
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  uint64_t submitted_ GUARDED_BY(mu_) = 0;
  uint64_t finished_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;
  Status first_error_ GUARDED_BY(mu_);

  std::thread worker_;  // started last, by the constructor; joined by shutdown()
};

// An event of the CPU backend. record() bumps the generation and queues a marker on the stream;
// the marker completes that generation when the stream reaches it. A wait captures the generation
// at call time, so re-recording later never delays work that was already ordered on it.
// Never recorded (generation 0) counts as complete. The state is shared with queued markers, so
// destroying the event while its markers are pending is safe.
class CpuEvent final : public Event {
 public:
  CpuEvent() : state_(std::make_shared<State>()) {}

  // Queues the marker on `stream` and returns at once.
  Status record(CpuStream& stream);
  // Queues on `waiter` a step that blocks the waiter until the generation current at this call
  // has completed.
  Status wait_on(CpuStream& waiter) const;
  // Host blocks until the generation current at this call has completed.
  void synchronize() const;
  bool query() const;

 private:
  struct State {
    Mutex mu;
    CondVar completed_cv;
    uint64_t recorded GUARDED_BY(mu) = 0;   // generation of the last record()
    uint64_t completed GUARDED_BY(mu) = 0;  // highest generation whose marker has run
  };
  static void wait_for(State& state, uint64_t generation);

  std::shared_ptr<State> state_;
};

}  // namespace strata
