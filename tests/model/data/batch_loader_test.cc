// WindowSampler and BatchLoader: llm.c-equivalent sequential windows, per-shard rows, seeded
// shuffling (a permutation per epoch, same for the same seed), epoch roll-over, and bit-identical
// resume after seek() or a fresh loader started at a saved position.
#include "model/data/batch_loader.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "tests/model/model_test_files.h"

namespace strata::model {
namespace {

using testing::TempDir;

// A dataset whose token at index i is i % 60000 (so values identify positions).
TokenDataset counting_dataset(const TempDir& dir, std::vector<size_t> shard_sizes) {
  std::vector<std::string> paths;
  uint32_t next = 0;
  for (size_t s = 0; s < shard_sizes.size(); ++s) {
    std::vector<uint16_t> tokens(shard_sizes[s]);
    for (auto& t : tokens) t = static_cast<uint16_t>(next++ % 60000);
    paths.push_back(dir.file("shard_" + std::to_string(s) + ".bin"));
    testing::write_gpt2_shard(paths.back(), tokens);
  }
  return testing::expect_value(TokenDataset::open(paths, {TokenFileKind::llmc_bin, 60000}));
}

std::unique_ptr<PinnedPool> make_pool() {
  PinnedPoolOptions o;
  o.allow_cuda = false;
  o.slab_bytes = 1 << 20;
  return testing::expect_value(PinnedPool::create(o));
}

struct Copied {
  std::vector<int32_t> inputs, targets;
  LoaderPosition position;
  bool operator==(const Copied&) const = default;
};

Copied take(BatchLoader& loader) {
  auto v = loader.next();
  EXPECT_TRUE(v.is_ok()) << v.status().to_string();
  const size_t n = size_t{v->batch_size} * v->seq_len;
  return {std::vector<int32_t>(v->inputs, v->inputs + n), std::vector<int32_t>(v->targets, v->targets + n),
          v->position};
}

BatchLoaderOptions options(uint32_t B, uint32_t T, bool shuffle, bool per_shard, uint64_t seed = 0) {
  BatchLoaderOptions o;
  o.sampling = {B, T, shuffle, seed, per_shard};
  o.depth = 3;
  return o;
}

TEST(IndexPermutationTest, IsABijectionForAnySize) {
  for (uint64_t n : {1ull, 2ull, 3ull, 5ull, 17ull, 1000ull, 4097ull}) {
    IndexPermutation perm(n, 42);
    std::vector<bool> seen(n, false);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t j = perm(i);
      ASSERT_LT(j, n);
      ASSERT_FALSE(seen[j]) << "n=" << n << " i=" << i;
      seen[j] = true;
    }
  }
  IndexPermutation a(1000, 1), b(1000, 2);
  int same = 0, fixed = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    same += a(i) == b(i);
    fixed += a(i) == i;
  }
  EXPECT_LT(same, 20);  // unrelated keys give unrelated orders (expected ~1 coincidence)
  EXPECT_LT(fixed, 20);
}

TEST(WindowSamplerTest, SequentialMatchesLlmcWindows) {
  TempDir dir;
  TokenDataset ds = counting_dataset(dir, {101});
  auto s = WindowSampler::create(ds, {4, 8, false, 0, true});
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->batches_per_epoch(), 3u);  // (101-1)/8 = 12 rows, 3 batches of 4
  std::vector<uint64_t> starts(4);
  s->row_starts({0, 2}, starts);
  EXPECT_EQ(starts, (std::vector<uint64_t>{64, 72, 80, 88}));  // llm.c: offset 2*B*T, stride T
  EXPECT_EQ(s->advance({0, 2}), (LoaderPosition{1, 0}));
  EXPECT_EQ(s->check({5, 3}).code(), Code::out_of_range);
}

