// One suite, every engine: io_uring, the posix fallback and the in-memory engine must move the
// same bytes and fail with the same codes. Real-file engines use a scratch directory on the
// build's disk (ext4 here), so O_DIRECT is exercised.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "offload/io_engine.h"
#include "offload/io_engine_factory.h"
#include "offload/io_piece.h"
#include "runtime/pinned_pool.h"
#include "offload_test_util.h"

namespace strata {
namespace {

using test::aligned_buffer;
using test::fill_random;

class IoEngineSuite : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    engine_ = test::make_engine(GetParam(), IoShape{64 << 10, 16});
    if (!engine_) {
      auto e = UringEngine::create(UringEngineOptions{});
      GTEST_SKIP() << "io_uring cannot start here: " << e.status().to_string();
    }
  }
  bool real_files() const { return GetParam() != "mem"; }

  FileId create(const std::string& name, bool direct, uint64_t reserve) {
    auto f = engine_->open(dir_.file(name), OpenOptions{.create = true, .direct = direct});
    EXPECT_TRUE(f.is_ok()) << f.status().to_string();
    if (reserve > 0) {
      EXPECT_TRUE(engine_->allocate(*f, 0, reserve).is_ok());
    }
    return f.is_ok() ? *f : 0;
  }

  test::ScratchDir dir_;
  std::unique_ptr<IoEngine> engine_;
};

TEST_P(IoEngineSuite, DirectRoundTripSplitsLargeRequests) {
  FileId f = create("a.bin", true, 4 << 20);
  EXPECT_EQ(engine_->is_direct(f), true);
  // 1 MiB + 12 KiB at offset 8 KiB: 17 pieces of 64 KiB, the last one short.
  const size_t n = (1 << 20) + (12 << 10);
  auto out = aligned_buffer(n), in = aligned_buffer(n);
  fill_random(out.get(), n, 1);
  ASSERT_TRUE(engine_->run({IoOp::write, f, 8192, n, out.get()}).is_ok());
  std::memset(in.get(), 0, n);
  Status s = engine_->run({IoOp::read, f, 8192, n, in.get()});
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(std::memcmp(in.get(), out.get(), n), 0);
  EXPECT_EQ(*engine_->file_size(f), 4u << 20);
  EXPECT_TRUE(engine_->close(f).is_ok());
}

TEST_P(IoEngineSuite, BufferedRoundTripAtUnalignedSizesAndOffsets) {
  FileId f = create("b.bin", false, 0);
  std::mt19937_64 rng(5);
  std::vector<std::byte> model(300000, std::byte{0});
  ASSERT_TRUE(engine_->run({IoOp::write, f, 0, model.size(), model.data()}).is_ok());
  for (int i = 0; i < 40; i++) {
    uint64_t off = rng() % 250000, len = 1 + rng() % 49999;
    std::vector<std::byte> chunk(len);
    fill_random(chunk.data(), len, rng());
    ASSERT_TRUE(engine_->run({IoOp::write, f, off, len, chunk.data()}).is_ok());
    std::memcpy(model.data() + off, chunk.data(), len);
  }
  std::vector<std::byte> back(model.size());
  ASSERT_TRUE(engine_->run({IoOp::read, f, 0, back.size(), back.data()}).is_ok());
  EXPECT_EQ(std::memcmp(back.data(), model.data(), model.size()), 0);
  uint64_t off = 12345, len = 77777;  // an unaligned read in the middle
  std::vector<std::byte> part(len);
  ASSERT_TRUE(engine_->run({IoOp::read, f, off, len, part.data()}).is_ok());
  EXPECT_EQ(std::memcmp(part.data(), model.data() + off, len), 0);
}

