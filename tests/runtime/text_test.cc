// trim and to_lower, the helpers under the units and config parsers.
#include "runtime/text.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(Trim, StripsWhitespaceAtBothEndsOnly) {
  EXPECT_EQ(trim("  8 MiB \t\n"), "8 MiB");
  EXPECT_EQ(trim("gpu_mem"), "gpu_mem");
  EXPECT_EQ(trim("   "), "");
  EXPECT_EQ(trim(""), "");
}

TEST(ToLower, LowersAsciiOnly) {
  EXPECT_EQ(to_lower("GiB"), "gib");
  EXPECT_EQ(to_lower("STRATA_GPU_MEM-1"), "strata_gpu_mem-1");
  EXPECT_EQ(to_lower("\xc3\x89t\xc3\xa9"), "\xc3\x89t\xc3\xa9");  // UTF-8 bytes pass through
}

}  // namespace
}  // namespace strata