TEST(WindowSamplerTest, PerShardRowsStayInTheirShard) {
  TempDir dir;
  TokenDataset ds = counting_dataset(dir, {41, 30, 57});
  auto s = WindowSampler::create(ds, {2, 5, true, 9, true});
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  // rows: 8, 5, 11 -> batches 4 + 2 + 5
  EXPECT_EQ(s->batches_per_epoch(), 11u);
  std::vector<uint64_t> starts(2);
  std::set<uint64_t> seen;
  for (uint64_t b = 0; b < 11; ++b) {
    s->row_starts({3, b}, starts);
    for (uint64_t start : starts) {
      const size_t shard = start < 41 ? 0 : start < 71 ? 1 : 2;
      const uint64_t shard_end = shard == 0 ? 41 : shard == 1 ? 71 : 128;
      EXPECT_LE(start + 6, shard_end) << "row at " << start << " crosses shard " << shard;
      EXPECT_TRUE(seen.insert(start).second) << "row " << start << " repeated within an epoch";
    }
  }
  auto concat = WindowSampler::create(ds, {2, 5, false, 0, false});
  ASSERT_TRUE(concat.is_ok());
  EXPECT_EQ(concat->batches_per_epoch(), 12u);  // (128-1)/5 = 25 rows
}

TEST(WindowSamplerTest, RejectsDataTooShortForOneBatch) {
  TempDir dir;
  TokenDataset ds = counting_dataset(dir, {100, 15});
  auto per_shard = WindowSampler::create(ds, {3, 5, false, 0, true});
  EXPECT_EQ(per_shard.status().code(), Code::invalid_argument);
  EXPECT_NE(per_shard.status().message().find("shard_1.bin has 15 tokens"), std::string::npos) << per_shard.status().to_string();
  EXPECT_NE(per_shard.status().message().find("needs 16 tokens"), std::string::npos);  // B*T+1
  EXPECT_TRUE(WindowSampler::create(ds, {3, 5, false, 0, false}).is_ok());
  auto whole = WindowSampler::create(ds, {4, 29, false, 0, false});
  EXPECT_EQ(whole.status().code(), Code::invalid_argument);
  EXPECT_NE(whole.status().message().find("115 tokens"), std::string::npos) << whole.status().to_string();
  EXPECT_EQ(WindowSampler::create(ds, {0, 5, false, 0, true}).status().code(), Code::invalid_argument);
}

TEST(BatchLoaderTest, SequentialBatchesAreShiftedWindowsAndWrapEpochs) {
  TempDir dir;
  TokenDataset ds = counting_dataset(dir, {49});
  auto pool = make_pool();
  auto loader = BatchLoader::create(ds, *pool, options(2, 8, false, true));
  ASSERT_TRUE(loader.is_ok()) << loader.status().to_string();
  EXPECT_EQ((*loader)->batches_per_epoch(), 3u);
  for (uint64_t step = 0; step < 7; ++step) {
    const LoaderPosition expected{step / 3, step % 3};
    EXPECT_EQ((*loader)->position(), expected);
    Copied c = take(**loader);
    EXPECT_EQ(c.position, expected);
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(c.inputs[i], static_cast<int32_t>(expected.batch * 16 + i));
      EXPECT_EQ(c.targets[i], static_cast<int32_t>(expected.batch * 16 + i + 1));
    }
  }
}

TEST(BatchLoaderTest, ShuffleIsDeterministicForASeedAndCoversEveryRow) {
  TempDir dir;
  TokenDataset ds = counting_dataset(dir, {161});  // 40 rows of T=4, 10 batches of B=4
  auto pool = make_pool();
  auto a = BatchLoader::create(ds, *pool, options(4, 4, true, true, 7));
  auto b = BatchLoader::create(ds, *pool, options(4, 4, true, true, 7));
  auto c = BatchLoader::create(ds, *pool, options(4, 4, true, true, 8));
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  std::vector<Copied> epoch0, epoch1;
  bool differs_from_other_seed = false;
  for (int i = 0; i < 20; ++i) {
    Copied x = take(**a);
    EXPECT_EQ(x, take(**b)) << "batch " << i;
    differs_from_other_seed |= x.inputs != take(**c).inputs;
    (i < 10 ? epoch0 : epoch1).push_back(std::move(x));
  }
  EXPECT_TRUE(differs_from_other_seed);
  std::set<int32_t> row_firsts;
  for (const Copied& x : epoch0) {
    for (int r = 0; r < 4; ++r) row_firsts.insert(x.inputs[r * 4]);
  }
  EXPECT_EQ(row_firsts.size(), 40u);  // every row exactly once in the epoch
  EXPECT_NE(epoch0.front().inputs, epoch1.front().inputs);  // a fresh order each epoch
}

