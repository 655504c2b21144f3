// UringEngine against a ring whose calls misbehave (UringCalls test doubles): submits that take
// none of the queued entries or fail for a while must still get every entry into the kernel;
// a submit or wait that keeps failing must end every open request with one sticky status, and
// every later submit with the same, within a bounded time -- never a silent loop or a hang.
// The doubles wrap the real liburing calls, so the data really moves where the ring works.
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "offload/uring_engine.h"
#include "tests/offload/offload_test_util.h"

namespace strata {
namespace {

using test::aligned_buffer;
using test::fill_random;
using test::ScratchDir;

// Submit: the first `refuse_first` calls take nothing (returning `refuse_rc`, which is 0 or a
// -errno), then calls go through, and after `fail_after` successful calls every call returns
// `fail_rc`. Wait: after `wait_ok` calls every call returns `wait_rc`.
class FlakyCalls final : public UringCalls {
 public:
  int submit(io_uring* ring) override {
    int n = submits.fetch_add(1);
    if (n < refuse_first) return refuse_rc;
    if (real_submits.fetch_add(1) >= fail_after) return fail_rc;
    return io_uring_submit(ring);
  }
  int wait(io_uring* ring, io_uring_cqe** cqe, __kernel_timespec* timeout) override {
    if (waits.fetch_add(1) >= wait_ok) return wait_rc;
    return io_uring_wait_cqe_timeout(ring, cqe, timeout);
  }

  int refuse_first = 0;
  int refuse_rc = 0;
  int fail_after = 1 << 30;
  int fail_rc = -EIO;
  int wait_ok = 1 << 30;
  int wait_rc = -EIO;
  std::atomic<int> submits{0};
  std::atomic<int> real_submits{0};
  std::atomic<int> waits{0};
};

struct Fixture {
  ScratchDir dir;
  std::shared_ptr<FlakyCalls> calls = std::make_shared<FlakyCalls>();
  std::unique_ptr<UringEngine> engine;
  FileId file = 0;

