// `strata train --vocab-tile`: a tiled fp32 run gives the untiled run's losses bit for bit and
// says how it tiled; `auto` tiles a paged table larger than 1/8 of --gpu-mem; a tile that is not
// whole 1024-row blocks is refused before any work, naming the flag.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tools/run_cli.h"

namespace strata {
namespace vocab_tile_cli_test {

using test::CliResult;
using test::run_cli;
using test::metric_losses;
using test::temp_path;

// gpt2-tiny (C = 48) with a 12000-token vocabulary (the built-in corpus uses the first 256).
const std::vector<std::string> kRun = {"train",         "--device", "cpu",           "--vocab", "12000", "--steps", "3",
                                       "--micro-batch", "1",        "--seq",         "16",      "--eval-every",
                                       "0",             "--offload-param", "cpu"};

CliResult train(const std::string& metrics, std::vector<std::string> extra) {
  std::vector<std::string> args = kRun;
  args.insert(args.end(), {"--metrics", metrics});
  args.insert(args.end(), extra.begin(), extra.end());
  return run_cli(args);
}

TEST(VocabTileCli, TiledLossesEqualUntiledAndAutoTilesATableOverAnEighthOfTheBudget) {
  const CliResult whole = train(temp_path("strata_tile_whole.jsonl"), {"--vocab-tile", "0"});
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_EQ(whole.err.find("tiles of"), std::string::npos) << whole.err;
  const CliResult tiled = train(temp_path("strata_tile_1024.jsonl"), {"--vocab-tile", "1024"});
  ASSERT_EQ(tiled.exit_code, 0) << tiled.err;
  EXPECT_NE(tiled.err.find("token table in 12 tiles of 1024 rows (--vocab-tile 1024)"), std::string::npos)
      << tiled.err;
  const std::vector<double> want = metric_losses(temp_path("strata_tile_whole.jsonl"));
  ASSERT_EQ(want.size(), 3u);
  EXPECT_EQ(metric_losses(temp_path("strata_tile_1024.jsonl")), want);
  // The table is 12000 x 48 x 4 B = 2.3 MB, over 16 MiB / 8: auto tiles by at most 16 MiB / 16 =
  // 1 MiB, 5461 rows of 192 B, in whole blocks 5120.
  const CliResult automatic = train(temp_path("strata_tile_auto.jsonl"), {"--gpu-mem", "16MiB"});
  ASSERT_EQ(automatic.exit_code, 0) << automatic.err;
  EXPECT_NE(automatic.err.find("in 3 tiles of 5120 rows (--vocab-tile auto)"), std::string::npos) << automatic.err;
  EXPECT_EQ(metric_losses(temp_path("strata_tile_auto.jsonl")), want);
}

// A tied table takes the head's gradient first and the embedding's last, so with the gradient sums
// on NVMe each of its 12 tiles holds a spill buffer through the backward: 14 buffers, the losses
// still the untiled run's (3 buffers, the untiled count, stopped the first step).
TEST(VocabTileCli, TiedTilesWithTheGradientsOnNvmeTrainTheUntiledLosses) {
  const std::string dir = temp_path("strata_tile_nvme");
  std::filesystem::create_directories(dir);
  const std::vector<std::string> nvme = {"--offload-grad", "nvme", "--nvme-path", dir};
  std::vector<std::string> whole_args = nvme, tiled_args = nvme;
  whole_args.insert(whole_args.end(), {"--vocab-tile", "0"});
  tiled_args.insert(tiled_args.end(), {"--vocab-tile", "1024"});
  const CliResult whole = train(temp_path("strata_tile_nvme_whole.jsonl"), whole_args);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_NE(whole.err.find("accumulated through 3 pinned buffers"), std::string::npos) << whole.err;
  const CliResult tiled = train(temp_path("strata_tile_nvme_1024.jsonl"), tiled_args);
  ASSERT_EQ(tiled.exit_code, 0) << tiled.err;
  EXPECT_NE(tiled.err.find("accumulated through 14 pinned buffers"), std::string::npos) << tiled.err;
  const std::vector<double> want = metric_losses(temp_path("strata_tile_nvme_whole.jsonl"));
  ASSERT_EQ(want.size(), 3u);
  EXPECT_EQ(metric_losses(temp_path("strata_tile_nvme_1024.jsonl")), want);
  std::filesystem::remove_all(dir);
}

TEST(VocabTileCli, ATileOfPartBlocksIsRefused) {
  const CliResult r = train(temp_path("strata_tile_bad.jsonl"), {"--vocab-tile", "1000"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("vocab_tile 1000"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("multiple of 1024"), std::string::npos) << r.err;
}

}  // namespace vocab_tile_cli_test
}  // namespace strata