TEST(BatchLoaderTest, SeekAndRestartResumeBitIdentically) {
  TempDir dir;
  TokenDataset ds = counting_dataset(dir, {90, 75, 130});
  auto pool = make_pool();
  auto run = BatchLoader::create(ds, *pool, options(2, 6, true, true, 1234));
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  for (int i = 0; i < 9; ++i) take(**run);
  const LoaderPosition saved = (*run)->position();
  std::vector<Copied> uninterrupted;
  for (int i = 0; i < 30; ++i) uninterrupted.push_back(take(**run));

  BatchLoaderOptions resumed_options = options(2, 6, true, true, 1234);
  resumed_options.start = saved;
  auto resumed = BatchLoader::create(ds, *pool, resumed_options);
  ASSERT_TRUE(resumed.is_ok()) << resumed.status().to_string();
  for (int i = 0; i < 30; ++i) EXPECT_EQ(take(**resumed), uninterrupted[i]) << "batch " << i << " after resume";

  ASSERT_TRUE((*run)->seek(saved).is_ok());
  EXPECT_EQ((*run)->position(), saved);
  for (int i = 0; i < 30; ++i) EXPECT_EQ(take(**run), uninterrupted[i]) << "batch " << i << " after seek";
}

TEST(BatchLoaderTest, SplitTailGivesAValidationLoader) {
  TempDir dir;
  TokenDataset ds = counting_dataset(dir, {200});
  auto split = ds.split_tail(0.25);
  ASSERT_TRUE(split.is_ok());
  auto pool = make_pool();
  auto val = BatchLoader::create(split->second, *pool, options(2, 4, false, true));
  ASSERT_TRUE(val.is_ok()) << val.status().to_string();
  Copied c = take(**val);
  EXPECT_EQ(c.inputs[0], 150);  // the validation tokens are the last quarter
  EXPECT_EQ(c.targets[7], 158);
}

TEST(BatchLoaderTest, RejectsBadOptionsAndUseAfterStop) {
  TempDir dir;
  TokenDataset ds = counting_dataset(dir, {100});
  auto pool = make_pool();
  BatchLoaderOptions shallow = options(2, 4, false, true);
  shallow.depth = 1;
  auto bad_depth = BatchLoader::create(ds, *pool, shallow);
  EXPECT_EQ(bad_depth.status().code(), Code::invalid_argument);
  EXPECT_NE(bad_depth.status().message().find("depth 1"), std::string::npos);
  BatchLoaderOptions late = options(2, 4, false, true);
  late.start = {0, 12};  // 24 rows -> 12 batches: 12 is one past the end
  EXPECT_EQ(BatchLoader::create(ds, *pool, late).status().code(), Code::out_of_range);

  auto loader = BatchLoader::create(ds, *pool, options(2, 4, false, true));
  ASSERT_TRUE(loader.is_ok());
  const Status s = (*loader)->seek({0, 99});
  EXPECT_EQ(s.code(), Code::out_of_range);
  EXPECT_NE(s.message().find("batch 99"), std::string::npos);
  take(**loader);
  (*loader)->stop();
  (*loader)->stop();
  EXPECT_EQ((*loader)->next().status().code(), Code::failed_precondition);
}

}  // namespace
}  // namespace strata::model
