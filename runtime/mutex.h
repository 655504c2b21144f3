// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with clang's thread-safety
// annotations (runtime/thread_annotations.h), after leveldb's port::Mutex / port::CondVar.
// libstdc++'s std::mutex carries no annotations, so clang cannot check code that locks one with
// std::lock_guard; with these it checks every GUARDED_BY member and REQUIRES method. Same cost as
// the std types (thin inline wrappers). Not recursive, not shared (reader/writer).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "runtime/thread_annotations.h"

namespace strata {

// A non-recursive exclusive lock. Prefer MutexLock to calling lock()/unlock() by hand.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds this lock, for code it cannot follow (a callback run under
  // the lock). Checks nothing at run time: std::mutex cannot say which thread holds it.
  void assert_held() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope (std::lock_guard). unlock() drops it early (to run work outside the
// lock) and lock() takes it again; the destructor releases it only if held.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void unlock() RELEASE() {
    mu_.unlock();
    held_ = false;
  }
  void lock() ACQUIRE() {
    mu_.lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// A condition variable waited on with a Mutex held. wait() takes no predicate: a predicate lambda
// would read guarded state in a function the analysis sees as lock-free. Loop instead, with the
// condition written where the analysis checks it:
//   MutexLock lock(mu_);
//   while (!stopping_ && queue_.empty()) work_ready_.wait(mu_);
// Thread-safety: notify_one()/notify_all() may be called with or without the mutex held.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Atomically releases `mu` and blocks until notified (or woken spuriously), then holds `mu`
  // again before returning. REQUIRES: mu held, by this thread.
  void wait(Mutex& mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held: ownership stays with the caller's MutexLock
  }
  // As wait(), but also returns once `timeout` has passed. REQUIRES: mu held, by this thread.
  template <typename Rep, typename Period>
  void wait_for(Mutex& mu, std::chrono::duration<Rep, Period> timeout) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait_for(lock, timeout);
    lock.release();
  }
  void notify_one() { cv_.notify_one(); }
  void notify_all() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace strata
