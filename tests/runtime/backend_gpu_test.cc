// CUDA backend on a real GPU (CTest label `gpu`): a 64 MiB round trip through the three streams
// ordered by events, the budget's out-of-memory error, pinned memory registered with the driver, fp32 GEMM
// precision with BackendOptions::tf32 on and off against float64, fp16 activations through
// Backend::ops(), and the refusal of integer activations. Each test skips with the reason when no
// CUDA device is visible.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_required.h"

#include "kernels/cpu/half.h"
#include "runtime/backend.h"
#include "runtime/pinned_pool.h"

namespace strata {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

std::unique_ptr<Backend> make_cuda(uint64_t budget, bool tf32 = false) {
  BackendOptions options;
  options.kind = BackendKind::cuda;
  options.memory_budget = budget;
  options.tf32 = tf32;
  StatusOr<std::unique_ptr<Backend>> b = make_backend(options);
  EXPECT_TRUE(b.is_ok()) << b.status().to_string();
  return b.is_ok() ? std::move(b).value() : nullptr;
}

std::vector<float> uniform(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A device copy of `values` stored as `dt` (fp32 or fp16, rounded as kernels/cpu/half.h rounds),
// complete when this returns.
void* upload(Backend& b, const std::vector<float>& values, DType dt) {
  std::vector<uint8_t> bytes(values.size() * dtype_size(dt));
  if (dt == DType::f16) {
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t h = kernels::float_to_fp16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  } else {
    std::memcpy(bytes.data(), values.data(), bytes.size());
  }
  StatusOr<void*> p = b.allocate(bytes.size(), "test input");
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  if (!p.is_ok()) return nullptr;
  EXPECT_TRUE(b.copy_to_device(*p, bytes.data(), bytes.size()).is_ok());
  EXPECT_TRUE(b.synchronize(Stream::h2d).is_ok());
  return *p;
}

// n elements of `dt` at `device` as floats, after the compute stream's work so far.
std::vector<float> download(Backend& b, const void* device, size_t n, DType dt) {
  std::vector<uint8_t> bytes(n * dtype_size(dt));
  EXPECT_TRUE(b.synchronize(Stream::compute).is_ok());
  EXPECT_TRUE(b.copy_to_host(bytes.data(), device, bytes.size()).is_ok());
  EXPECT_TRUE(b.synchronize(Stream::d2h).is_ok());
  std::vector<float> out(n);
  if (dt == DType::f16) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      out[i] = kernels::fp16_to_float(h);
    }
  } else {
    std::memcpy(out.data(), bytes.data(), bytes.size());
  }
  return out;
}

// want (N, OC) = inp (N, C) @ weight (OC, C)^T (+ bias) in float64.
std::vector<double> matmul_reference(const std::vector<float>& inp, const std::vector<float>& weight,
                                     const std::vector<float>* bias, int64_t N, int64_t C, int64_t OC) {
  std::vector<double> want(N * OC);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < OC; ++o) {
      double acc = bias != nullptr ? (*bias)[o] : 0.0;
      for (int64_t c = 0; c < C; ++c) acc += static_cast<double>(inp[n * C + c]) * weight[o * C + c];
      want[n * OC + o] = acc;
    }
  }
  return want;
}

