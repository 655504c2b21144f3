// Did-you-mean: distances, thresholds, normalization of '-', '_' and '.' and case.
#include "runtime/suggest.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

const std::vector<std::string> kKeys = {"gpu_mem", "cpu_mem", "gpu_index", "log_level", "aio_block_size",
                                        "aio_queue_depth", "threads", "seed"};

TEST(NameDistance, CountsEditsAndTranspositions) {
  EXPECT_EQ(name_distance("gpu_mem", "gpu_mem"), 0u);
  EXPECT_EQ(name_distance("gpu_mme", "gpu_mem"), 1u);  // adjacent transposition
  EXPECT_EQ(name_distance("gpumem", "gpu_mem"), 1u);   // insertion
  EXPECT_EQ(name_distance("gpu_mex", "gpu_mem"), 1u);  // substitution
  EXPECT_EQ(name_distance("", "abc"), 3u);
  EXPECT_EQ(name_distance("kitten", "sitting"), 3u);
}

TEST(NameDistance, IgnoresCaseAndSeparatorKind) {
  EXPECT_EQ(name_distance("GPU-MEM", "gpu_mem"), 0u);
  EXPECT_EQ(name_distance("aio.block_size", "aio_block-size"), 0u);
}

TEST(Suggest, FindsTyposOfEachKind) {
  EXPECT_EQ(suggest("gpu_mme", kKeys), "gpu_mem");
  EXPECT_EQ(suggest("GPU_MME", kKeys), "gpu_mem");
  EXPECT_EQ(suggest("log-levl", kKeys), "log_level");
  EXPECT_EQ(suggest("thread", kKeys), "threads");
  EXPECT_EQ(suggest("aio.queue_dpeth", kKeys), "aio_queue_depth");
}

TEST(Suggest, PrefersTheClosestAndTheEarlierOnTies) {
  // "cpu_mem" and "gpu_mem" are both one edit from "xpu_mem": the earlier one wins.
  EXPECT_EQ(suggest("xpu_mem", kKeys), "gpu_mem");
  EXPECT_EQ(suggest("cpu_mem", kKeys), "cpu_mem");
  EXPECT_EQ(suggest("cpu_mex", kKeys), "cpu_mem");
  // Equal after normalization: the spelling closer as written wins, whatever the order.
  EXPECT_EQ(suggest("aio.block_sise", {"aio_block_size", "aio.block_size"}), "aio.block_size");
  EXPECT_EQ(suggest("aio_block_sise", {"aio.block_size", "aio_block_size"}), "aio_block_size");
}

TEST(Suggest, ReturnsNothingForFarNames) {
  EXPECT_EQ(suggest("learning_rate", kKeys), "");
  EXPECT_EQ(suggest("x", kKeys), "");
  EXPECT_EQ(suggest("", kKeys), "");
  EXPECT_EQ(suggest("gpu_mem", {}), "");
  // Short names allow one edit only: "sed" -> "seed" is one, "sd" -> "seed" is two.
  EXPECT_EQ(suggest("sed", kKeys), "seed");
  EXPECT_EQ(suggest("sd", kKeys), "");
}

TEST(Suggest, FallsBackToAUniqueFragment) {
  EXPECT_EQ(suggest("block_size", kKeys), "aio_block_size");
  EXPECT_EQ(suggest("queue_depth", kKeys), "aio_queue_depth");
  // "_mem" ends both gpu_mem and cpu_mem: ambiguous, so no suggestion.
  EXPECT_EQ(suggest("_mem", kKeys), "");
  // "index" is four characters and only gpu_index ends with it.
  EXPECT_EQ(suggest("index", kKeys), "gpu_index");
}

TEST(DidYouMean, FormatsWithTheGivenQuote) {
  EXPECT_EQ(did_you_mean("--gpu-mme", {"--gpu-mem", "--cpu-mem"}, ""), "; did you mean --gpu-mem?");
  EXPECT_EQ(did_you_mean("gpu_mme", kKeys), "; did you mean 'gpu_mem'?");
  EXPECT_EQ(did_you_mean("zzzzzz", kKeys), "");
}

}  // namespace
}  // namespace strata
