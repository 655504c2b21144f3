// StickyError (offload/sticky_error.h): the first failure wins, ok statuses are ignored, and the
// first of several threads' failures is kept while every later status() returns it.
#include "offload/sticky_error.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(StickyError, StartsOkAndIgnoresOk) {
  StickyError e;
  EXPECT_TRUE(e.ok());
  EXPECT_TRUE(e.record(Status::ok()).is_ok());
  EXPECT_TRUE(e.ok());
  EXPECT_TRUE(e.status().is_ok());
}

TEST(StickyError, FirstFailureWinsAndRecordReturnsItsOwn) {
  StickyError e;
  Status first = e.record(Status(Code::io_error, "write of chunk 3"));
  EXPECT_EQ(first.code(), Code::io_error);
  Status second = e.record(Status(Code::no_space, "write of chunk 4"));
  EXPECT_EQ(second.code(), Code::no_space);  // the caller gets its own failure back
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Code::io_error);  // every later call gets the first
  EXPECT_EQ(e.status().message(), "write of chunk 3");
  (void)e.record(Status::ok());
  EXPECT_EQ(e.status().message(), "write of chunk 3");
}

TEST(StickyError, ConcurrentRecordsKeepExactlyTheFirst) {
  // Threads race to record; the one that recorded first is the one every reader sees, and it is
  // one of the recorded messages. A gate orders thread 0 before the others to make "first" exact.
  StickyError e;
  std::atomic<bool> first_done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; t++) {
    threads.emplace_back([&, t] {
      if (t != 0) {
        while (!first_done.load()) std::this_thread::yield();
      }
      for (int i = 0; i < 200; i++) {
        (void)e.record(Status(Code::io_error, "thread " + std::to_string(t) + " failure " + std::to_string(i)));
        if (t == 0 && i == 0) first_done.store(true);
        EXPECT_EQ(e.status().message(), "thread 0 failure 0");
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(e.status().message(), "thread 0 failure 0");
}

}  // namespace
}  // namespace strata
