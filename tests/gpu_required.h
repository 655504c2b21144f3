// How a `gpu` test that finds no usable GPU ends: skipped with the reason, or, where the
// environment sets STRATA_REQUIRE_GPU=1 (tools/gpu_check.sh does), failed with that reason, so a run
// on a GPU machine whose driver or device is unusable cannot look green with nothing run.
// Not for CPU tests that skip for other reasons (a missing SIMD level, /dev/full, ...).
#pragma once

#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

namespace strata::testing {

// True when STRATA_REQUIRE_GPU is set to anything but "" or "0".
inline bool gpu_required() {
  const char* v = std::getenv("STRATA_REQUIRE_GPU");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace strata::testing

// Ends the current test (or SetUp) for want of a GPU: skip, or fail under STRATA_REQUIRE_GPU.
#define STRATA_GPU_SKIP(why)                                                              \
  do {                                                                                    \
    if (::strata::testing::gpu_required())                                                \
      GTEST_FAIL() << "STRATA_REQUIRE_GPU is set, but this gpu test cannot run: " << (why); \
    GTEST_SKIP() << (why);                                                                \
  } while (0)
