// `strata train` and `strata plan` with --mlp-tiles auto under budgets between a run's tiled minimum
// and its untiled need (issue 28's run, scaled down: a GPT-2 whose weights and optimizer state a
// DeepSpeed ZeRO-Infinity config homes on NVMe, no activation checkpointing): every budget trains,
// in the tiles `strata plan` names, to the untiled run's losses within fp32 rounding; the untiled
// need trains untiled; below the tiled minimum, and with whole MLPs given where they do not fit,
// the refusal names the --mlp-tiles that would fit (or help) with its numbers.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tools/run_cli.h"

namespace strata {
namespace tiling_cli_test {

using test::CliResult;
using test::metric_losses;
using test::run_cli;
using test::temp_path;

// Two layers of C = 256 with H = 8192 (a layer is 17.8 MB in fp32, mostly MLP) and 2 x 64 tokens.
// The checkpointing and gradient choices are given so that `strata plan` plans the placement
// `strata train` trains (a plan chooses what is not given).
class TilingCli : public ::testing::Test {
 protected:
  void SetUp() override {
    // Each test its own paths: ctest runs them side by side.
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    nvme_ = temp_path("strata_tiling_cli_nvme_" + test);
    std::filesystem::create_directories(nvme_);
    config_ = temp_path("strata_tiling_cli_ds_" + test + ".json");
    std::ofstream(config_) << R"({"zero_optimization": {"stage": 3,
        "offload_param": {"device": "nvme", "nvme_path": ")" << nvme_ << R"("},
        "offload_optimizer": {"device": "nvme", "nvme_path": ")" << nvme_ << R"("}}})";
  }
  void TearDown() override { std::filesystem::remove_all(nvme_); }

  std::vector<std::string> args(const std::string& command, uint64_t gpu_bytes, std::vector<std::string> more) const {
    std::vector<std::string> a = {command, "--device", "cpu", "--n-layer", "2", "--dim", "256", "--n-head", "4",
                                  "--ffn-hidden", "8192", "--vocab", "256", "--micro-batch", "2", "--seq", "64",
                                  "--config", config_, "--activation-checkpointing=false", "--offload-grad", "cpu",
                                  "--gpu-mem", std::to_string(gpu_bytes)};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  nlohmann::json plan(uint64_t gpu_bytes, std::vector<std::string> more = {}) const {
    more.push_back("--json");
    const CliResult r = run_cli(args("plan", gpu_bytes, more));
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.err;
    return nlohmann::json::parse(r.out);
  }
  CliResult train(uint64_t gpu_bytes, const std::string& metrics, std::vector<std::string> more = {}) const {
    more.insert(more.end(), {"--steps", "2", "--eval-every", "0", "--metrics", metrics});
    return run_cli(args("train", gpu_bytes, more));
  }

  std::string nvme_, config_;
};

TEST_F(TilingCli, EveryBudgetFromTheTiledMinimumToTheUntiledNeedTrainsInThePlansTiles) {
  const nlohmann::json untiled = plan(1ull << 30);
  ASSERT_TRUE(untiled.at("fits").get<bool>());
  EXPECT_EQ(untiled.at("tiling").at("mlp_tiles"), 1);
  const uint64_t need = untiled.at("gpu_bytes");
  const uint64_t least = plan(1ull << 30, {"--mlp-tiles", "64"}).at("gpu_bytes");  // auto's finest
  ASSERT_LT(least, need / 2);
  const std::string reference = temp_path("strata_tiling_cli_untiled.jsonl");
  const CliResult whole = train(need, reference);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_EQ(whole.err.find("tiles per weight"), std::string::npos) << "the untiled need trains untiled: " << whole.err;
  const std::vector<double> want = metric_losses(reference);
  ASSERT_EQ(want.size(), 2u);
  int64_t last = 65;
  for (const uint64_t budget : {least, least + (need - least) / 4, need - 1}) {
    SCOPED_TRACE(::testing::Message() << "--gpu-mem " << budget << " (tiled minimum " << least << ", untiled " << need
                                      << ")");
    const nlohmann::json p = plan(budget);
    ASSERT_TRUE(p.at("fits").get<bool>()) << p.dump(2);
    const int64_t tiles = p.at("tiling").at("mlp_tiles");
    EXPECT_GT(tiles, 1);
    EXPECT_LE(tiles, last);  // more room, no more tiles
    last = tiles;
    EXPECT_LE(p.at("gpu_bytes").get<uint64_t>(), budget);
    const std::string metrics = temp_path("strata_tiling_cli_tiled.jsonl");
    const CliResult r = train(budget, metrics);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string n = std::to_string(tiles);
    EXPECT_NE(r.err.find("every layer's MLP in " + n + " tiles per weight (--mlp-tiles auto)"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("tiling auto: every layer's MLP in " + n + " tiles per weight (= --mlp-tiles " + n +
                         "): untiled the run needs "),
              std::string::npos)
        << r.err;
    const std::vector<double> got = metric_losses(metrics);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * want[i]) << "step " << i + 1;
  }
}

