// FaultEngine: every fault it injects ends the request with a clear status (or, for a torn write,
// with damage a checksum finds), never with partial data passed off as good; and the same seed
// hits the same requests.
#include "offload/fault_engine.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "offload/mem_engine.h"
#include "offload_test_util.h"

namespace strata {
namespace {

using test::aligned_buffer;
using test::fill_random;

constexpr size_t kLen = 64 << 10;

struct Rig {
  explicit Rig(std::vector<FaultRule> rules, uint64_t seed = 1) {
    auto inner = std::make_unique<MemEngine>();
    mem = inner.get();
    engine = std::make_unique<FaultEngine>(std::move(inner), FaultEngineOptions{seed, std::move(rules)});
    file = *engine->open("/mem/swap.bin", OpenOptions{.create = true, .direct = true});
    good = aligned_buffer(kLen);
    fill_random(good.get(), kLen, 42);
  }
  std::vector<std::byte>& disk() { return *mem->contents("/mem/swap.bin"); }
  MemEngine* mem;
  std::unique_ptr<FaultEngine> engine;
  FileId file;
  test::AlignedBuffer good;
};

FaultRule rule(FaultKind kind, std::optional<IoOp> op, uint32_t limit = 1) {
  FaultRule r;
  r.kind = kind;
  r.op = op;
  r.limit = limit;
  return r;
}

TEST(FaultEngine, EioOnReadFailsAndLeavesNoGoodData) {
  Rig rig({rule(FaultKind::eio, IoOp::read)});
  ASSERT_TRUE(rig.engine->run({IoOp::write, rig.file, 0, kLen, rig.good.get()}).is_ok());
  auto in = aligned_buffer(kLen);
  Status s = rig.engine->run({IoOp::read, rig.file, 0, kLen, in.get()});
  EXPECT_EQ(s.code(), Code::io_error);
  EXPECT_EQ(s.sys_errno(), EIO);
  EXPECT_NE(s.message().find("read /mem/swap.bin at offset 0 (65536 bytes)"), std::string::npos) << s.message();
  EXPECT_NE(std::memcmp(in.get(), rig.good.get(), kLen), 0);
  EXPECT_EQ(rig.engine->injected(FaultKind::eio), 1u);
  // The limit was one: the next read is clean.
  ASSERT_TRUE(rig.engine->run({IoOp::read, rig.file, 0, kLen, in.get()}).is_ok());
  EXPECT_EQ(std::memcmp(in.get(), rig.good.get(), kLen), 0);
}

TEST(FaultEngine, EioOnWriteFails) {
  Rig rig({rule(FaultKind::eio, IoOp::write)});
  Status s = rig.engine->run({IoOp::write, rig.file, 0, kLen, rig.good.get()});
  EXPECT_EQ(s.code(), Code::io_error);
  EXPECT_NE(s.message().find("write /mem/swap.bin"), std::string::npos);
}

TEST(FaultEngine, ShortReadIsAnErrorAndTheTailIsGarbage) {
  Rig rig({rule(FaultKind::short_transfer, IoOp::read)});
  ASSERT_TRUE(rig.engine->run({IoOp::write, rig.file, 0, kLen, rig.good.get()}).is_ok());
  auto in = aligned_buffer(kLen);
  Status s = rig.engine->run({IoOp::read, rig.file, 0, kLen, in.get()});
  EXPECT_EQ(s.code(), Code::io_error);
  EXPECT_NE(s.message().find("short read"), std::string::npos) << s.message();
  EXPECT_NE(std::memcmp(in.get() + kLen - 4096, rig.good.get() + kLen - 4096, 4096), 0);
}

TEST(FaultEngine, ShortWriteIsAnErrorAndOnlyAPrefixLands) {
  Rig rig({rule(FaultKind::short_transfer, IoOp::write)});
  std::vector<std::byte> zeros(kLen, std::byte{0});
  rig.disk() = zeros;
  Status s = rig.engine->run({IoOp::write, rig.file, 0, kLen, rig.good.get()});
  EXPECT_EQ(s.code(), Code::io_error);
  EXPECT_NE(s.message().find("short write"), std::string::npos) << s.message();
  EXPECT_NE(std::memcmp(rig.disk().data(), rig.good.get(), kLen), 0);
}

TEST(FaultEngine, EnospcOnWriteAndAllocateIsNoSpace) {
  Rig rig({rule(FaultKind::enospc, IoOp::write, 2)});
  Status a = rig.engine->allocate(rig.file, 0, 1 << 20);
  EXPECT_EQ(a.code(), Code::no_space);
  EXPECT_NE(a.message().find("reserve 1048576 bytes"), std::string::npos) << a.message();
  Status w = rig.engine->run({IoOp::write, rig.file, 0, kLen, rig.good.get()});
  EXPECT_EQ(w.code(), Code::no_space);
  EXPECT_EQ(rig.disk().size(), 0u);  // nothing landed
}

TEST(FaultEngine, TornWriteReportsSuccessButLeavesOldBytes) {
  Rig rig({rule(FaultKind::torn_write, IoOp::write)}, 3);
  rig.disk() = std::vector<std::byte>(kLen, std::byte{0});
  EXPECT_TRUE(rig.engine->run({IoOp::write, rig.file, 0, kLen, rig.good.get()}).is_ok());  // the lie
  EXPECT_NE(std::memcmp(rig.disk().data(), rig.good.get(), kLen), 0);
  EXPECT_EQ(rig.engine->injected(FaultKind::torn_write), 1u);
}

TEST(FaultEngine, LatencyStillDeliversTheData) {
  FaultRule slow = rule(FaultKind::latency, std::nullopt, 10);
  slow.latency = std::chrono::microseconds(2000);
  Rig rig({slow});
  ASSERT_TRUE(rig.engine->run({IoOp::write, rig.file, 0, kLen, rig.good.get()}).is_ok());
  auto in = aligned_buffer(kLen);
  ASSERT_TRUE(rig.engine->run({IoOp::read, rig.file, 0, kLen, in.get()}).is_ok());
  EXPECT_EQ(std::memcmp(in.get(), rig.good.get(), kLen), 0);
  EXPECT_EQ(rig.engine->injected(FaultKind::latency), 2u);
}

std::vector<int> failing_requests(uint64_t seed) {
  FaultRule r = rule(FaultKind::eio, IoOp::read, 1000);
  r.probability = 0.3;
  Rig rig({r}, seed);
  EXPECT_TRUE(rig.engine->run({IoOp::write, rig.file, 0, kLen, rig.good.get()}).is_ok());
  auto in = aligned_buffer(4096);
  std::vector<int> failed;
  for (int i = 0; i < 64; i++)
    if (!rig.engine->run({IoOp::read, rig.file, 0, 4096, in.get()}).is_ok()) failed.push_back(i);
  return failed;
}

TEST(FaultEngine, SameSeedSameFaults) {
  std::vector<int> a = failing_requests(11), b = failing_requests(11), c = failing_requests(12);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_GT(a.size(), 5u);   // about 30% of 64
  EXPECT_LT(a.size(), 40u);
}

TEST(FaultEngine, SkipLetsTheFirstRequestsThrough) {
  FaultRule r = rule(FaultKind::eio, IoOp::write);
  r.skip = 2;
  Rig rig({r});
  EXPECT_TRUE(rig.engine->run({IoOp::write, rig.file, 0, 4096, rig.good.get()}).is_ok());
  EXPECT_TRUE(rig.engine->run({IoOp::write, rig.file, 0, 4096, rig.good.get()}).is_ok());
  EXPECT_EQ(rig.engine->run({IoOp::write, rig.file, 0, 4096, rig.good.get()}).code(), Code::io_error);
  EXPECT_EQ(rig.engine->injected_total(), 1u);
  EXPECT_EQ(rig.engine->name(), "fault(mem)");
}

}  // namespace
}  // namespace strata
