// DirLock (runtime/dir_lock.h): an exclusive holder refuses every other taker, naming its pid,
// command line and mode; shared holders coexist and refuse a writer; the last holder to let go
// removes the file; a lock file left by a dead process is taken over and its line dropped. Two
// acquires in one process are two open file descriptions, so flock treats them as two processes.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "runtime/dir_lock.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

class DirLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::path(::testing::TempDir()) / ("dir_lock." + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string lock_path() const { return dir_ + "/lock"; }
  std::string dir_;
};

bool mentions(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_F(DirLockTest, AnExclusiveHolderRefusesEveryOtherTakerNamingItself) {
  StatusOr<DirLock> writer = DirLock::acquire(dir_, "lock", LockMode::exclusive);
  ASSERT_TRUE(writer.is_ok()) << writer.status().to_string();
  EXPECT_EQ(writer->path(), lock_path());
  for (const LockMode mode : {LockMode::exclusive, LockMode::shared}) {
    const StatusOr<DirLock> other = DirLock::acquire(dir_, "lock", mode);
    ASSERT_FALSE(other.is_ok());
    EXPECT_EQ(other.status().code(), Code::unavailable);
    const std::string& m = other.status().message();
    EXPECT_TRUE(mentions(m, lock_path() + " is held by pid " + std::to_string(::getpid()) + " (")) << m;
    EXPECT_TRUE(mentions(m, "strata_runtime_tests")) << m;  // this process's command line
    EXPECT_TRUE(mentions(m, "(writing)")) << m;
  }
  const std::vector<LockHolder> holders = lock_holders(lock_path());
  ASSERT_EQ(holders.size(), 1u);
  EXPECT_EQ(holders[0].pid, ::getpid());
  EXPECT_TRUE(holders[0].exclusive);
  EXPECT_GT(holders[0].started, 1700000000);
  writer = Status(Code::cancelled, "released");  // destroys the lock
  EXPECT_FALSE(fs::exists(lock_path()));         // the writer removed its file
  EXPECT_TRUE(DirLock::acquire(dir_, "lock", LockMode::exclusive).is_ok());
}

TEST_F(DirLockTest, SharedHoldersCoexistRefuseAWriterAndTheLastRemovesTheFile) {
  std::optional<DirLock> a, b;
  {
    StatusOr<DirLock> first = DirLock::acquire(dir_, "lock", LockMode::shared);
    StatusOr<DirLock> second = DirLock::acquire(dir_, "lock", LockMode::shared);
    ASSERT_TRUE(first.is_ok() && second.is_ok());
    a.emplace(std::move(*first));
    b.emplace(std::move(*second));
  }
  const StatusOr<DirLock> writer = DirLock::acquire(dir_, "lock", LockMode::exclusive);
  ASSERT_FALSE(writer.is_ok());
  EXPECT_TRUE(mentions(writer.status().message(), "(reading)")) << writer.status().message();
  EXPECT_EQ(lock_holders(lock_path()).size(), 2u);
  a.reset();
  EXPECT_TRUE(fs::exists(lock_path()));  // b still holds it
  b.reset();
  EXPECT_FALSE(fs::exists(lock_path()));
}

TEST_F(DirLockTest, ALockFileLeftByADeadProcessIsTakenOver) {
  // A run killed with SIGKILL leaves its file; nobody holds its flock.
  std::ofstream(lock_path()) << "pid 99999999 started 1 mode exclusive command strata train --steps 30\n";
  EXPECT_TRUE(lock_holders(lock_path()).empty());  // that pid is not alive
  StatusOr<DirLock> taken = DirLock::acquire(dir_, "lock", LockMode::exclusive);
  ASSERT_TRUE(taken.is_ok()) << taken.status().to_string();
  std::ifstream in(lock_path());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_FALSE(mentions(text, "99999999")) << text;  // the dead holder's line is gone
  EXPECT_TRUE(mentions(text, "pid " + std::to_string(::getpid()) + " ")) << text;
}

TEST_F(DirLockTest, AMissingDirectoryIsAnErrorNamingThePath) {
  const StatusOr<DirLock> missing = DirLock::acquire(dir_ + "/absent", "lock", LockMode::exclusive);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), Code::not_found);
  EXPECT_TRUE(mentions(missing.status().message(), dir_ + "/absent/lock")) << missing.status().message();
}

}  // namespace
}  // namespace strata
