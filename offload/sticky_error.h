// StickyError: the first failure of a component that keeps running after it (leveldb's bg_error_).
// record() keeps the first non-ok Status and drops the rest; status() returns that first one, so
// every later call of the owner can return it. Used where a failed NVMe write left a chunk without
// valid bytes (TierManager, OptimizerPipeline) and where failures arrive on a stream's callback
// thread (GradientOffloader). Not a log and not a retry policy: it never clears.
// Thread-safety: every method is safe for concurrent use (one mutex inside).
#pragma once

#include <utility>

#include "runtime/mutex.h"
#include "runtime/status.h"
#include "runtime/thread_annotations.h"

namespace strata {

class StickyError {
 public:
  StickyError() = default;
  StickyError(const StickyError&) = delete;
  StickyError& operator=(const StickyError&) = delete;

  // Keeps `s` if it is the first failure (an ok `s` is ignored). Returns `s`, this failure, so a
  // caller can `return sticky.record(st);`; later calls see the first one through status().
  Status record(Status s) EXCLUDES(mu_) {
    if (s.is_ok()) return s;
    MutexLock lock(mu_);
    if (first_.is_ok()) first_ = s;
    return s;
  }
  Status status() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return first_;
  }
  bool ok() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return first_.is_ok();
  }

 private:
  mutable Mutex mu_;
  Status first_ GUARDED_BY(mu_);  // the first failure recorded, ok until then
};

}  // namespace strata
