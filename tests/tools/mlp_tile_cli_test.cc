// `strata train --mlp-tiles`: a run with every layer's MLP in tiles, weights, gradients and
// optimizer state all on NVMe, says how it tiled and gives the untiled run's losses to fp32
// rounding (the tiles regroup the MLP's input-gradient sums); a resume keeps the checkpoint's
// tiling unless told otherwise; a tile count the model cannot cut
// is refused before any work, naming the flag and the most it takes.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tools/run_cli.h"

namespace strata {
namespace mlp_tile_cli_test {

using test::CliResult;
using test::run_cli;
using test::metric_losses;
using test::temp_path;

// gpt2-tiny and llama-tiny, 3 steps on the CPU backend.
std::vector<std::string> run_args(const std::string& preset, const std::string& metrics) {
  return {"train", "--device", "cpu", "--preset", preset, "--steps", "3", "--micro-batch", "1", "--seq", "16",
          "--eval-every", "0", "--metrics", metrics};
}

TEST(MlpTileCli, TiledOnNvmeTrainsTheUntiledLossesToFp32Rounding) {
  for (const std::string preset : {"gpt2-tiny", "llama-tiny"}) {
    const std::string dir = temp_path("strata_mlp_tile_nvme_" + preset);
    std::filesystem::create_directories(dir);
    std::vector<std::string> whole = run_args(preset, temp_path("strata_mlp_whole.jsonl"));
    whole.insert(whole.end(), {"--mlp-tiles", "0"});
    std::vector<std::string> tiled = run_args(preset, temp_path("strata_mlp_tiled.jsonl"));
    tiled.insert(tiled.end(), {"--mlp-tiles", "3", "--offload-param", "nvme", "--offload-optimizer", "nvme",
                               "--offload-grad", "nvme", "--nvme-path", dir});
    const CliResult w = run_cli(whole);
    ASSERT_EQ(w.exit_code, 0) << w.err;
    EXPECT_EQ(w.err.find("MLP in"), std::string::npos) << w.err;
    const CliResult t = run_cli(tiled);
    ASSERT_EQ(t.exit_code, 0) << t.err;
    EXPECT_NE(t.err.find("every layer's MLP in 3 tiles per weight (--mlp-tiles 3)"), std::string::npos) << t.err;
    const std::vector<double> want = metric_losses(temp_path("strata_mlp_whole.jsonl"));
    const std::vector<double> got = metric_losses(temp_path("strata_mlp_tiled.jsonl"));
    ASSERT_EQ(want.size(), 3u) << preset;
    ASSERT_EQ(got.size(), 3u) << preset;
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * want[i]) << preset << " step " << i + 1;
    std::filesystem::remove_all(dir);
  }
}

// A resume with --mlp-tiles auto (the default) takes the checkpoint's tiling, whatever the budget
// would choose (the moments are stored per chunk), and continues the tiled run bit for bit.
TEST(MlpTileCli, AnAutoResumeKeepsTheCheckpointsTiling) {
  const std::string dir = temp_path("strata_mlp_tile_ckpt");
  std::filesystem::remove_all(dir);
  auto run = [&](const std::string& metrics, std::vector<std::string> extra) {
    std::vector<std::string> args = run_args("llama-tiny", metrics);
    args.insert(args.end(), {"--lr-schedule", "constant", "--warmup-steps", "0"});
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  const std::string straight = temp_path("strata_mlp_straight.jsonl"), halves = temp_path("strata_mlp_halves.jsonl");
  const CliResult a = run(straight, {"--steps", "4", "--mlp-tiles", "3"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const CliResult b = run(halves, {"--steps", "2", "--mlp-tiles", "3", "--checkpoint-dir", dir});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const CliResult c = run(halves, {"--steps", "4", "--resume", dir});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("resume: tiled as the checkpoint was (--vocab-tile 0 --mlp-tiles 3)"), std::string::npos)
      << c.err;
  const std::vector<double> want = metric_losses(straight);
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(metric_losses(halves), want);
  // Given explicitly, another tiling is refused, naming the flag.
  const CliResult d = run(temp_path("strata_mlp_refused.jsonl"), {"--steps", "4", "--resume", dir, "--mlp-tiles", "0"});
  EXPECT_NE(d.exit_code, 0);
  EXPECT_NE(d.err.find("--mlp-tiles 3"), std::string::npos) << d.err;
  std::filesystem::remove_all(dir);
}

TEST(MlpTileCli, MoreTilesThanTheMlpHasRowsIsRefused) {
  std::vector<std::string> args = run_args("gpt2-tiny", temp_path("strata_mlp_bad.jsonl"));
  args.insert(args.end(), {"--mlp-tiles", "1000"});
  const CliResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--mlp-tiles 1000"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("at most"), std::string::npos) << r.err;
}

}  // namespace mlp_tile_cli_test
}  // namespace strata