TEST_F(TilingCli, TheRefusalNamesTheTilesThatWouldFitWithTheirNumbers) {
  const uint64_t need = plan(1ull << 30).at("gpu_bytes");
  const uint64_t least = plan(1ull << 30, {"--mlp-tiles", "64"}).at("gpu_bytes");
  // Whole MLPs given where they do not fit: the tiles auto would cut, within the budget.
  const uint64_t budget = (least + need) / 2;
  const nlohmann::json p = plan(budget);
  const int64_t tiles = p.at("tiling").at("mlp_tiles");
  const CliResult whole = train(budget, temp_path("strata_tiling_cli_refused.jsonl"), {"--mlp-tiles", "0"});
  EXPECT_EQ(whole.exit_code, 2) << whole.err;
  const std::string head = " needs ";
  const size_t needs = whole.err.find(head);
  ASSERT_NE(needs, std::string::npos) << whole.err;
  EXPECT_NEAR(std::strtod(whole.err.c_str() + needs + head.size(), nullptr), double(need) / (1 << 20), 0.05)
      << whole.err;
  EXPECT_NE(whole.err.find(" MiB of device memory but the budget (--gpu-mem) is", needs), std::string::npos)
      << whole.err;
  const std::string n = std::to_string(tiles);
  const std::string fix = "\n  --mlp-tiles " + n + ": every layer's MLP in " + n + " tiles per weight: needs ";
  const size_t at = whole.err.find(fix);
  ASSERT_NE(at, std::string::npos) << whole.err;
  EXPECT_NE(whole.err.find("of device memory (within the", at), std::string::npos) << whole.err;
  // `strata plan` says the same of whole MLPs.
  const nlohmann::json refused = plan(budget, {"--mlp-tiles", "0"});
  EXPECT_FALSE(refused.at("fits").get<bool>());
  bool named = false;
  for (const nlohmann::json& s : refused.at("suggestions"))
    named |= s.at("change") == "--mlp-tiles " + n && s.at("fits").get<bool>();
  EXPECT_TRUE(named) << refused.at("suggestions").dump(2);
  // Below the tiled minimum no tiling fits: the run is refused untiled, and the refusal gives the
  // finest tiling's figure beside the other ways.
  const CliResult below = train(least - (1 << 20), temp_path("strata_tiling_cli_below.jsonl"));
  EXPECT_EQ(below.exit_code, 2) << below.err;
  EXPECT_NE(below.err.find("\n  --mlp-tiles 64: the finest tiling, every layer's MLP in 64 tiles per weight: needs "),
            std::string::npos)
      << below.err;
  EXPECT_NE(below.err.find("\n  --activation-checkpointing: "), std::string::npos) << below.err;
  EXPECT_NE(below.err.find("\n  --gpu-mem "), std::string::npos) << below.err;
  EXPECT_EQ(below.err.find("| loss"), std::string::npos) << below.err;
}

}  // namespace tiling_cli_test
}  // namespace strata