TEST(CudaBackend, RoundTripOf64MiBAcrossTheThreeStreams) {
  std::string why;
  if (!cuda_available(&why)) STRATA_GPU_SKIP(why);
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
  if (!cuda_available(&why)) STRATA_GPU_SKIP(why);
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
  if (!cuda_available(&why)) STRATA_GPU_SKIP(why);
  PinnedPoolOptions options;
  options.slab_bytes = 4 * kMiB;
  auto pool = std::move(PinnedPool::create(options)).value();
  EXPECT_EQ(pool->kind(), PinnedKind::cuda_host);
  // The slab is mapped here, faulted in on every core and registered with the driver: a block of
  // fresh pages is zero without being written, and the driver's copies take it.
  PinnedBuffer b = std::move(pool->acquire(kMiB, PinnedFill::zero)).value();
  EXPECT_EQ(pool->stats().kind, PinnedKind::cuda_host) << "the driver did not register the slab (see the warning)";
  EXPECT_EQ(pool->stats().zeroed_bytes, 0u);
  EXPECT_TRUE(std::all_of(b.data(), b.data() + b.size(), [](std::byte x) { return x == std::byte{0}; }));
  for (uint64_t i = 0; i < b.size(); ++i) b.data()[i] = std::byte(i * 7 + 3);
  BackendOptions bo;
  bo.kind = BackendKind::cuda;
  bo.memory_budget = 64 * kMiB;
  auto backend = make_backend(bo);
  ASSERT_TRUE(backend.is_ok()) << backend.status().to_string();
  void* device = std::move((*backend)->allocate(kMiB, "pinned round trip")).value();
  PinnedBuffer back = std::move(pool->acquire(kMiB)).value();
  ASSERT_TRUE((*backend)->copy_to_device(device, b.data(), kMiB, Stream::h2d).is_ok());
  ASSERT_TRUE((*backend)->synchronize(Stream::h2d).is_ok());
  ASSERT_TRUE((*backend)->copy_to_host(back.data(), device, kMiB, Stream::d2h).is_ok());
  ASSERT_TRUE((*backend)->synchronize(Stream::d2h).is_ok());
  EXPECT_EQ(std::memcmp(back.data(), b.data(), kMiB), 0);
  ASSERT_TRUE((*backend)->release(device).is_ok());
}

TEST(CudaBackend, DevicesAndVersionsAreListed) {
  std::string why;
  if (!cuda_available(&why)) STRATA_GPU_SKIP(why);
  auto devices = list_cuda_devices(&why);
  ASSERT_FALSE(devices.empty()) << why;
  EXPECT_GT(devices[0].total_memory, 0u);
  auto versions = cuda_library_versions();
  ASSERT_EQ(versions.size(), 4u);
  EXPECT_NE(versions[1].second, "none");
}

