// `strata clean` run as a user would: the swap directory of a crashed run (its lock file held by
// nobody) is listed by --dry-run and removed by a real run with the space it freed; a live run's
// directory (its lock held, here by this test process) and a leftover holding a stranger's file
// are left alone; no path is exit 2, a path that is not a directory exit 1.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "offload/run_dir.h"
#include "tests/tools/run_cli.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::run_cli;

class CleanCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(STRATA_BINARY_DIR) / "test-scratch" / ("clean_cli." + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(CleanCli, RemovesACrashedRunsSwapDirectoryButNeverALiveOne) {
  const fs::path dead = dir_ / "strata-run-999999-0";
  ASSERT_EQ(::mkdir(dead.c_str(), 0700), 0);
  { std::ofstream(dead / "lock") << "pid 999999\nstarted 1\n"; }
  { std::ofstream(dead / "swap.bin") << std::string(20000, 'x'); }
  const fs::path odd = dir_ / "strata-run-999998-0";
  ASSERT_EQ(::mkdir(odd.c_str(), 0700), 0);
  { std::ofstream(odd / "lock") << "pid 999998\n"; }
  { std::ofstream(odd / "notes.txt") << "mine"; }
  auto live = RunDir::create(dir_.string());
  ASSERT_TRUE(live.is_ok()) << live.status().to_string();
  { std::ofstream((*live)->file("swap.bin")) << "in use"; }

  auto dry = run_cli({"clean", "--dry-run", dir_.string()});
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_NE(dry.out.find(dead.string() + ": left by a crashed run, would free"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find((*live)->path() + ": in use by a live run, left alone"), std::string::npos) << dry.out;
  EXPECT_TRUE(fs::exists(dead / "swap.bin"));

  auto real = run_cli({"clean", dir_.string()});
  ASSERT_EQ(real.exit_code, 0) << real.err;
  EXPECT_NE(real.out.find(dead.string() + ": left by a crashed run, removed"), std::string::npos) << real.out;
  EXPECT_NE(real.out.find(odd.string() + ": left by a crashed run but holds files strata did not create"),
            std::string::npos) << real.out;
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(odd / "notes.txt"));
  EXPECT_TRUE(fs::exists((*live)->file("swap.bin")));
  EXPECT_TRUE(fs::exists((*live)->file("lock")));

  // The default path comes from STRATA_NVME_PATH; nothing left to remove frees 0 B.
  auto env = run_cli({"clean"}, {"STRATA_NVME_PATH=" + dir_.string()});
  EXPECT_EQ(env.exit_code, 0) << env.err;
  EXPECT_NE(env.out.find("0 B freed"), std::string::npos) << env.out;
}

TEST_F(CleanCli, NoPathIsAUsageErrorAndAFileIsAFailure) {
  auto none = run_cli({"clean"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("STRATA_NVME_PATH"), std::string::npos) << none.err;
  { std::ofstream(dir_ / "file") << "x"; }
  auto file = run_cli({"clean", (dir_ / "file").string()});
  EXPECT_EQ(file.exit_code, 1);
  EXPECT_NE(file.err.find("is not a directory"), std::string::npos) << file.err;
}

}  // namespace
}  // namespace strata
