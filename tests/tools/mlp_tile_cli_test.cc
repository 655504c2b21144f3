// `strata train --mlp-tiles`: a run with every layer's MLP in tiles, weights, gradients and
// optimizer state all on NVMe, says how it tiled and gives the untiled run's losses to fp32
// rounding (the tiles regroup the MLP's input-gradient sums); a tile count the model cannot cut
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
