// CpuBackend: budgeted device memory, stream order and events (copies across the three streams
// arrive in order, checked by content), host callbacks, range validation before queuing,
// synchronize_all, and clean destruction with work still queued. Gates (futures) hold streams
// back so ordering is forced, not left to timing.
#include "runtime/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace strata {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// A closed gate a stream can be made to wait on (through a host callback) until the test opens it.
// Declared after the backend, it is destroyed first and opens itself, so a failed assertion never
// leaves the backend's destructor waiting on a closed gate.
struct Gate {
  std::promise<void> opener;
  std::shared_future<void> opened = opener.get_future().share();
  bool is_open = false;
  std::function<void()> blocker() const {
    return [f = opened] { f.wait(); };
  }
  void open() {
    opener.set_value();
    is_open = true;
  }
  ~Gate() {
    if (!is_open) opener.set_value();
  }
};

std::unique_ptr<Backend> make_cpu(uint64_t budget = 64 * kMiB) {
  BackendOptions options;
  options.kind = BackendKind::cpu;
  options.memory_budget = budget;
  StatusOr<std::unique_ptr<Backend>> b = make_backend(options);
  EXPECT_TRUE(b.is_ok()) << b.status().to_string();
  return b.is_ok() ? std::move(b).value() : nullptr;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i++) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return v;
}

TEST(CpuBackend, DescribesItselfAndDefaultsToATwoGiBBudget) {
  StatusOr<std::unique_ptr<Backend>> b = make_backend(BackendOptions{});
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ((*b)->kind(), BackendKind::cpu);
  EXPECT_EQ((*b)->memory().capacity, kCpuBackendDefaultBudget);
  EXPECT_EQ((*b)->device().name, "CPU (host memory)");
  EXPECT_GT((*b)->device().total_memory, 0u);
  EXPECT_EQ((*b)->device().compute_capability, 0);
}

