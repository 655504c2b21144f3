// Mutex, MutexLock and CondVar (runtime/mutex.h) at run time: the lock excludes other threads,
// MutexLock::unlock()/lock() hand it over and take it back, and a CondVar wait loop sees every
// notified change. That clang checks their annotations is thread_safety_probe.cc's CTest.
#include "runtime/mutex.h"

#include <cstdint>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace strata {
namespace {

// State shared by a test's threads, written as the code under test writes its members.
struct MutexTestShared {
  Mutex mu;
  CondVar changed;
  std::vector<int> items GUARDED_BY(mu);
  int waiters_woken GUARDED_BY(mu) = 0;
  bool open GUARDED_BY(mu) = false;
};

TEST(Mutex, TryLockFailsWhileAnotherThreadHoldsIt) {
  Mutex mu;
  bool acquired_while_held = false;
  bool acquired_after = false;
  // The analysis follows try_lock() only as the branch's own condition.
  {
    MutexLock lock(mu);
    std::thread([&] {
      if (mu.try_lock()) {
        acquired_while_held = true;
        mu.unlock();
      }
    }).join();
  }
  std::thread([&] {
    if (mu.try_lock()) {
      acquired_after = true;
      mu.unlock();
    }
  }).join();
  EXPECT_FALSE(acquired_while_held);
  EXPECT_TRUE(acquired_after);
}

TEST(Mutex, MutexLockUnlockLetsAnotherThreadInAndLockTakesItBack) {
  MutexTestShared s;
  MutexLock lock(s.mu);
  s.items.push_back(1);
  lock.unlock();
  std::thread([&] {
    MutexLock other(s.mu);  // would deadlock had unlock() not released it
    s.items.push_back(2);
  }).join();
  lock.lock();
  EXPECT_EQ(s.items, (std::vector<int>{1, 2}));
}

TEST(CondVar, WaitLoopSeesEveryItemInOrder) {
  constexpr int kItems = 1000;
  MutexTestShared s;
  std::thread producer([&] {
    for (int i = 0; i < kItems; ++i) {
      {
        MutexLock lock(s.mu);
        s.items.push_back(i);
      }
      s.changed.notify_one();
    }
  });
  std::vector<int> seen;
  {
    MutexLock lock(s.mu);
    while (s.items.size() < kItems) {
      s.changed.wait(s.mu);
      seen.push_back(static_cast<int>(s.items.size()));  // wait() returned holding the lock
    }
    for (int i = 0; i < kItems; ++i) ASSERT_EQ(s.items[size_t(i)], i);
  }
  producer.join();
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_LE(seen[i - 1], seen[i]);  // never a torn read
}

TEST(CondVar, NotifyAllWakesEveryWaiter) {
  constexpr int kWaiters = 4;
  MutexTestShared s;
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&] {
      MutexLock lock(s.mu);
      while (!s.open) s.changed.wait(s.mu);
      s.waiters_woken++;
    });
  }
  {
    MutexLock lock(s.mu);
    s.open = true;
  }
  s.changed.notify_all();
  for (std::thread& t : waiters) t.join();
  MutexLock lock(s.mu);
  EXPECT_EQ(s.waiters_woken, kWaiters);
}

}  // namespace
}  // namespace strata