TEST_P(IoEngineSuite, HundredsOfRequestsInFlight) {
  const int kRequests = 400;
  const size_t kEach = 8192;
  FileId f = create("c.bin", true, kRequests * kEach);
  auto out = aligned_buffer(kRequests * kEach), in = aligned_buffer(kRequests * kEach);
  fill_random(out.get(), kRequests * kEach, 9);
  std::vector<IoTicket> tickets;
  for (int i = 0; i < kRequests; i++) {  // every request submitted before any is waited for
    auto t = engine_->submit({IoOp::write, f, i * kEach, kEach, out.get() + i * kEach});
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    tickets.push_back(*t);
  }
  // done() turns true by itself (no wait() needed) and never blocks; then wait() returns the status.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!engine_->done(tickets.back()) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  EXPECT_TRUE(engine_->done(tickets.back()));
  for (IoTicket t : tickets) ASSERT_TRUE(engine_->wait(t).is_ok());
  EXPECT_FALSE(engine_->done(tickets.back())) << "a ticket waited for is unknown";
  // Reads with callbacks, in reverse order, all in flight together.
  std::mutex mu;
  std::condition_variable cv;
  int done = 0, failed = 0;
  for (int i = kRequests - 1; i >= 0; i--) {
    Status s = engine_->submit({IoOp::read, f, i * kEach, kEach, in.get() + i * kEach}, [&](const Status& st) {
      std::lock_guard lock(mu);
      done++;
      failed += st.is_ok() ? 0 : 1;
      cv.notify_all();
    });
    ASSERT_TRUE(s.is_ok()) << s.to_string();
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done == kRequests; });
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(std::memcmp(in.get(), out.get(), kRequests * kEach), 0);
}

