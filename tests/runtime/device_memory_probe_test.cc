// Tests of the NVML memory probe's failure paths that need no GPU: no driver library, a library
// that is not NVML, no bus id. The reading itself is tested on a GPU (device_memory_probe_gpu_test).
#include "runtime/device_memory_probe.h"

#include <dlfcn.h>

#include <string>

#include <gtest/gtest.h>

namespace strata {
namespace {

void expect_message_has(const Status& s, const std::string& text) {
  EXPECT_NE(s.message().find(text), std::string::npos) << "'" << text << "' not in: " << s.message();
}

TEST(DeviceMemoryProbeTest, WithoutTheDriverLibraryItIsUnavailableNamingIt) {
  if (void* nvml = dlopen(std::string(kNvmlLibrary).c_str(), RTLD_NOW | RTLD_LOCAL); nvml != nullptr) {
    dlclose(nvml);
    GTEST_SKIP() << kNvmlLibrary << " is installed here; device_memory_probe_gpu_test covers a real driver";
  }
  const auto probe = DeviceMemoryProbe::open("0000:17:00.0");
  ASSERT_FALSE(probe.is_ok());
  EXPECT_EQ(probe.status().code(), Code::unavailable);
  expect_message_has(probe.status(), "libnvidia-ml.so.1 not found");
  expect_message_has(probe.status(), "no NVIDIA driver");
}

TEST(DeviceMemoryProbeTest, AMissingLibraryIsUnavailableNamingIt) {
  const auto probe = DeviceMemoryProbe::open("0000:17:00.0", "libstrata-no-such-nvml.so.1");
  ASSERT_FALSE(probe.is_ok());
  EXPECT_EQ(probe.status().code(), Code::unavailable);
  expect_message_has(probe.status(), "libstrata-no-such-nvml.so.1 not found");
}

TEST(DeviceMemoryProbeTest, ALibraryThatIsNotNvmlIsUnavailableNamingTheEntryPoint) {
  // libm loads, but exports no NVML entry point.
  const auto probe = DeviceMemoryProbe::open("0000:17:00.0", "libm.so.6");
  ASSERT_FALSE(probe.is_ok());
  EXPECT_EQ(probe.status().code(), Code::unavailable);
  expect_message_has(probe.status(), "libm.so.6 has no nvmlInit_v2");
}

TEST(DeviceMemoryProbeTest, AnEmptyBusIdIsInvalid) {
  const auto probe = DeviceMemoryProbe::open("");
  ASSERT_FALSE(probe.is_ok());
  EXPECT_EQ(probe.status().code(), Code::invalid_argument);
  expect_message_has(probe.status(), "PCI bus id");
}

}  // namespace
}  // namespace strata