  // Returns false (the test skips) where io_uring cannot start.
  bool start(IoShape shape, uint64_t file_bytes) {
    auto e = UringEngine::create(UringEngineOptions{.shape = shape, .calls = calls});
    if (!e.is_ok()) return false;
    engine = std::move(*e);
    auto f = engine->open(dir.file("data.bin"), OpenOptions{.create = true, .direct = false});
    EXPECT_TRUE(f.is_ok()) << f.status().to_string();
    file = *f;
    EXPECT_TRUE(engine->allocate(file, 0, file_bytes).is_ok());
    return true;
  }
};

constexpr IoShape kSmallPieces{64 << 10, 4};  // 64 KiB pieces, 4 in flight

TEST(UringEngineRing, EntriesTheKernelDidNotTakeAreSubmittedAgain) {
  for (int refuse_rc : {0, -EINTR, -EAGAIN, -EBUSY}) {
    SCOPED_TRACE(refuse_rc);
    Fixture fx;
    fx.calls->refuse_first = 25;  // every one of these leaves all queued entries in the ring
    fx.calls->refuse_rc = refuse_rc;
    if (!fx.start(kSmallPieces, 2 << 20)) GTEST_SKIP() << "io_uring cannot start here";
    auto out = aligned_buffer(2 << 20), in = aligned_buffer(2 << 20);
    fill_random(out.get(), 2 << 20, 7);
    ASSERT_TRUE(fx.engine->run(IoRequest{IoOp::write, fx.file, 0, 2 << 20, out.get()}).is_ok());
    ASSERT_TRUE(fx.engine->run(IoRequest{IoOp::read, fx.file, 0, 2 << 20, in.get()}).is_ok());
    EXPECT_EQ(std::memcmp(out.get(), in.get(), 2 << 20), 0);
    EXPECT_GT(fx.calls->submits.load(), 25);
  }
}

TEST(UringEngineRing, ASubmitThatKeepsTakingNothingStopsTheEngineWithAStickyError) {
  Fixture fx;
  fx.calls->refuse_first = 1 << 30;  // the kernel never takes anything
  if (!fx.start(kSmallPieces, 1 << 20)) GTEST_SKIP() << "io_uring cannot start here";
  auto buf = aligned_buffer(1 << 20);
  auto begin = std::chrono::steady_clock::now();
  StatusOr<IoTicket> t = fx.engine->submit(IoRequest{IoOp::write, fx.file, 0, 1 << 20, buf.get()});
  ASSERT_TRUE(t.is_ok());  // started, then failed: the ticket carries the error
  Status s = fx.engine->wait(*t);
  EXPECT_EQ(s.code(), Code::io_error) << s.to_string();
  EXPECT_NE(s.message().find("took none of"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--io-engine posix"), std::string::npos) << s.message();
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(5));
  EXPECT_EQ(fx.calls->submits.load(), static_cast<int>(kUringMaxStalls) + 1);

  // Sticky: a later request is refused up front with the same status, for both submit forms.
  StatusOr<IoTicket> again = fx.engine->submit(IoRequest{IoOp::read, fx.file, 0, 4096, buf.get()});
  ASSERT_FALSE(again.is_ok());
  EXPECT_EQ(again.status().message(), s.message());
  bool called = false;
  Status cb = fx.engine->submit(IoRequest{IoOp::read, fx.file, 0, 4096, buf.get()}, [&](const Status&) { called = true; });
  EXPECT_EQ(cb.message(), s.message());
  EXPECT_FALSE(called);
}

TEST(UringEngineRing, AHardSubmitErrorFailsEveryOpenRequestAndLaterOnes) {
  Fixture fx;
  fx.calls->fail_after = 3;  // three submits go through, then EIO from the ring itself
  if (!fx.start(kSmallPieces, 4 << 20)) GTEST_SKIP() << "io_uring cannot start here";
  auto buf = aligned_buffer(4 << 20);
  fill_random(buf.get(), 4 << 20, 3);
  std::vector<IoTicket> tickets;
  std::atomic<int> callbacks{0};
  std::promise<Status> cb_status;
  Status cb_submit = fx.engine->submit(IoRequest{IoOp::write, fx.file, 0, 1 << 20, buf.get()}, [&](const Status& s) {
    callbacks++;
    cb_status.set_value(s);
  });
  for (uint64_t off = 1 << 20; off < (4 << 20); off += 1 << 20) {
    StatusOr<IoTicket> t = fx.engine->submit(IoRequest{IoOp::write, fx.file, off, 1 << 20, buf.get() + off});
    if (!t.is_ok()) {
      EXPECT_EQ(t.status().code(), Code::io_error) << t.status().to_string();
      break;
    }
    tickets.push_back(*t);
  }
  int failed = 0;
  std::string message;
  for (IoTicket t : tickets) {
    Status s = fx.engine->wait(t);
    if (!s.is_ok()) {
      failed++;
      message = s.message();
      EXPECT_NE(s.message().find("io_uring_submit"), std::string::npos) << s.message();
    }
  }
  if (cb_submit.is_ok()) {
    auto f = cb_status.get_future();
    ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    if (!f.get().is_ok()) failed++;
    EXPECT_EQ(callbacks.load(), 1);
  }
  // 64 pieces need far more than three submits: some request must have failed.
  EXPECT_GE(failed, 1);
  StatusOr<IoTicket> later = fx.engine->submit(IoRequest{IoOp::read, fx.file, 0, 4096, buf.get()});
  ASSERT_FALSE(later.is_ok());
  EXPECT_NE(later.status().message().find("Input/output error"), std::string::npos) << later.status().to_string();
  EXPECT_NE(later.status().message().find("the io_uring engine stopped"), std::string::npos);
}

TEST(UringEngineRing, InterruptedWaitsAreRetried) {
  // A wait double that fails transiently every other call still delivers every completion.
  class Interrupted final : public UringCalls {
   public:
    int wait(io_uring* ring, io_uring_cqe** cqe, __kernel_timespec* timeout) override {
      if (n++ % 2 == 0) return -EINTR;
      return io_uring_wait_cqe_timeout(ring, cqe, timeout);
    }
    std::atomic<int> n{0};
  };
  auto calls = std::make_shared<Interrupted>();
  auto e = UringEngine::create(UringEngineOptions{.shape = kSmallPieces, .calls = calls});
  if (!e.is_ok()) GTEST_SKIP() << "io_uring cannot start here: " << e.status().to_string();
  ScratchDir dir;
  auto f = (*e)->open(dir.file("d.bin"), OpenOptions{.create = true, .direct = false});
  ASSERT_TRUE(f.is_ok());
  auto out = aligned_buffer(1 << 20), in = aligned_buffer(1 << 20);
  fill_random(out.get(), 1 << 20, 11);
  ASSERT_TRUE((*e)->run(IoRequest{IoOp::write, *f, 0, 1 << 20, out.get()}).is_ok());
  ASSERT_TRUE((*e)->run(IoRequest{IoOp::read, *f, 0, 1 << 20, in.get()}).is_ok());
  EXPECT_EQ(std::memcmp(out.get(), in.get(), 1 << 20), 0);
  EXPECT_GT(calls->n.load(), 2);
}

TEST(UringEngineRing, APersistentWaitErrorBecomesAStatusNotALoop) {
  for (int wait_rc : {-EBADF, -EINTR}) {  // a hard error at once; an endless EINTR after kUringMaxStalls
    SCOPED_TRACE(wait_rc);
    Fixture fx;
    fx.calls->wait_ok = 0;
    fx.calls->wait_rc = wait_rc;
    if (!fx.start(kSmallPieces, 1 << 20)) GTEST_SKIP() << "io_uring cannot start here";
    auto buf = aligned_buffer(1 << 20);
    auto begin = std::chrono::steady_clock::now();
    Status s;
    // The reaper may stop the engine before or after this submit: either the submit is refused
    // or its ticket fails; both carry the wait error.
    StatusOr<IoTicket> t = fx.engine->submit(IoRequest{IoOp::write, fx.file, 0, 1 << 20, buf.get()});
    s = t.is_ok() ? fx.engine->wait(*t) : t.status();
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("io_uring_wait_cqe"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("the io_uring engine stopped"), std::string::npos) << s.message();
    EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(5));
    StatusOr<IoTicket> later = fx.engine->submit(IoRequest{IoOp::read, fx.file, 0, 4096, buf.get()});
    ASSERT_FALSE(later.is_ok());
    EXPECT_EQ(later.status().message(), s.message());
    // The waits stop once the engine has stopped: no spinning on a broken ring.
    int waits = fx.calls->waits.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(fx.calls->waits.load(), waits);
  }
}

TEST(UringEngineRing, DestroyingAStoppedEngineReturnsPromptly) {
  Fixture fx;
  fx.calls->fail_after = 0;
  if (!fx.start(kSmallPieces, 1 << 20)) GTEST_SKIP() << "io_uring cannot start here";
  auto buf = aligned_buffer(1 << 20);
  StatusOr<IoTicket> t = fx.engine->submit(IoRequest{IoOp::write, fx.file, 0, 1 << 20, buf.get()});
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(fx.engine->wait(*t).code(), Code::io_error);
  auto begin = std::chrono::steady_clock::now();
  fx.engine.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(2));
}

}  // namespace
}  // namespace strata
