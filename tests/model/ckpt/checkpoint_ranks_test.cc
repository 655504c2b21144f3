// The messages of a checkpoint written across ranks (model/ckpt/checkpoint_ranks.h) in a world of
// one (a LocalCommunicator): what every rank sends comes back in rank order, a broadcast is rank
// 0's text, an agreement carries the failing rank's error with the rank named, and a status
// crosses as bytes with its code, errno and message. Across processes the same exchanges run
// under mpirun in tests/tools/train_ranks_placements_check.sh (label mpi).
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "model/ckpt/checkpoint_ranks.h"
#include "runtime/backend.h"
#include "runtime/communicator.h"

namespace strata::model {
namespace {

struct WorldOfOne {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<ShardGather> gather;
};

WorldOfOne world_of_one() {
  WorldOfOne w;
  BackendOptions options;
  options.memory_budget = uint64_t{16} << 20;
  auto backend = make_backend(options);
  EXPECT_TRUE(backend.is_ok()) << backend.status().to_string();
  w.backend = std::move(*backend);
  auto comm = make_communicator(*w.backend, LaunchInfo{}, CommOptions{});
  EXPECT_TRUE(comm.is_ok()) << comm.status().to_string();
  w.comm = std::move(*comm);
  auto gather = ShardGather::create(*w.backend, *w.comm, 64, "test");  // messages longer than a round
  EXPECT_TRUE(gather.is_ok()) << gather.status().to_string();
  w.gather = std::move(*gather);
  return w;
}

TEST(CheckpointRanks, AWorldOfOneGetsItsOwnMessagesBack) {
  WorldOfOne w = world_of_one();
  CheckpointRanks ranks(*w.gather, 0, 1);
  const std::string text(1000, 'x');
  auto all = ranks.all_gather(text);
  ASSERT_TRUE(all.is_ok()) << all.status().to_string();
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ(all->front(), text);
  auto none = ranks.all_gather("");
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(none->front(), "");
  EXPECT_FALSE(ranks.files_sent());
  auto sent = ranks.send_files(R"({"files": []})");
  ASSERT_TRUE(sent.is_ok());
  EXPECT_EQ(*sent, R"({"files": []})");
  EXPECT_TRUE(ranks.files_sent());
  EXPECT_FALSE(CheckpointRanks::failed_files(*sent));
  ranks.begin_save();
  EXPECT_FALSE(ranks.files_sent());
  ASSERT_TRUE(ranks.send_failure(Status(Code::no_space, "disk full")).is_ok());
  EXPECT_TRUE(ranks.files_sent());
  EXPECT_TRUE(CheckpointRanks::failed_files(R"({"error": "disk full"})"));
  EXPECT_TRUE(CheckpointRanks::failed_files("not json"));
}

TEST(CheckpointRanks, AnAgreementNamesTheFailingRank) {
  WorldOfOne w = world_of_one();
  CheckpointRanks ranks(*w.gather, 0, 1);
  Status agreed = Status(Code::internal, "not set");
  ASSERT_TRUE(ranks.agree(Status::ok(), agreed).is_ok());
  EXPECT_TRUE(agreed.is_ok()) << agreed.to_string();
  ASSERT_TRUE(ranks.agree(Status(Code::no_space, "writing x: No space left on device", ENOSPC), agreed).is_ok());
  EXPECT_EQ(agreed.code(), Code::no_space);
  EXPECT_EQ(agreed.sys_errno(), ENOSPC);
  EXPECT_EQ(agreed.message(), "rank 0: writing x: No space left on device");
}

TEST(CheckpointRanks, AStatusCrossesAsBytes) {
  std::string bytes = CheckpointRanks::encode_status(Status::ok());
  bytes += CheckpointRanks::encode_status(Status(Code::io_error, "pwrite failed", EIO));
  size_t at = 0;
  Status first = Status(Code::internal, "not set"), second;
  ASSERT_TRUE(CheckpointRanks::decode_status(bytes, at, first).is_ok());
  EXPECT_TRUE(first.is_ok());
  ASSERT_TRUE(CheckpointRanks::decode_status(bytes, at, second).is_ok());
  EXPECT_EQ(second.code(), Code::io_error);
  EXPECT_EQ(second.sys_errno(), EIO);
  EXPECT_EQ(second.message(), "pwrite failed");
  EXPECT_EQ(at, bytes.size());
  Status cut;
  size_t from = CheckpointRanks::encode_status(Status::ok()).size();  // the second, its message cut short
  EXPECT_EQ(CheckpointRanks::decode_status(bytes.substr(0, bytes.size() - 3), from, cut).code(), Code::corruption);
  from = 0;
  EXPECT_EQ(CheckpointRanks::decode_status("abc", from, cut).code(), Code::corruption);
}

}  // namespace
}  // namespace strata::model