TEST(CpuBackend, AllocationOverBudgetIsOutOfMemoryNamingGpuAndTag) {
  auto b = make_cpu(8 * kMiB);
  StatusOr<void*> first = b->allocate(6 * kMiB, "weights");
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  StatusOr<void*> second = b->allocate(4 * kMiB, "layer 7 activations");
  ASSERT_FALSE(second.is_ok());
  EXPECT_EQ(second.status().code(), Code::out_of_memory);
  const std::string& m = second.status().message();
  EXPECT_NE(m.find("gpu memory budget exceeded"), std::string::npos) << m;
  EXPECT_NE(m.find("'layer 7 activations' needs 4 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("of the 8 MiB budget"), std::string::npos) << m;
  EXPECT_EQ(b->memory().in_use, 6 * kMiB);
  EXPECT_EQ(b->memory().peak, 6 * kMiB);
}

TEST(CpuBackend, AllocatedMemoryIsAlignedWritableAndReleasable) {
  auto b = make_cpu();
  void* p = *b->allocate(1000, "x");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  std::memset(p, 0x5a, 1000);
  ASSERT_TRUE(b->release(p).is_ok());
  EXPECT_EQ(b->memory().in_use, 0u);
  EXPECT_EQ(b->release(p).code(), Code::failed_precondition) << "double release";
  int outside = 0;
  Status foreign = b->release(&outside);
  EXPECT_EQ(foreign.code(), Code::failed_precondition);
  EXPECT_NE(foreign.message().find("not gpu memory of this backend"), std::string::npos) << foreign.to_string();
}

// h2d copy (held back by a gate) -> event -> compute copies on the device -> event -> d2h copy.
// Without the waits the compute copy would run before the data arrived.
TEST(CpuBackend, CopiesAcrossStreamsFollowEvents) {
  auto b = make_cpu();
  const size_t n = 3 * kMiB + 123;
  std::vector<uint8_t> src = pattern(n, 1), dst(n, 0);
  void* staged = *b->allocate(n, "staged");
  void* moved = *b->allocate(n, "moved");
  ASSERT_TRUE(b->fill_zero(moved, n, Stream::compute).is_ok());
  Gate gate;
  ASSERT_TRUE(b->host_callback(Stream::h2d, gate.blocker()).is_ok());
  ASSERT_TRUE(b->copy_to_device(staged, src.data(), n, Stream::h2d).is_ok());
  auto arrived = b->create_event();
  ASSERT_TRUE(b->record(*arrived, Stream::h2d).is_ok());
  ASSERT_TRUE(b->wait(Stream::compute, *arrived).is_ok());
  ASSERT_TRUE(b->copy_on_device(moved, staged, n, Stream::compute).is_ok());
  auto computed = b->create_event();
  ASSERT_TRUE(b->record(*computed, Stream::compute).is_ok());
  ASSERT_TRUE(b->wait(Stream::d2h, *computed).is_ok());
  ASSERT_TRUE(b->copy_to_host(dst.data(), moved, n, Stream::d2h).is_ok());
  EXPECT_FALSE(b->query(*arrived));
  EXPECT_FALSE(b->query(*computed));
  gate.open();
  ASSERT_TRUE(b->synchronize(Stream::d2h).is_ok());
  EXPECT_TRUE(b->query(*arrived));
  EXPECT_TRUE(b->query(*computed));
  EXPECT_EQ(dst, src);
}

TEST(CpuBackend, EventQueryNeverRecordedAndReRecord) {
  auto b = make_cpu();
  auto e = b->create_event();
  EXPECT_TRUE(b->query(*e)) << "never recorded counts as complete";
  EXPECT_TRUE(b->synchronize(*e).is_ok());
  ASSERT_TRUE(b->wait(Stream::compute, *e).is_ok());
  ASSERT_TRUE(b->synchronize(Stream::compute).is_ok()) << "waiting on a never-recorded event blocks nothing";

  Gate first;
  ASSERT_TRUE(b->host_callback(Stream::h2d, first.blocker()).is_ok());
  ASSERT_TRUE(b->record(*e, Stream::h2d).is_ok());
  EXPECT_FALSE(b->query(*e));
  first.open();
  ASSERT_TRUE(b->synchronize(*e).is_ok());
  EXPECT_TRUE(b->query(*e));

  Gate second;
  ASSERT_TRUE(b->host_callback(Stream::d2h, second.blocker()).is_ok());
  ASSERT_TRUE(b->record(*e, Stream::d2h).is_ok());
  EXPECT_FALSE(b->query(*e)) << "re-recording moves the mark";
  second.open();
  ASSERT_TRUE(b->synchronize(*e).is_ok());
  EXPECT_TRUE(b->query(*e));
}

// A wait orders against the mark current at the call; re-recording afterwards must not delay it.
TEST(CpuBackend, WaitCapturesTheMarkAtCallTime) {
  auto b = make_cpu();
  auto e = b->create_event();
  Gate early, late;
  ASSERT_TRUE(b->host_callback(Stream::h2d, early.blocker()).is_ok());
  ASSERT_TRUE(b->record(*e, Stream::h2d).is_ok());
  ASSERT_TRUE(b->wait(Stream::compute, *e).is_ok());
  std::promise<void> compute_ran;
  ASSERT_TRUE(b->host_callback(Stream::compute, [&] { compute_ran.set_value(); }).is_ok());
  ASSERT_TRUE(b->host_callback(Stream::h2d, late.blocker()).is_ok());
  ASSERT_TRUE(b->record(*e, Stream::h2d).is_ok());  // the new mark sits behind `late`
  early.open();
  // Generous bound: only a wrong implementation (waiting for the later mark) ever reaches it.
  EXPECT_EQ(compute_ran.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_FALSE(b->query(*e));
  late.open();
  ASSERT_TRUE(b->synchronize_all().is_ok());
  EXPECT_TRUE(b->query(*e));
}

// A slow host callback on h2d writes device memory; compute work ordered after it by an event
// sees the write.
TEST(CpuBackend, HostCallbackWritesAreSeenByWorkOrderedAfterIt) {
  auto b = make_cpu();
  auto* cell = static_cast<uint64_t*>(*b->allocate(sizeof(uint64_t), "cell"));
  *cell = 0;
  ASSERT_TRUE(b->host_callback(Stream::h2d, [cell] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    *cell = 0xC0FFEE;
  }).is_ok());
  auto written = b->create_event();
  ASSERT_TRUE(b->record(*written, Stream::h2d).is_ok());
  ASSERT_TRUE(b->wait(Stream::compute, *written).is_ok());
  uint64_t seen = 0;
  ASSERT_TRUE(b->host_callback(Stream::compute, [&seen, cell] { seen = *cell; }).is_ok());
  ASSERT_TRUE(b->synchronize(Stream::compute).is_ok());
  EXPECT_EQ(seen, 0xC0FFEEu);
}

TEST(CpuBackend, ManyInterleavedCopiesArriveIntact) {
  auto b = make_cpu();
  constexpr int kChunks = 48;
  constexpr size_t kBytes = 64 * 1024 + 40;
  std::vector<std::vector<uint8_t>> src, dst;
  std::vector<void*> staged, moved;
  std::vector<std::unique_ptr<Event>> arrived, computed;
  for (int i = 0; i < kChunks; i++) {
    src.push_back(pattern(kBytes, static_cast<uint8_t>(i)));
    dst.emplace_back(kBytes, 0);
    staged.push_back(*b->allocate(kBytes, "staged"));
    moved.push_back(*b->allocate(kBytes, "moved"));
    arrived.push_back(b->create_event());
    computed.push_back(b->create_event());
  }
  for (int i = 0; i < kChunks; i++) {
    ASSERT_TRUE(b->copy_to_device(staged[i], src[i].data(), kBytes).is_ok());
    ASSERT_TRUE(b->record(*arrived[i], Stream::h2d).is_ok());
    ASSERT_TRUE(b->wait(Stream::compute, *arrived[i]).is_ok());
    ASSERT_TRUE(b->copy_on_device(moved[i], staged[i], kBytes).is_ok());
    ASSERT_TRUE(b->fill_zero(staged[i], kBytes).is_ok());  // compute stream: after the copy above
    ASSERT_TRUE(b->record(*computed[i], Stream::compute).is_ok());
    ASSERT_TRUE(b->wait(Stream::d2h, *computed[i]).is_ok());
    ASSERT_TRUE(b->copy_to_host(dst[i].data(), moved[i], kBytes).is_ok());
  }
  ASSERT_TRUE(b->synchronize_all().is_ok());
  for (int i = 0; i < kChunks; i++) {
    EXPECT_EQ(dst[i], src[i]) << "chunk " << i;
    const auto* z = static_cast<const uint8_t*>(staged[i]);
    EXPECT_EQ(std::count(z, z + kBytes, 0), static_cast<long>(kBytes)) << "chunk " << i << " staging zeroed";
  }
}

TEST(CpuBackend, RangesOutsideLiveBlocksAreRejectedAndQueueNothing) {
  auto b = make_cpu();
  auto* block = static_cast<uint8_t*>(*b->allocate(4096, "block"));
  auto* neighbour = static_cast<uint8_t*>(*b->allocate(4096, "neighbour"));
  std::memset(block, 0x11, 4096);
  std::memset(neighbour, 0x22, 4096);
  std::vector<uint8_t> host(8192, 0xAB);

  Status overrun = b->copy_to_device(block + 4000, host.data(), 200);
  EXPECT_EQ(overrun.code(), Code::invalid_argument);
  EXPECT_NE(overrun.message().find("copy_to_device destination"), std::string::npos) << overrun.to_string();
  EXPECT_NE(overrun.message().find("not inside one live block"), std::string::npos) << overrun.to_string();
  EXPECT_EQ(b->copy_to_host(host.data(), host.data() + 10, 16).code(), Code::invalid_argument)
      << "host memory is not device memory";
  EXPECT_EQ(b->copy_on_device(neighbour, block, 8192).code(), Code::invalid_argument) << "spans two blocks";
  EXPECT_EQ(b->fill_zero(block, 4097).code(), Code::invalid_argument);
  ASSERT_TRUE(b->release(neighbour).is_ok());
  EXPECT_EQ(b->fill_zero(neighbour, 16).code(), Code::invalid_argument) << "released memory";
  EXPECT_EQ(b->copy_to_device(block, nullptr, 16).code(), Code::invalid_argument) << "null host pointer";
  EXPECT_EQ(b->host_callback(Stream::compute, nullptr).code(), Code::invalid_argument);

  ASSERT_TRUE(b->synchronize_all().is_ok());
  EXPECT_EQ(std::count(block, block + 4096, 0x11), 4096) << "no rejected copy ran";
  EXPECT_EQ(std::count(host.begin(), host.end(), 0xAB), 8192);
}

TEST(CpuBackend, SynchronizeAllDrainsEveryStream) {
  auto b = make_cpu();
  std::atomic<int> done{0};
  constexpr int kPerStream = 20;
  for (int i = 0; i < kPerStream; i++) {
    for (Stream s : {Stream::compute, Stream::h2d, Stream::d2h}) {
      ASSERT_TRUE(b->host_callback(s, [&done] {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        done++;
      }).is_ok());
    }
  }
  ASSERT_TRUE(b->synchronize_all().is_ok());
  EXPECT_EQ(done.load(), 3 * kPerStream);
}

TEST(CpuBackend, AThrowingHostCallbackIsReportedBySynchronize) {
  auto b = make_cpu();
  ASSERT_TRUE(b->host_callback(Stream::h2d, [] { throw std::runtime_error("callback broke"); }).is_ok());
  int after = 0;
  ASSERT_TRUE(b->host_callback(Stream::h2d, [&after] { after = 1; }).is_ok());
  Status s = b->synchronize(Stream::h2d);
  EXPECT_EQ(s.code(), Code::internal);
  EXPECT_NE(s.message().find("callback broke"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("'h2d'"), std::string::npos) << s.to_string();
  EXPECT_EQ(after, 1) << "the stream keeps running";
  auto e = b->create_event();
  ASSERT_TRUE(b->record(*e, Stream::compute).is_ok());
  EXPECT_EQ(b->synchronize(*e).code(), Code::internal) << "the first asynchronous error is sticky";
}

TEST(CpuBackend, DestructionWithPendingWorkRunsItAndJoins) {
  auto done = std::make_shared<std::atomic<int>>(0);
  std::vector<uint8_t> out(1024, 0);
  std::vector<uint8_t> in = pattern(1024, 9);
  {
    auto b = make_cpu();
    void* p = *b->allocate(1024, "p");
    Gate gate;
    ASSERT_TRUE(b->host_callback(Stream::h2d, gate.blocker()).is_ok());
    ASSERT_TRUE(b->copy_to_device(p, in.data(), in.size()).is_ok());
    auto e = b->create_event();
    ASSERT_TRUE(b->record(*e, Stream::h2d).is_ok());
    ASSERT_TRUE(b->wait(Stream::d2h, *e).is_ok());
    ASSERT_TRUE(b->copy_to_host(out.data(), p, out.size()).is_ok());
    for (Stream s : {Stream::compute, Stream::h2d, Stream::d2h}) {
      ASSERT_TRUE(b->host_callback(s, [done] { (*done)++; }).is_ok());
    }
    e.reset();  // events may die before the work that marks them has run
    gate.open();
  }
  EXPECT_EQ(done->load(), 3);
  EXPECT_EQ(out, in);
}

TEST(CpuStream, EnqueueAfterShutdownIsRefused) {
  CpuStream stream("test");
  int ran = 0;
  ASSERT_TRUE(stream.enqueue([&ran] { ran++; }).is_ok());
  stream.shutdown();
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(stream.pending(), 0u);
  Status late = stream.enqueue([&ran] { ran++; });
  EXPECT_EQ(late.code(), Code::failed_precondition);
  EXPECT_NE(late.message().find("'test' is shut down"), std::string::npos) << late.to_string();
  CpuEvent e;
  EXPECT_EQ(e.record(stream).code(), Code::failed_precondition);
  EXPECT_TRUE(e.query()) << "a record that could not be queued leaves nothing to wait for";
  stream.shutdown();  // idempotent
}

}  // namespace
}  // namespace strata
