// A probe for clang's -Wthread-safety over runtime/mutex.h, compiled (never linked or run) by
// thread_safety_check.sh: as it is, it must compile clean; with -DSTRATA_PROBE_VIOLATIONS each
// line marked `// violation` must be reported, and nothing else. So the annotations are shown to
// be checked, and each pattern the code relies on (MutexLock's unlock()/lock(), CondVar loops,
// REQUIRES helpers, guarded statics) to be accepted. Not a gtest: it is a CTest of its own.
#include <cstdint>
#include <deque>

#include "runtime/mutex.h"

namespace strata {
namespace {

class Queue {
 public:
  void push(int v) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      items_.push_back(v);
    }
    ready_.notify_one();
  }

  int pop() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    while (items_.empty()) ready_.wait(mu_);
    return take_locked();
  }

  // Drops the lock around work that must not hold it, as CpuStream::run() does.
  int pop_and_work() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    while (items_.empty()) ready_.wait(mu_);
    int v = take_locked();
    lock.unlock();
    v *= 2;  // the work, unlocked
    lock.lock();
    done_ += 1;
    return v;
  }

  uint64_t done() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return done_;
  }

#ifdef STRATA_PROBE_VIOLATIONS
  void push_unlocked(int v) { items_.push_back(v); }  // violation

  uint64_t done_unlocked() const { return done_; }  // violation

  int pop_unlocked() { return take_locked(); }  // violation

  void wait_unlocked() { ready_.wait(mu_); }  // violation

  uint64_t read_after_unlock() {
    MutexLock lock(mu_);
    lock.unlock();
    return done_;  // violation
  }

  void lock_twice() {
    MutexLock lock(mu_);
    push(1);  // violation
  }
#endif

 private:
  int take_locked() REQUIRES(mu_) {
    int v = items_.front();
    items_.pop_front();
    return v;
  }

  mutable Mutex mu_;
  CondVar ready_;
  std::deque<int> items_ GUARDED_BY(mu_);
  uint64_t done_ GUARDED_BY(mu_) = 0;
};

int counted() {
  static Mutex mu;
  static int calls GUARDED_BY(mu) = 0;
  MutexLock lock(mu);
  return ++calls;
}

#ifdef STRATA_PROBE_VIOLATIONS
int counted_unlocked() {
  static Mutex mu;
  static int calls GUARDED_BY(mu) = 0;
  return ++calls;  // violation
}
#endif

}  // namespace

// Uses every function, so none is unused.
int thread_safety_probe() {
  Queue q;
  q.push(1);
  q.push(2);
  int sum = q.pop() + q.pop_and_work() + static_cast<int>(q.done()) + counted();
#ifdef STRATA_PROBE_VIOLATIONS
  q.push_unlocked(3);
  sum += static_cast<int>(q.done_unlocked()) + q.pop_unlocked() + static_cast<int>(q.read_after_unlock());
  q.wait_unlocked();
  q.lock_twice();
  sum += counted_unlocked();
#endif
  return sum;
}

}  // namespace strata
