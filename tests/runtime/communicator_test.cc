// The Communicator at world size 1 (LocalCommunicator on the CPU backend), launch detection from
// the launchers' environment variables, and make_communicator's choice. The multi-rank collectives
// run under mpirun: tests/runtime/comm_mpi_check.cc (CTest label mpi).
#include "runtime/communicator.h"

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace strata {
namespace {

// Sets (or unsets, for nullptr) environment variables for one test and restores them after.
class CommEnvGuard {
 public:
  CommEnvGuard(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* name : kAll) {
      const char* v = std::getenv(name);
      saved_.push_back({name, v ? std::optional<std::string>(v) : std::nullopt});
      unsetenv(name);
    }
    for (auto [name, value] : vars) setenv(name, value, 1);
  }
  ~CommEnvGuard() {
    for (auto& [name, value] : saved_) {
      if (value) setenv(name, value->c_str(), 1);
      else unsetenv(name);
    }
  }

 private:
  static constexpr const char* kAll[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                                         "MPI_LOCALNRANKS", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST(DetectLaunch, NoLauncherIsAWorldOfOne) {
  CommEnvGuard env({});
  auto info = detect_launch();
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->launcher, Launcher::single);
  EXPECT_EQ(info->rank, 0);
  EXPECT_EQ(info->size, 1);
  EXPECT_EQ(info->local_rank, 0);
  EXPECT_EQ(info->local_size, 1);
}

TEST(DetectLaunch, OpenMpiVariablesWinOverTorchrunOnes) {
  CommEnvGuard env({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}});
  auto info = detect_launch();
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->launcher, Launcher::mpirun);
  EXPECT_EQ(info->rank, 3);
  EXPECT_EQ(info->size, 4);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->local_size, 2);
}

TEST(DetectLaunch, TorchrunVariables) {
  CommEnvGuard env({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}});
  auto info = detect_launch();
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->launcher, Launcher::torchrun);
  EXPECT_EQ(info->rank, 5);
  EXPECT_EQ(info->size, 8);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->local_size, 0) << "torchrun's LOCAL_WORLD_SIZE unset: the node's share is unknown";
}

TEST(DetectLaunch, LocalSizeOfEachLauncher) {
  {
    CommEnvGuard env({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}});
    auto info = detect_launch();
    ASSERT_TRUE(info.is_ok()) << info.status().to_string();
    EXPECT_EQ(info->local_size, 4);
  }
  {
    CommEnvGuard env({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"}});
    auto info = detect_launch();
    ASSERT_TRUE(info.is_ok()) << info.status().to_string();
    EXPECT_EQ(info->local_rank, 0);
    EXPECT_EQ(info->local_size, 2);
  }
  {
    CommEnvGuard env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}});
    auto info = detect_launch();
    ASSERT_TRUE(info.is_ok()) << info.status().to_string();
    EXPECT_EQ(info->local_size, 1) << "a world of one is a node of one";
  }
  {
    CommEnvGuard env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
    auto info = detect_launch();
    ASSERT_FALSE(info.is_ok());
    EXPECT_NE(info.status().message().find("OMPI_COMM_WORLD_LOCAL_RANK=2 is not below OMPI_COMM_WORLD_LOCAL_SIZE=2"),
              std::string::npos)
        << info.status().to_string();
  }
}

TEST(DetectLaunch, BadValuesNameTheVariable) {
  {
    CommEnvGuard env({{"RANK", "x"}, {"WORLD_SIZE", "2"}});
    auto info = detect_launch();
    ASSERT_FALSE(info.is_ok());
    EXPECT_NE(info.status().message().find("RANK='x'"), std::string::npos) << info.status().to_string();
  }
  {
    CommEnvGuard env({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
    auto info = detect_launch();
    ASSERT_FALSE(info.is_ok());
    EXPECT_NE(info.status().message().find("RANK=2 is not below WORLD_SIZE=2"), std::string::npos);
  }
  {
    CommEnvGuard env({{"RANK", "0"}});
    EXPECT_EQ(detect_launch().status().code(), Code::invalid_argument);
  }
}

class LocalCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BackendOptions options;
    options.memory_budget = uint64_t{16} << 20;
    auto b = make_backend(options);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    backend_ = std::move(b).value();
    auto c = make_communicator(*backend_, LaunchInfo{});
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    comm_ = std::move(c).value();
  }
  float* alloc(size_t n) {
    auto p = backend_->allocate(n * sizeof(float), "comm test");
    EXPECT_TRUE(p.is_ok());
    return static_cast<float*>(p.value());
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> comm_;
};

// Issue #25: a SIGKILLed rank's peers exit naming it in under 30 s, under a launcher that leaves
// them running (mpirun --enable-recovery, a lost node): the timeout is what finds it there.
TEST(CommOptions, DefaultTimeoutFindsADeadRankInUnderThirtySeconds) {
  const CommOptions defaults;
  EXPECT_GT(defaults.timeout_seconds, 0.0);
  EXPECT_LT(defaults.timeout_seconds, 30.0);
}

TEST_F(LocalCommunicatorTest, IsRankZeroOfOne) {
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->size(), 1);
  EXPECT_EQ(comm_->name(), "local");
}

