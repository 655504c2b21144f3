// Tests of the shared bench helpers: median and running a peer command.
#include "bench/bench_util.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata::bench {
namespace {

TEST(BenchUtil, MedianSortsAndTakesTheMiddle) {
  EXPECT_EQ(median({}), 0.0);
  EXPECT_EQ(median({3.0}), 3.0);
  EXPECT_EQ(median({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 3.0);  // the upper of the two middle values
}

TEST(BenchUtil, RunCommandCapturesStdoutLineByLine) {
  std::vector<std::string> lines;
  ASSERT_TRUE(run_command_lines("printf 'a\\nbb\\nccc'", [&](std::string_view l) { lines.emplace_back(l); }).is_ok());
  EXPECT_EQ(lines, (std::vector<std::string>{"a", "bb", "ccc"}));
  StatusOr<std::string> out = run_command("echo hello; echo world");
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(*out, "hello\nworld\n");
}

TEST(BenchUtil, AFailingCommandNamesItselfAndItsExitStatus) {
  StatusOr<std::string> out = run_command("exit 3");
  ASSERT_FALSE(out.is_ok());
  EXPECT_EQ(out.status().code(), Code::unavailable);
  EXPECT_NE(out.status().message().find("`exit 3` exited with status 3"), std::string::npos) << out.status().message();
}

}  // namespace
}  // namespace strata::bench
