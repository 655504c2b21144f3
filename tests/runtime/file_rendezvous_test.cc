// rendezvous_share with ranks as threads (the files are the only shared state): the blob reaches
// every rank, whichever starts first; an earlier run's session, arrival and id files are not taken
// for this run's; a missing rank is named at the timeout; the cleanup leaves nothing; and a
// torchrun-style world on the CPU backend is refused naming mpirun.
#include "runtime/file_rendezvous.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/backend.h"
#include "runtime/communicator.h"

namespace strata {
namespace {

class FileRendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("strata_rdzv_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    options_ = {.dir = dir_.string(), .run_id = "test", .timeout_seconds = 20};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs `size` ranks as threads, rank 0 with `blob`, rank r starting after start_delay_ms[r].
  std::vector<StatusOr<std::vector<uint8_t>>> run(int size, const std::vector<uint8_t>& blob,
                                                  std::vector<int> start_delay_ms = {}) {
    start_delay_ms.resize(size_t(size), 0);
    std::vector<StatusOr<std::vector<uint8_t>>> got(size_t(size), Status(Code::internal, "not run"));
    std::vector<std::thread> ranks;
    for (int r = 0; r < size; ++r)
      ranks.emplace_back([&, r] {
        std::this_thread::sleep_for(std::chrono::milliseconds(start_delay_ms[size_t(r)]));
        got[size_t(r)] = rendezvous_share(options_, r, size, r == 0 ? blob : std::vector<uint8_t>{});
      });
    for (std::thread& t : ranks) t.join();
    return got;
  }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }

  std::filesystem::path dir_;
  RendezvousOptions options_;
};

std::vector<uint8_t> some_blob(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t(seed + i * 37);
  return b;
}

TEST_F(FileRendezvousTest, EveryRankGetsRankZerosBlob) {
  const std::vector<uint8_t> blob = some_blob(136, 7);  // NCCL's id and the ok word
  for (const auto& got : run(4, blob)) {
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(*got, blob);
  }
}

TEST_F(FileRendezvousTest, RanksMayStartBeforeOrAfterRankZero) {
  const std::vector<uint8_t> blob = some_blob(128, 1);
  for (const auto& got : run(3, blob, {300, 0, 600})) {
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(*got, blob);
  }
}

TEST_F(FileRendezvousTest, AnEarlierRunsFilesAreNotTakenForThisRuns) {
  // A crashed run's files: its session, rank 1's arrival in it, and its id with another blob and
  // tokens. Rank 1 starts first and reads that session; rank 0 comes later with a new one.
  write("strata-rendezvous-test.session", "00000000000000aa");
  write("strata-rendezvous-test.arrive.1", "00000000000000aa 0000000000000001");
  write("strata-rendezvous-test.id", "00000000000000aa\n0000000000000001\n0102");
  const std::vector<uint8_t> blob = some_blob(128, 9);
  for (const auto& got : run(2, blob, {400, 0})) {
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(*got, blob);
  }
}

TEST_F(FileRendezvousTest, AMissingRankIsNamedAtTheTimeout) {
  options_.timeout_seconds = 0.3;
  StatusOr<std::vector<uint8_t>> got = rendezvous_share(options_, 0, 4, some_blob(8, 0));
  ASSERT_FALSE(got.is_ok());
  EXPECT_EQ(got.status().code(), Code::io_error);
  EXPECT_NE(got.status().message().find("rank 0 waited"), std::string::npos) << got.status().to_string();
  EXPECT_NE(got.status().message().find("ranks 1, 2, 3 to arrive"), std::string::npos) << got.status().to_string();
  got = rendezvous_share(options_, 2, 4, {});
  ASSERT_FALSE(got.is_ok());
  EXPECT_NE(got.status().message().find("rank 0's id"), std::string::npos) << got.status().to_string();
}

TEST_F(FileRendezvousTest, CleanupLeavesNothing) {
  for (const auto& got : run(3, some_blob(16, 3))) ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_FALSE(std::filesystem::is_empty(dir_));
  rendezvous_cleanup(options_, 3);
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

TEST_F(FileRendezvousTest, BadArguments) {
  RendezvousOptions none = options_;
  none.dir.clear();
  StatusOr<std::vector<uint8_t>> got = rendezvous_share(none, 0, 2, {});
  ASSERT_FALSE(got.is_ok());
  EXPECT_NE(got.status().message().find("--rendezvous-dir"), std::string::npos) << got.status().to_string();
  none.dir = (dir_ / "absent").string();
  EXPECT_EQ(rendezvous_share(none, 0, 2, {}).status().code(), Code::invalid_argument);
  EXPECT_EQ(rendezvous_share(options_, 2, 2, {}).status().code(), Code::invalid_argument);
  EXPECT_EQ(rendezvous_share(options_, 0, 1, {}).status().code(), Code::invalid_argument);
  EXPECT_EQ(rendezvous_share(options_, 0, 2, std::vector<uint8_t>(5000)).status().code(), Code::invalid_argument);
}

TEST(TorchrunWorld, OnTheCpuBackendIsRefusedNamingMpirun) {
  BackendOptions options;
  options.memory_budget = uint64_t{16} << 20;
  StatusOr<std::unique_ptr<Backend>> backend = make_backend(options);
  ASSERT_TRUE(backend.is_ok()) << backend.status().to_string();
  LaunchInfo launch{.launcher = Launcher::torchrun, .rank = 0, .size = 2, .local_rank = 0, .local_size = 2};
  StatusOr<std::unique_ptr<Communicator>> comm = make_communicator(**backend, launch, {.rendezvous_dir = "/tmp"});
  ASSERT_FALSE(comm.is_ok());
  EXPECT_EQ(comm.status().code(), Code::unavailable);
  EXPECT_NE(comm.status().message().find("mpirun -np 2"), std::string::npos) << comm.status().to_string();
}

}  // namespace
}  // namespace strata
