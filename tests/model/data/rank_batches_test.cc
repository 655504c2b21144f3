// RankBatches: N ranks' micro-batches, taken in rank order step by step, are exactly one loader's
// batches in order (rank r's the r-th of each round of ranks in a step's group), with 1, 2 and 3
// micro-batches per rank;
// every rank's step_position() is the one-loader position of the next step; bad ranks refused.
#include "model/data/rank_batches.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/model/model_test_files.h"

namespace strata::model {
// Named, not anonymous: the unity build (the sanitizer stages) puts this file in one translation unit
// with batch_loader_test.cc, whose helpers have the same names.
namespace rank_batches_test {

using testing::TempDir;

TokenDataset counting_dataset(const TempDir& dir) {
  std::vector<uint16_t> tokens(4096);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 60000);
  const std::string path = dir.file("shard.bin");
  testing::write_gpt2_shard(path, tokens);
  return testing::expect_value(TokenDataset::open({path}, {TokenFileKind::llmc_bin, 60000}));
}

std::unique_ptr<PinnedPool> make_pool() {
  PinnedPoolOptions o;
  o.allow_cuda = false;
  o.slab_bytes = 1 << 20;
  return testing::expect_value(PinnedPool::create(o));
}

// Every loader over the one dataset (written once: rewriting a file others map would pull it away).
std::unique_ptr<BatchLoader> make_loader(const TokenDataset& data, PinnedPool& pool) {
  BatchLoaderOptions o;
  o.sampling = {.batch_size = 2, .seq_len = 8, .shuffle = true, .seed = 7};
  o.depth = 3;
  return testing::expect_value(BatchLoader::create(data, pool, o));
}

std::vector<int32_t> copy(const BatchView& v) {
  return std::vector<int32_t>(v.inputs, v.inputs + size_t(v.batch_size) * v.seq_len);
}

TEST(RankBatchesTest, RanksTogetherReadOneLoadersBatchesInOrder) {
  TempDir dir;
  const TokenDataset data = counting_dataset(dir);
  auto pool = make_pool();
  for (int ranks : {2, 3}) {
    for (uint64_t per_rank : {1, 2, 3}) {
      auto single = make_loader(data, *pool);
      std::vector<std::vector<int32_t>> expected;
      const uint64_t steps = 5;
      for (uint64_t i = 0; i < steps * ranks * per_rank; ++i) expected.push_back(copy(testing::expect_value(single->next())));
      const LoaderPosition after = single->position();

      std::vector<std::unique_ptr<BatchLoader>> loaders;
      std::vector<RankBatches> mine;
      for (int r = 0; r < ranks; ++r) {
        loaders.push_back(make_loader(data, *pool));
        mine.push_back(testing::expect_value(RankBatches::create(*loaders.back(), r, ranks, per_rank)));
      }
      size_t at = 0;  // round k of a step: micro-batch k x ranks + r on rank r
      for (uint64_t s = 0; s < steps; ++s)
        for (uint64_t k = 0; k < per_rank; ++k)
          for (int r = 0; r < ranks; ++r)
            EXPECT_EQ(copy(testing::expect_value(mine[r].next())), expected[at++])
                << ranks << " ranks, " << per_rank << " per rank: step " << s << " rank " << r << " micro-batch " << k;
      for (int r = 0; r < ranks; ++r) EXPECT_EQ(testing::expect_value(mine[r].step_position()), after) << "rank " << r;
    }
  }
}

TEST(RankBatchesTest, RefusesABadRankOrCount) {
  TempDir dir;
  const TokenDataset data = counting_dataset(dir);
  auto pool = make_pool();
  auto loader = make_loader(data, *pool);
  EXPECT_EQ(RankBatches::create(*loader, 2, 2, 1).status().code(), Code::invalid_argument);
  EXPECT_EQ(RankBatches::create(*loader, -1, 2, 1).status().code(), Code::invalid_argument);
  EXPECT_EQ(RankBatches::create(*loader, 0, 2, 0).status().code(), Code::invalid_argument);
}

}  // namespace rank_batches_test
}  // namespace strata::model