// ||got - want||_2 / ||want||_2.
double normwise_error(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

// out (N, OC) = inp (N, C) @ weight (OC, C)^T in fp32 through Backend::ops() of a CUDA backend made
// with `tf32`.
std::vector<float> cuda_fp32_matmul(bool tf32, const std::vector<float>& inp, const std::vector<float>& weight,
                                    int64_t N, int64_t C, int64_t OC) {
  auto b = make_cuda(64 * kMiB, tf32);
  if (b == nullptr) return {};
  void* d_inp = upload(*b, inp, DType::f32);
  void* d_weight = upload(*b, weight, DType::f32);
  void* d_out = *b->allocate(N * OC * sizeof(float), "out");
  const Status s = b->ops().matmul_forward(DType::f32, d_out, d_inp, d_weight, nullptr, N, C, OC);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return download(*b, d_out, N * OC, DType::f32);
}

TEST(CudaBackend, Tf32OptionSetsFp32GemmPrecision) {
  std::string why;
  if (!cuda_available(&why)) STRATA_GPU_SKIP(why);
  const int64_t N = 256, C = 2048, OC = 256;
  const std::vector<float> inp = uniform(N * C, 1), weight = uniform(OC * C, 2);
  const std::vector<double> want = matmul_reference(inp, weight, nullptr, N, C, OC);
  const std::vector<float> full = cuda_fp32_matmul(false, inp, weight, N, C, OC);
  const std::vector<float> tf32 = cuda_fp32_matmul(true, inp, weight, N, C, OC);
  ASSERT_EQ(full.size(), want.size());
  ASSERT_EQ(tf32.size(), want.size());
  const double full_error = normwise_error(full, want), tf32_error = normwise_error(tf32, want);
  // Full fp32: each output is a 2048-term fp32 sum; its round-off is ~2e-6 of the output's norm.
  EXPECT_LT(full_error, 1e-5) << "tf32 = false must be full fp32";
  // TF32 keeps 10 of the inputs' 23 mantissa bits (2^-11 relative when rounded, 2^-10 truncated):
  // ~4e-4 normwise when rounded, ~1e-3 when truncated (a bias toward zero); 4e-3 bounds both.
  EXPECT_LT(tf32_error, 4e-3);
  const char* override_env = std::getenv("NVIDIA_TF32_OVERRIDE");
  const bool vetoed = override_env != nullptr && std::string_view(override_env) == "0";
  const std::vector<DeviceDescription> devices = list_cuda_devices(&why);
  ASSERT_FALSE(devices.empty()) << why;
  const int cc = devices[0].compute_capability;  // make_backend's default device_index 0
  if (cc >= 80 && !vetoed) {
    EXPECT_GT(tf32_error, 1e-5) << "tf32 = true on sm_" << cc << " but the GEMM ran in full fp32";
  } else {
    EXPECT_LT(tf32_error, 1e-5) << "no TF32 here (pre-sm_80 or NVIDIA_TF32_OVERRIDE=0): full fp32 expected";
  }
}

TEST(CudaBackend, RunsFp16Activations) {
  std::string why;
  if (!cuda_available(&why)) STRATA_GPU_SKIP(why);
  auto b = make_cuda(16 * kMiB);
  ASSERT_NE(b, nullptr);
  const int64_t N = 33, C = 64, OC = 17;
  const auto to_fp16 = [](std::vector<float> v) {
    for (float& x : v) x = kernels::fp16_to_float(kernels::float_to_fp16(x));
    return v;
  };
  const std::vector<float> inp = to_fp16(uniform(N * C, 3)), weight = to_fp16(uniform(OC * C, 4));
  const std::vector<float> bias = to_fp16(uniform(OC, 5));
  void* d_inp = upload(*b, inp, DType::f16);
  void* d_weight = upload(*b, weight, DType::f16);
  void* d_bias = upload(*b, bias, DType::f16);
  void* d_out = *b->allocate(N * OC * 2, "out");
  Status s = b->ops().matmul_forward(DType::f16, d_out, d_inp, d_weight, d_bias, N, C, OC);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const std::vector<float> out = download(*b, d_out, N * OC, DType::f16);
  s = b->ops().gelu_forward(DType::f16, d_out, d_out, N * OC);  // in place
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const std::vector<float> activated = download(*b, d_out, N * OC, DType::f16);

  // Exact inputs, fp32 arithmetic, one rounding to fp16 per stored element: within half an ulp,
  // 2^-11 relative (plus fp32 noise). bf16 storage (2^-8) or a second rounding would exceed this.
  const std::vector<double> want = matmul_reference(inp, weight, &bias, N, C, OC);
  for (int64_t i = 0; i < N * OC; ++i) {
    ASSERT_NEAR(out[i], want[i], 1e-5 + std::ldexp(std::fabs(want[i]), -11)) << "matmul element " << i;
    const double x = out[i];
    const double gelu = 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    ASSERT_NEAR(activated[i], gelu, 1e-5 + std::ldexp(std::fabs(gelu), -11)) << "gelu element " << i;
  }
}

TEST(CudaBackend, RefusesIntegerActivations) {
  std::string why;
  if (!cuda_available(&why)) STRATA_GPU_SKIP(why);
  auto b = make_cuda(16 * kMiB);
  ASSERT_NE(b, nullptr);
  void* x = *b->allocate(64, "x");
  void* y = *b->allocate(64, "y");
  const Status s = b->ops().gelu_forward(DType::i32, y, x, 16);
  EXPECT_EQ(s.code(), Code::invalid_argument) << s.to_string();
  EXPECT_NE(s.message().find("gelu_forward: activations in i32: the CUDA backend computes in fp32, bf16 or fp16"),
            std::string::npos)
      << s.to_string();
}

}  // namespace
}  // namespace strata
