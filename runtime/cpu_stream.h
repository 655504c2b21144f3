// CpuStream and CpuEvent: the CPU backend's streams and events. A CpuStream is one worker thread
// running queued closures in FIFO order; a CpuEvent is a generation counter that a stream marks
// complete when it reaches the point where the event was recorded. Together they give CUDA stream
// semantics on the host, so overlap logic runs (and is tested) without a GPU. Not a thread pool:
// one thread, one queue, strict order.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/backend.h"
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
  Status enqueue(std::function<void()> work);
  // Blocks until everything queued before this call has run. Returns first_error().
  Status drain();
  // Runs what is queued, stops the worker and joins it. Idempotent.
  void shutdown();
  // The first failure of queued work (an exception escaping a closure becomes `internal`), sticky.
  Status first_error() const;
  // Closures queued and not yet finished.
  uint64_t pending() const;
  const std::string& name() const { return name_; }

 private:
  void run();

  const std::string name_;
  mutable std::mutex mu_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::deque<std::function<void()>> queue_;
  uint64_t submitted_ = 0;
  uint64_t finished_ = 0;
  bool stopping_ = false;
  Status first_error_;
  std::thread worker_;
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
    std::mutex mu;
    std::condition_variable completed_cv;
    uint64_t recorded = 0;   // generation of the last record()
    uint64_t completed = 0;  // highest generation whose marker has run
  };
  static void wait_for(State& state, uint64_t generation);

  std::shared_ptr<State> state_;
};

}  // namespace strata