TEST_P(IoEngineSuite, ReadPastEndOfFileIsAnErrorNotShortData) {
  FileId f = create("d.bin", true, 0);
  auto buf = aligned_buffer(16384);
  fill_random(buf.get(), 16384, 2);
  ASSERT_TRUE(engine_->run({IoOp::write, f, 0, 8192, buf.get()}).is_ok());
  // The first 8 KiB arrive (a short transfer), the rest is past the end of the file.
  Status s = engine_->run({IoOp::read, f, 0, 16384, buf.get()});
  EXPECT_EQ(s.code(), Code::io_error) << s.to_string();
  EXPECT_NE(s.message().find("end of file"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("d.bin"), std::string::npos) << s.message();
}

TEST_P(IoEngineSuite, KernelErrorsComeBackWithPathOffsetLengthAndErrno) {
  create("e.bin", true, 65536);
  auto ro = engine_->open(dir_.file("e.bin"), OpenOptions{.direct = true, .writable = false});
  ASSERT_TRUE(ro.is_ok()) << ro.status().to_string();
  auto buf = aligned_buffer(8192);
  fill_random(buf.get(), 8192, 3);
  Status s = engine_->run({IoOp::write, *ro, 4096, 8192, buf.get()});  // a write to a read-only file
  EXPECT_EQ(s.code(), Code::io_error) << s.to_string();
  EXPECT_EQ(s.sys_errno(), EBADF);
  EXPECT_NE(s.message().find("write " + dir_.file("e.bin") + " at offset 4096 (8192 bytes)"), std::string::npos)
      << s.message();
}

TEST(IoEngines, RefuseABadShape) {
  auto posix = PosixEngine::create(IoShape{0, 8});
  EXPECT_EQ(posix.status().code(), Code::invalid_argument);
  EXPECT_NE(posix.status().message().find("block size"), std::string::npos);
  EXPECT_EQ(PosixEngine::create(IoShape{1 << 20, 0}).status().code(), Code::invalid_argument);
  EXPECT_EQ(UringEngine::create(UringEngineOptions{.shape = IoShape{2ull << 30, 8}}).status().code(),
            Code::invalid_argument);
  EXPECT_EQ(UringEngine::create(UringEngineOptions{.shape = IoShape{1 << 20, 5000}}).status().code(),
            Code::invalid_argument);
}

TEST(MemEngine, RefusesMisalignedDirectRequestsLikeODirect) {
  MemEngine engine;
  auto f = engine.open("/mem/x.bin", OpenOptions{.create = true, .direct = true});
  ASSERT_TRUE(f.is_ok());
  auto buf = aligned_buffer(8192);
  Status s = engine.run({IoOp::write, *f, 100, 4096, buf.get()});
  EXPECT_EQ(s.code(), Code::invalid_argument) << s.to_string();
  EXPECT_EQ(s.sys_errno(), EINVAL);
  EXPECT_NE(s.message().find("/mem/x.bin at offset 100"), std::string::npos) << s.message();
  EXPECT_TRUE(engine.run({IoOp::write, *f, 4096, 4096, buf.get()}).is_ok());
}

TEST_P(IoEngineSuite, BadRequestsAndTicketsAreRejectedUpFront) {
  FileId f = create("f.bin", true, 8192);
  auto buf = aligned_buffer(4096);
  EXPECT_EQ(engine_->submit(IoRequest{IoOp::read, f, 0, 0, buf.get()}).status().code(), Code::invalid_argument);
  EXPECT_EQ(engine_->submit(IoRequest{IoOp::read, f, 0, 4096, nullptr}).status().code(), Code::invalid_argument);
  EXPECT_EQ(engine_->submit(IoRequest{IoOp::read, f + 100, 0, 4096, buf.get()}).status().code(), Code::invalid_argument);
  EXPECT_FALSE(engine_->done(987654));
  Status unknown = engine_->wait(987654);
  EXPECT_EQ(unknown.code(), Code::invalid_argument);
  EXPECT_NE(unknown.message().find("unknown I/O ticket"), std::string::npos);
  auto t = engine_->submit(IoRequest{IoOp::read, f, 0, 4096, buf.get()});
  ASSERT_TRUE(t.is_ok());
  EXPECT_TRUE(engine_->wait(*t).is_ok());
  EXPECT_EQ(engine_->wait(*t).code(), Code::invalid_argument);  // waited for once already
}

TEST_P(IoEngineSuite, OpenErrorsNameThePath) {
  auto missing = engine_->open(dir_.file("missing.bin"), OpenOptions{});
  EXPECT_EQ(missing.status().code(), Code::not_found);
  EXPECT_NE(missing.status().message().find("missing.bin"), std::string::npos);
  create("g.bin", true, 0);
  auto again = engine_->open(dir_.file("g.bin"), OpenOptions{.create = true});
  EXPECT_EQ(again.status().code(), Code::already_exists);
  if (!real_files()) return;
  ASSERT_EQ(::symlink(dir_.file("g.bin").c_str(), dir_.file("link.bin").c_str()), 0);
  auto link = engine_->open(dir_.file("link.bin"), OpenOptions{});
  EXPECT_FALSE(link.is_ok());
  EXPECT_NE(link.status().message().find("symbolic link"), std::string::npos) << link.status().to_string();
}

TEST_P(IoEngineSuite, RegisteredMemoryIsUsedAndCanBeDropped) {
  FileId f = create("h.bin", true, 1 << 20);
  auto mem = aligned_buffer(1 << 20);
  std::span<std::byte> region(mem.get(), 1 << 20);
  ASSERT_TRUE(engine_->register_memory(region).is_ok());
  ASSERT_TRUE(engine_->register_memory(region).is_ok());  // twice is harmless
  if (auto* u = dynamic_cast<UringEngine*>(engine_.get())) {
    EXPECT_TRUE(u->features().fixed_buffers);
  }
  fill_random(mem.get(), 512 << 10, 4);
  ASSERT_TRUE(engine_->run({IoOp::write, f, 0, 512 << 10, mem.get()}).is_ok());
  ASSERT_TRUE(engine_->run({IoOp::read, f, 0, 512 << 10, mem.get() + (512 << 10)}).is_ok());
  EXPECT_EQ(std::memcmp(mem.get(), mem.get() + (512 << 10), 512 << 10), 0);
  ASSERT_TRUE(engine_->unregister_memory(region).is_ok());
  ASSERT_TRUE(engine_->run({IoOp::read, f, 4096, 4096, mem.get()}).is_ok());  // unfixed again
  EXPECT_EQ(std::memcmp(mem.get(), mem.get() + (512 << 10) + 4096, 4096), 0);
}

TEST(UringEngine, PinnedPoolSlabsAreRegisteredNowAndWhenTheyAppear) {
  auto engine = UringEngine::create(UringEngineOptions{.shape = IoShape{64 << 10, 8}});
  if (!engine.is_ok()) GTEST_SKIP() << "io_uring cannot start here: " << engine.status().to_string();
  if (!(*engine)->features().fixed_buffers) GTEST_SKIP() << "this kernel has no sparse registered-buffer table";
  auto pool = PinnedPool::create(PinnedPoolOptions{.slab_bytes = 1 << 20, .allow_cuda = false});
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  auto first = (*pool)->acquire(256 << 10);
  ASSERT_TRUE(first.is_ok());
  register_pinned_pool(**engine, **pool);
  EXPECT_EQ((*engine)->registered_regions(), (*pool)->slabs().size());
  auto big = (*pool)->acquire(3 << 20);  // larger than a slab: a new slab, registered by the listener
  ASSERT_TRUE(big.is_ok());
  EXPECT_EQ((*engine)->registered_regions(), (*pool)->slabs().size());
  EXPECT_GE((*pool)->slabs().size(), 2u);
  test::ScratchDir dir;
  auto f = (*engine)->open(dir.file("p.bin"), OpenOptions{.create = true});
  ASSERT_TRUE(f.is_ok());
  fill_random(big->data(), 2 << 20, 8);
  ASSERT_TRUE((*engine)->run({IoOp::write, *f, 0, 1 << 20, big->data()}).is_ok());
  ASSERT_TRUE((*engine)->run({IoOp::read, *f, 0, 1 << 20, big->data() + (1 << 20)}).is_ok());
  EXPECT_EQ(std::memcmp(big->data(), big->data() + (1 << 20), 1 << 20), 0);
  (*pool)->set_slab_listener(nullptr);
}

INSTANTIATE_TEST_SUITE_P(Engines, IoEngineSuite, ::testing::Values("io_uring", "posix", "mem"),
                         [](const auto& info) { return info.param; });

// The transfer-result rule every engine applies, with results a disk rarely gives on demand.
TEST(IoPiece, ShortTransferAdvancesAndAgainRetries) {
  std::byte buf[8192];
  IoPiece p{7, IoOp::read, 0, 4096, 8192, buf, 0};
  PieceOutcome o = apply_transfer_result(p, 4096, "/x");
  EXPECT_EQ(o.next, PieceNext::resubmit);
  EXPECT_EQ(p.offset, 8192u);
  EXPECT_EQ(p.length, 4096u);
  EXPECT_EQ(p.buffer, buf + 4096);
  EXPECT_EQ(apply_transfer_result(p, -EAGAIN, "/x").next, PieceNext::resubmit);
  EXPECT_EQ(p.retries, 1u);
  EXPECT_EQ(p.length, 4096u);
  EXPECT_EQ(apply_transfer_result(p, 4096, "/x").next, PieceNext::done);
}

TEST(IoPiece, ErrorsNameOperationPathOffsetAndErrno) {
  std::byte buf[4096];
  IoPiece p{1, IoOp::write, 0, 1 << 20, 4096, buf, 0};
  PieceOutcome o = apply_transfer_result(p, -EIO, "/mnt/a/swap.bin");
  EXPECT_EQ(o.next, PieceNext::failed);
  EXPECT_EQ(o.status.code(), Code::io_error);
  EXPECT_EQ(o.status.sys_errno(), EIO);
  EXPECT_NE(o.status.message().find("write /mnt/a/swap.bin at offset 1048576 (4096 bytes)"), std::string::npos)
      << o.status.message();
  EXPECT_EQ(apply_transfer_result(p, -ENOSPC, "/x").status.code(), Code::no_space);
  EXPECT_EQ(apply_transfer_result(p, 0, "/x").status.code(), Code::io_error);  // a write that moves nothing
  p.retries = kMaxIoRetries;
  PieceOutcome stuck = apply_transfer_result(p, -EAGAIN, "/x");
  EXPECT_EQ(stuck.next, PieceNext::failed);
  EXPECT_EQ(stuck.status.code(), Code::unavailable);
}

TEST(IoPiece, SplitCoversTheRequestInOrder) {
  std::deque<IoPiece> pieces;
  std::vector<std::byte> storage(10000);  // split_request only does pointer arithmetic on it
  std::byte* buf = storage.data();
  EXPECT_EQ(split_request({IoOp::read, 3, 4096, 10000, buf}, 9, 4096, pieces), 3u);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2].offset, 4096u + 8192u);
  EXPECT_EQ(pieces[2].length, 10000u - 8192u);
  EXPECT_EQ(pieces[2].buffer, buf + 8192);
  EXPECT_EQ(piece_count(10000, 4096), 3u);
}

}  // namespace
}  // namespace strata
