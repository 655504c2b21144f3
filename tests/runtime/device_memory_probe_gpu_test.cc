// The NVML memory probe on a real GPU (CTest label `gpu`): it finds the device by the bus id the
// CUDA backend reports, its counters are sane and follow a real allocation, and an absent bus id is
// not_found. Each test skips with the reason when no CUDA device is visible.
#include "runtime/device_memory_probe.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_required.h"

#include "runtime/backend.h"

namespace strata {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

// The first visible GPU, or a skip reason.
bool first_gpu(DeviceDescription* device, std::string* why) {
  if (!cuda_available(why)) return false;
  const std::vector<DeviceDescription> devices = list_cuda_devices(why);
  if (devices.empty()) return false;
  *device = devices.front();
  return true;
}

TEST(DeviceMemoryProbeGpu, ReadsUsedAndTotalOfTheBackendsDevice) {
  DeviceDescription device;
  std::string why;
  if (!first_gpu(&device, &why)) STRATA_GPU_SKIP(why);
  ASSERT_FALSE(device.pci_bus_id.empty());
  auto probe = DeviceMemoryProbe::open(device.pci_bus_id);
  ASSERT_TRUE(probe.is_ok()) << probe.status().to_string();
  EXPECT_EQ((*probe)->pci_bus_id(), device.pci_bus_id);

  const StatusOr<DeviceMemory> before = (*probe)->read();
  ASSERT_TRUE(before.is_ok()) << before.status().to_string();
  EXPECT_GT(before->total, 0u);
  EXPECT_LE(before->used, before->total);
  // NVML and the CUDA runtime count the same memory, give or take the driver's reservations.
  EXPECT_GT(before->total, device.total_memory / 10 * 9);
  EXPECT_LT(before->total, device.total_memory / 10 * 11);

  // A 2 GiB arena (cudaMalloc'd at creation) and its CUDA context show in NVML's "used".
  BackendOptions options;
  options.kind = BackendKind::cuda;
  options.memory_budget = 2 * kGiB;
  StatusOr<std::unique_ptr<Backend>> backend = make_backend(options);
  ASSERT_TRUE(backend.is_ok()) << backend.status().to_string();
  const StatusOr<DeviceMemory> after = (*probe)->read();
  ASSERT_TRUE(after.is_ok()) << after.status().to_string();
  EXPECT_LE(after->used, after->total);
  EXPECT_EQ(after->total, before->total);
  EXPECT_GE(after->used, before->used + 2 * kGiB) << "before " << before->used << ", after " << after->used;
}

TEST(DeviceMemoryProbeGpu, ABusIdWithNoGpuIsNotFound) {
  DeviceDescription device;
  std::string why;
  if (!first_gpu(&device, &why)) STRATA_GPU_SKIP(why);
  const auto probe = DeviceMemoryProbe::open("0000:fe:1f.7");
  ASSERT_FALSE(probe.is_ok());
  EXPECT_EQ(probe.status().code(), Code::not_found) << probe.status().to_string();
  EXPECT_NE(probe.status().message().find("0000:fe:1f.7"), std::string::npos) << probe.status().message();
}

TEST(DeviceMemoryProbeGpu, TwoProbesOfOneGpuCoexist) {
  DeviceDescription device;
  std::string why;
  if (!first_gpu(&device, &why)) STRATA_GPU_SKIP(why);
  auto first = DeviceMemoryProbe::open(device.pci_bus_id);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  {
    auto second = DeviceMemoryProbe::open(device.pci_bus_id);
    ASSERT_TRUE(second.is_ok()) << second.status().to_string();
    ASSERT_TRUE((*second)->read().is_ok());
  }
  // The second probe's nvmlShutdown left the first one's NVML reference alive.
  const StatusOr<DeviceMemory> m = (*first)->read();
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_GT(m->total, 0u);
}

}  // namespace
}  // namespace strata
