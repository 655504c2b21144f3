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

TEST(BenchUtil, SpreadIsMedianMinAndMax) {
  const Spread s = spread({3.0, 1.0, 2.0, 10.0});
  EXPECT_EQ(s.median, 3.0);  // the upper middle of an even count, as median()
  EXPECT_EQ(s.min, 1.0);
  EXPECT_EQ(s.max, 10.0);
  const Spread none = spread({});
  EXPECT_EQ(none.median, 0.0);
  EXPECT_EQ(none.min, 0.0);
  EXPECT_EQ(none.max, 0.0);
}

TEST(BenchUtil, ChooseBackendFollowsDeviceAndSaysWhy) {
  StatusOr<BackendChoice> cpu = choose_backend("cpu");
  ASSERT_TRUE(cpu.is_ok());
  EXPECT_EQ(cpu->kind, BackendKind::cpu);
  EXPECT_EQ(cpu->why, "--device cpu");
  StatusOr<BackendChoice> cuda = choose_backend("cuda");
  ASSERT_TRUE(cuda.is_ok());
  EXPECT_EQ(cuda->kind, BackendKind::cuda);  // chosen as asked; creating it is where a missing GPU fails
  StatusOr<BackendChoice> autos = choose_backend("auto");
  ASSERT_TRUE(autos.is_ok());
  EXPECT_EQ(autos->kind, cuda_available() ? BackendKind::cuda : BackendKind::cpu);
  EXPECT_EQ(autos->why.rfind("--device auto", 0), 0u) << autos->why;
  StatusOr<BackendChoice> bad = choose_backend("tpu");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), Code::invalid_argument);
  EXPECT_NE(bad.status().message().find("--device tpu: expected cpu, cuda or auto"), std::string::npos);
}

}  // namespace
}  // namespace strata::bench
