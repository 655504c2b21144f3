// CUDA backend on a real GPU (CTest label `gpu`): a 64 MiB round trip through the three streams
// ordered by events, the budget's out-of-memory error, and cudaHostAlloc'd pinned memory. Each
// test skips with the reason when no CUDA device is visible.
#include <algorithm>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/backend.h"
#include "runtime/pinned_pool.h"

namespace strata {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

std::unique_ptr<Backend> make_cuda(uint64_t budget) {
  BackendOptions options;
  options.kind = BackendKind::cuda;
  options.memory_budget = budget;
  StatusOr<std::unique_ptr<Backend>> b = make_backend(options);
  EXPECT_TRUE(b.is_ok()) << b.status().to_string();
  return b.is_ok() ? std::move(b).value() : nullptr;
}

TEST(CudaBackend, RoundTripOf64MiBAcrossTheThreeStreams) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  auto b = make_cuda(256 * kMiB);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->kind(), BackendKind::cuda);
  EXPECT_GT(b->device().compute_capability, 0);
  EXPECT_FALSE(b->device().pci_bus_id.empty());

  PinnedPoolOptions pool_options;
  auto pool = std::move(PinnedPool::create(pool_options)).value();
  const uint64_t n = 64 * kMiB;
  PinnedBuffer src = std::move(pool->acquire(n)).value();
  PinnedBuffer dst = std::move(pool->acquire(n)).value();
  auto* s = src.as<uint32_t>();
  for (uint64_t i = 0; i < n / 4; i++) s[i] = static_cast<uint32_t>(i * 2654435761u);
  std::memset(dst.data(), 0, n);

  void* staged = *b->allocate(n, "staged");
  void* moved = *b->allocate(n, "moved");
  auto arrived = b->create_event(), computed = b->create_event();
  EXPECT_TRUE(b->query(*arrived));
  ASSERT_TRUE(b->copy_to_device(staged, src.data(), n, Stream::h2d).is_ok());
  ASSERT_TRUE(b->record(*arrived, Stream::h2d).is_ok());
  ASSERT_TRUE(b->wait(Stream::compute, *arrived).is_ok());
  ASSERT_TRUE(b->copy_on_device(moved, staged, n, Stream::compute).is_ok());
  ASSERT_TRUE(b->fill_zero(staged, n, Stream::compute).is_ok());
  ASSERT_TRUE(b->record(*computed, Stream::compute).is_ok());
  ASSERT_TRUE(b->wait(Stream::d2h, *computed).is_ok());
  ASSERT_TRUE(b->copy_to_host(dst.data(), moved, n, Stream::d2h).is_ok());
  bool callback_ran = false;
  ASSERT_TRUE(b->host_callback(Stream::d2h, [&callback_ran] { callback_ran = true; }).is_ok());
  ASSERT_TRUE(b->synchronize_all().is_ok());
  EXPECT_TRUE(b->query(*computed));
  EXPECT_TRUE(callback_ran);
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), n), 0);

  ASSERT_TRUE(b->copy_to_host(dst.data(), staged, n).is_ok());
  ASSERT_TRUE(b->synchronize(Stream::d2h).is_ok());
  EXPECT_EQ(std::count(dst.as<uint8_t>(), dst.as<uint8_t>() + n, 0), static_cast<long>(n));
  ASSERT_TRUE(b->release(staged).is_ok());
  ASSERT_TRUE(b->release(moved).is_ok());
}

TEST(CudaBackend, AllocationOverBudgetIsOutOfMemory) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  auto b = make_cuda(64 * kMiB);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->allocate(48 * kMiB, "weights").is_ok());
  StatusOr<void*> r = b->allocate(32 * kMiB, "activations");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::out_of_memory);
  EXPECT_NE(r.status().message().find("gpu memory budget exceeded: 'activations'"), std::string::npos) << r.status().to_string();
  int host = 0;
  EXPECT_EQ(b->copy_to_host(&host, &host, 4).code(), Code::invalid_argument);
}

TEST(CudaBackend, PinnedPoolUsesCudaHostMemory) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  PinnedPoolOptions options;
  options.slab_bytes = 4 * kMiB;
  auto pool = std::move(PinnedPool::create(options)).value();
  EXPECT_EQ(pool->kind(), PinnedKind::cuda_host);
  PinnedBuffer b = std::move(pool->acquire(kMiB)).value();
  std::memset(b.data(), 1, b.size());
  EXPECT_EQ(pool->stats().kind, PinnedKind::cuda_host);
}

TEST(CudaBackend, DevicesAndVersionsAreListed) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  auto devices = list_cuda_devices(&why);
  ASSERT_FALSE(devices.empty()) << why;
  EXPECT_GT(devices[0].total_memory, 0u);
  auto versions = cuda_library_versions();
  ASSERT_EQ(versions.size(), 4u);
  EXPECT_NE(versions[1].second, "none");
}

}  // namespace
}  // namespace strata
