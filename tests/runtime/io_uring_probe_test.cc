// probe_io_uring on this machine: its answer agrees with kernel.io_uring_disabled, and where
// io_uring is enabled for everyone it works (a NOP round trip).
#include "runtime/io_uring_probe.h"

#include <fstream>

#include <gtest/gtest.h>

namespace strata {
namespace {

int disabled_setting_from_proc() {
  std::ifstream in("/proc/sys/kernel/io_uring_disabled");
  int v = -1;
  if (!(in >> v)) return -1;
  return v;
}

TEST(IoUringProbe, AgreesWithKernelSetting) {
  IoUringProbe probe = probe_io_uring();
  const int setting = disabled_setting_from_proc();
  EXPECT_EQ(probe.kernel_disabled_setting, setting);
  if (setting == 2) {
    EXPECT_FALSE(probe.works);
    EXPECT_NE(probe.reason.find("io_uring_disabled=2"), std::string::npos) << probe.reason;
  }
  if (probe.works) {
    EXPECT_TRUE(probe.reason.empty()) << probe.reason;
  } else {
    EXPECT_FALSE(probe.reason.empty());
  }
}

TEST(IoUringProbe, WorksOnThisMachine) {
  const int setting = disabled_setting_from_proc();
  if (setting > 0) GTEST_SKIP() << "kernel.io_uring_disabled=" << setting << " here";
  IoUringProbe probe = probe_io_uring();
  EXPECT_TRUE(probe.works) << probe.reason;
}

TEST(IoUringProbe, RepeatedProbesAgree) {
  IoUringProbe a = probe_io_uring();
  IoUringProbe b = probe_io_uring();
  EXPECT_EQ(a.works, b.works);
  EXPECT_EQ(a.reason, b.reason);
}

}  // namespace
}  // namespace strata