TEST_F(LocalCommunicatorTest, EveryCollectiveGivesItsSizeOneResult) {
  const size_t n = 1000;
  float* a = alloc(n);
  float* b = alloc(n);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = i % 3 == 0 ? -0.0f : 1e8f * static_cast<float>(i) - 1.0f;
  std::memcpy(a, x.data(), n * sizeof(float));
  const Stream s = Stream::compute;
  auto expect_b_is_x = [&](const char* op) {
    ASSERT_TRUE(comm_->synchronize(s).is_ok()) << op;
    EXPECT_EQ(std::memcmp(b, x.data(), n * sizeof(float)), 0) << op;  // bits: -0.0 stays -0.0
    std::memset(b, 0x7f, n * sizeof(float));
  };
  ASSERT_TRUE(comm_->all_gather(a, b, n * sizeof(float), s).is_ok());
  expect_b_is_x("all_gather");
  ASSERT_TRUE(comm_->all_to_all(a, b, n * sizeof(float), s).is_ok());
  expect_b_is_x("all_to_all");
  ASSERT_TRUE(comm_->reduce_scatter(a, b, n, s).is_ok());
  expect_b_is_x("reduce_scatter");
  ASSERT_TRUE(comm_->all_reduce(a, b, n, s).is_ok());
  expect_b_is_x("all_reduce");
  // In place, broadcast and barrier move nothing.
  ASSERT_TRUE(comm_->all_reduce(a, a, n, s).is_ok());
  ASSERT_TRUE(comm_->broadcast(a, n * sizeof(float), 0, s).is_ok());
  ASSERT_TRUE(comm_->barrier(s).is_ok());
  ASSERT_TRUE(comm_->synchronize(s).is_ok());
  EXPECT_EQ(std::memcmp(a, x.data(), n * sizeof(float)), 0);
}

// duplicate(): another world of one, whose gather on the comm stream runs beside the first's on
// the compute stream.
TEST_F(LocalCommunicatorTest, ADuplicateIsAnotherWorldOfOneOnItsOwnStream) {
  auto dup = comm_->duplicate();
  ASSERT_TRUE(dup.is_ok()) << dup.status().to_string();
  Communicator& second = **dup;
  EXPECT_EQ(second.rank(), 0);
  EXPECT_EQ(second.size(), 1);
  EXPECT_EQ(second.name(), "local");
  const size_t n = 1 << 16;
  float* a = alloc(n);
  float* b = alloc(n);
  float* c = alloc(n);
  float* d = alloc(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = float(i);
    c[i] = -float(i);
  }
  ASSERT_TRUE(comm_->all_gather(a, b, n * sizeof(float), Stream::compute).is_ok());
  ASSERT_TRUE(second.all_gather(c, d, n * sizeof(float), Stream::comm).is_ok());
  ASSERT_TRUE(second.synchronize(Stream::comm).is_ok());
  ASSERT_TRUE(comm_->synchronize(Stream::compute).is_ok());
  EXPECT_EQ(std::memcmp(a, b, n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(c, d, n * sizeof(float)), 0);
}

TEST_F(LocalCommunicatorTest, BroadcastFromAMissingRankIsAnError) {
  float* a = alloc(4);
  Status st = comm_->broadcast(a, 16, 1, Stream::compute);
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_NE(st.message().find("root 1"), std::string::npos) << st.to_string();
}

TEST_F(LocalCommunicatorTest, TorchrunWorldAboveOneIsUnavailableWithTheWayOut) {
  LaunchInfo launch;
  launch.launcher = Launcher::torchrun;
  launch.size = 2;
  auto c = make_communicator(*backend_, launch);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), Code::unavailable);
  EXPECT_NE(c.status().message().find("mpirun -np 2"), std::string::npos) << c.status().to_string();
}

// CommKind::nccl on the CPU backend says so instead of quietly giving the local or MPI communicator
// (the NCCL world of one itself: nccl_communicator_gpu_test.cc).
TEST_F(LocalCommunicatorTest, NcclAskedForOnTheCpuBackendIsRefused) {
  CommOptions options;
  options.kind = CommKind::nccl;
  auto c = make_communicator(*backend_, LaunchInfo{}, options);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), Code::invalid_argument);
  EXPECT_NE(c.status().message().find("the NCCL communicator needs the CUDA backend (this run has the cpu backend)"),
            std::string::npos) << c.status().to_string();
  EXPECT_EQ(comm_kind_name(CommKind::nccl), "nccl");
  EXPECT_EQ(comm_kind_name(CommKind::automatic), "auto");
}

// CommKind::local by name: the world of one on any backend; a larger world is refused, naming auto.
TEST_F(LocalCommunicatorTest, LocalAskedForIsAWorldOfOneOnly) {
  CommOptions options;
  options.kind = CommKind::local;
  auto one = make_communicator(*backend_, LaunchInfo{}, options);
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  EXPECT_EQ((*one)->name(), "local");
  EXPECT_EQ((*one)->size(), 1);
  LaunchInfo two;
  two.launcher = Launcher::mpirun;
  two.size = 2;
  auto refused = make_communicator(*backend_, two, options);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), Code::invalid_argument);
  EXPECT_NE(refused.status().message().find("mpirun started 2 ranks"), std::string::npos) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("leave the communicator at auto"), std::string::npos);
  for (CommKind k : {CommKind::automatic, CommKind::local, CommKind::nccl})
    EXPECT_EQ(parse_comm_kind(comm_kind_name(k)).value(), k);
  auto bad = parse_comm_kind("mpi");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("expected auto, local or nccl"), std::string::npos) << bad.status().to_string();
}

}  // namespace
}  // namespace strata
