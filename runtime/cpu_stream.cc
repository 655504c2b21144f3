// CpuStream worker loop and CpuEvent generations (contract in cpu_stream.h). Not a scheduler:
// each stream is one thread draining one FIFO queue.
#include "runtime/cpu_stream.h"

#include <exception>

#include <spdlog/spdlog.h>

namespace strata {

CpuStream::CpuStream(std::string name) : name_(std::move(name)), worker_([this] { run(); }) {}

CpuStream::~CpuStream() { shutdown(); }

Status CpuStream::enqueue(std::function<void()> work) {
  {
    MutexLock lock(mu_);
    if (stopping_) {
      return error(Code::failed_precondition, "stream '{}' is shut down; work can no longer be queued on it", name_);
    }
    queue_.push_back(std::move(work));
    submitted_++;
  }
  work_ready_.notify_one();
  return Status::ok();
}

Status CpuStream::drain() {
  MutexLock lock(mu_);
  const uint64_t target = submitted_;
  while (finished_ < target) work_done_.wait(mu_);
  return first_error_;
}

void CpuStream::shutdown() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  if (worker_.joinable()) worker_.join();
}

Status CpuStream::first_error() const {
  MutexLock lock(mu_);
  return first_error_;
}

uint64_t CpuStream::pending() const {
  MutexLock lock(mu_);
  return submitted_ - finished_;
}

void CpuStream::run() {
  MutexLock lock(mu_);
  for (;;) {
    while (!stopping_ && queue_.empty()) work_ready_.wait(mu_);
    if (queue_.empty()) return;  // stopping, and everything queued has run
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Status failure;
    try {
      work();
    } catch (const std::exception& e) {
      failure = error(Code::internal, "work on stream '{}' threw: {}", name_, e.what());
    } catch (...) {
      failure = error(Code::internal, "work on stream '{}' threw a non-standard exception", name_);
    }
    if (!failure.is_ok()) spdlog::error("{}", failure.message());
    lock.lock();
    if (!failure.is_ok() && first_error_.is_ok()) first_error_ = failure;
    finished_++;
    work_done_.notify_all();
  }
}

Status CpuEvent::record(CpuStream& stream) {
  uint64_t generation;
  {
    MutexLock lock(state_->mu);
    generation = ++state_->recorded;
  }
  auto complete = [state = state_, generation] {
    {
      MutexLock lock(state->mu);
      if (generation > state->completed) state->completed = generation;
    }
    state->completed_cv.notify_all();
  };
  Status queued = stream.enqueue(complete);
  if (!queued.is_ok()) complete();  // never leave a generation that no marker will complete
  return queued;
}

Status CpuEvent::wait_on(CpuStream& waiter) const {
  uint64_t generation;
  {
    MutexLock lock(state_->mu);
    generation = state_->recorded;
    if (state_->completed >= generation) return Status::ok();  // already complete: nothing to order
  }
  return waiter.enqueue([state = state_, generation] { wait_for(*state, generation); });
}

void CpuEvent::synchronize() const {
  uint64_t generation;
  {
    MutexLock lock(state_->mu);
    generation = state_->recorded;
  }
  wait_for(*state_, generation);
}

bool CpuEvent::query() const {
  MutexLock lock(state_->mu);
  return state_->completed >= state_->recorded;
}

void CpuEvent::wait_for(State& state, uint64_t generation) {
  MutexLock lock(state.mu);
  while (state.completed < generation) state.completed_cv.wait(state.mu);
}

}  // namespace strata
