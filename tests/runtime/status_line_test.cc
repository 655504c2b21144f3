// The terminal status line's text (runtime/status_line.h): cut to one line and to the terminal's
// width minus one column, so that redrawing it never wraps. The drawing itself is tested under a
// pseudo-terminal (tests/tools/train_progress_cli_test.cc).
#include "runtime/status_line.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(StatusLineTest, TextFitsTheTerminal) {
  EXPECT_EQ(fit_status_text("step 1/10 | loss 5.5", 80), "step 1/10 | loss 5.5");
  EXPECT_EQ(fit_status_text("0123456789", 10), "012345678");  // the last column stays free
  EXPECT_EQ(fit_status_text("0123456789", 11), "0123456789");
  EXPECT_EQ(fit_status_text("0123456789", 0), "0123456789");  // width unknown: as is
  EXPECT_EQ(fit_status_text("first\nsecond", 80), "first");
}

}  // namespace
}  // namespace strata
