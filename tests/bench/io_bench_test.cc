// Tests of `strata bench io`'s option checks and of one small real sweep (strata only, no fio),
// which must report a positive throughput for every point it was asked for.
#include "bench/io_bench.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace strata::bench {
namespace {

TEST(IoBench, RefusesMissingOrNonDirectoryPaths) {
  IoBenchOptions o;
  o.paths = {"/nonexistent-strata-dir"};
  StatusOr<IoBenchReport> r = run_io_bench(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::not_found);
  EXPECT_NE(r.status().message().find("--path /nonexistent-strata-dir"), std::string::npos) << r.status().message();

  o.paths = {"/etc/hostname"};
  r = run_io_bench(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::invalid_argument);
  EXPECT_NE(r.status().message().find("is not a directory"), std::string::npos) << r.status().message();
}

TEST(IoBench, RefusesBlocksThatAreNotWholePages) {
  IoBenchOptions o;
  o.paths = {STRATA_BINARY_DIR};
  o.blocks = {1000};
  StatusOr<IoBenchReport> r = run_io_bench(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::invalid_argument);
  EXPECT_NE(r.status().message().find("multiples of 4 KiB"), std::string::npos) << r.status().message();
}

TEST(IoBench, SmallSweepReportsEveryPointAndRemovesItsFile) {
  const std::string dir = std::string(STRATA_BINARY_DIR) + "/io-bench-test";
  std::filesystem::create_directories(dir);
  IoBenchOptions o;
  o.paths = {dir};
  o.size = 8ull << 20;
  o.blocks = {1ull << 20};
  o.queue_depths = {1, 4};
  o.fio = false;
  StatusOr<IoBenchReport> r = run_io_bench(o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->points.size(), 4u);  // read and write x two queue depths
  for (const IoBenchPoint& p : r->points) {
    EXPECT_EQ(p.block_bytes, 1ull << 20);
    EXPECT_GT(p.strata.gbps, 0.0);
    EXPECT_GT(p.strata.iops, 0.0);
    EXPECT_FALSE(p.fio.has_value());
  }
  // In a run directory of its own under the path, removed with it.
  EXPECT_EQ(r->file.rfind(dir + "/strata-run-", 0), 0u) << r->file;
  EXPECT_FALSE(std::filesystem::exists(r->file)) << "the test file must be removed";
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "the run directory must be removed";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::bench
