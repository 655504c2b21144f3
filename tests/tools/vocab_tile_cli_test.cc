// `strata train --vocab-tile`: a tiled fp32 run gives the untiled run's losses bit for bit and
// says how it tiled; `auto` tiles a paged table only when the run does not fit --gpu-mem whole; a tile that is not
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

// gpt2-tiny (C = 48) with a 12000-token vocabulary, or `vocab` (the built-in corpus uses the first 256).
const std::vector<std::string> kRun = {"train", "--device",      "cpu", "--steps",      "3", "--micro-batch", "1",
                                       "--seq", "16",            "--eval-every", "0", "--offload-param", "cpu"};

CliResult train(const std::string& metrics, std::vector<std::string> extra, const std::string& vocab = "12000") {
  std::vector<std::string> args = kRun;
  args.insert(args.end(), {"--vocab", vocab, "--metrics", metrics});
  args.insert(args.end(), extra.begin(), extra.end());
  return run_cli(args);
}

TEST(VocabTileCli, TiledLossesEqualUntiledAndAutoTilesOnlyATableThatDoesNotFitWhole) {
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
  // The 2.3 MB table (12000 x 48 x 4 B) fits 16 MiB whole: auto leaves it whole.
  const CliResult fits = train(temp_path("strata_tile_auto_fits.jsonl"), {"--gpu-mem", "16MiB"});
  ASSERT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_EQ(fits.err.find("tiles of"), std::string::npos) << fits.err;
  EXPECT_EQ(metric_losses(temp_path("strata_tile_auto_fits.jsonl")), want);
  // 50000 rows (9.6 MB, a weight and a gradient slot of it: 22 MiB in all) do not: auto cuts the
  // fewest tiles that fit, 4 (two slots of 3 tiles' 17 blocks would not), as evenly as whole
  // blocks allow: 13 blocks each (12500 rows rounded up).
  const CliResult w = train(temp_path("strata_tile_big_whole.jsonl"), {"--vocab-tile", "0"}, "50000");
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const CliResult a = train(temp_path("strata_tile_big_auto.jsonl"), {"--gpu-mem", "16MiB"}, "50000");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.err.find("in 4 tiles of 13312 rows (--vocab-tile auto)"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("tiling auto: the token table in 4 tiles of 13312 rows (= --vocab-tile 13312): untiled the "
                       "run needs "),
            std::string::npos)
      << a.err;
  const std::vector<double> want_big = metric_losses(temp_path("strata_tile_big_whole.jsonl"));
  ASSERT_EQ(want_big.size(), 3u);
  EXPECT_EQ(metric_losses(temp_path("strata_tile_big_auto.jsonl")), want_big);
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
