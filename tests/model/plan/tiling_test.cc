// Memory-centric tiling under a device budget (model/plan/tiling.h): --mlp-tiles / --vocab-tile auto tile
// a paged run only when its untiled working set does not fit but a tiled one does, into the fewest
// tiles that fit (the fewest chunks, the fewer MLP tiles on a tie, vocabulary tiles cut as evenly
// as whole blocks allow) -- checked against every tiling auto may choose; the planner takes the
// same tiles.
// And the budget sweep: from a small model's tiled minimum to its untiled need, every budget trains
// tiled under the budget, with the tiles the plan chose, the arena the plan predicted and the
// untiled run's losses and masters within fp32 rounding (mlp_tile_test.cc's tolerance).
#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "model/plan/placement.h"
#include "model/plan/planner.h"
#include "model/plan/tiling.h"
#include "tests/model/model_run.h"
#include "tests/model/tiled_training.h"

namespace strata::model {
namespace tiling_test {

using testing::expect_value;
using tiled_training::Outcome;
using tiled_training::small_model;
using tiled_training::relative_l2;
using tiled_training::train;

// The options of tiled_training::train's runs: fp32, one sequence of 16 tokens, checkpointing,
// weights homed in pinned memory and paged through two layer slots, the optimizer on the CPU.
TrainOptions paged_run() {
  TrainOptions o;
  o.dtype = DType::f32;
  o.micro_batch = uint64_t(tiled_training::kB);
  o.seq = uint64_t(tiled_training::kT);
  o.activation_checkpointing = true;
  o.weight_home = Tier::cpu;
  return o;
}

ModelConfig tiled(ModelConfig c, int64_t vocab_tile, int64_t mlp_tiles) {
  c.vocab_tile = vocab_tile;
  c.mlp_tiles = mlp_tiles;
  return c;
}

uint64_t device_bytes(const ModelConfig& c, const TrainOptions& o) { return estimate_device_bytes(c, o).total(); }

// A GPT-2 whose MLPs dominate: C = 64, H = 4096 (a layer 3.2 MB in fp32, its MLP 2.1 MB of it),
// a 512-token table (131 KB).
ModelConfig mlp_heavy() { return small_model(Arch::gpt2, "mlps", 512, 2, 4096); }
// A LLaMA whose tables and MLPs are both heavy: two untied 8492 x 64 tables (2.2 MB each in fp32)
// and SwiGLU MLPs of H = 2048 (1.6 MB a layer).
ModelConfig both_heavy() { return small_model(Arch::llama, "both", 8 * kVocabTileBlock + 300, 2, 2048); }

TEST(TilingRule, AutoTilesOnlyWhenTheUntiledRunDoesNotFit) {
  const ModelConfig c = mlp_heavy();
  const TrainOptions o = paged_run();
  const uint64_t need = device_bytes(c, o);
  EXPECT_EQ(expect_value(with_tiling(c, o, need)).mlp_tiles, 0);  // untiled, it fits: no tiles
  EXPECT_EQ(expect_value(with_tiling(c, o, 1ull << 30)).mlp_tiles, 0);
  EXPECT_EQ(expect_value(with_tiling(c, o, 0)).mlp_tiles, 0);  // no budget known: no tiles
  const ModelConfig one_short = expect_value(with_tiling(c, o, need - 1));
  EXPECT_EQ(one_short.mlp_tiles, 2);  // a byte short: the fewest tiles, 2
  EXPECT_EQ(one_short.vocab_tile, 0);  // the table is one block: no vocabulary tiles
  EXPECT_LE(device_bytes(one_short, o), need - 1);
  TrainOptions resident = o;  // every chunk on the device, tiled or not: tiles cannot help
  resident.weight_home = Tier::device;
  EXPECT_EQ(expect_value(with_tiling(c, resident, need / 2)).mlp_tiles, 0);
  TrainOptions given = o;  // given counts are kept, whatever the budget
  given.mlp_tiles = 5;
  EXPECT_EQ(expect_value(with_tiling(c, given, 1ull << 30)).mlp_tiles, 5);
  given.mlp_tiles = 0;
  EXPECT_EQ(expect_value(with_tiling(c, given, need / 2)).mlp_tiles, 0);
  given.mlp_tiles = 65;  // more than the 64 output rows
  const Status too_many = with_tiling(c, given, need).status();
  EXPECT_EQ(too_many.code(), Code::invalid_argument);
  EXPECT_NE(too_many.message().find("--mlp-tiles 65"), std::string::npos) << too_many.message();
  EXPECT_NE(too_many.message().find("at most 64 tiles"), std::string::npos) << too_many.message();
  // Below the finest tiling (kMaxAutoMlpTiles at most) nothing fits: no tiles are cut.
  const Tiling finest = fewest_fitting_tiles(c, o, 1);
  EXPECT_EQ(finest.mlp_tiles, 64);
  EXPECT_LT(finest.device_bytes, need / 2);
  EXPECT_EQ(expect_value(with_tiling(c, o, finest.device_bytes)).mlp_tiles, 64);
  EXPECT_EQ(expect_value(with_tiling(c, o, finest.device_bytes - 1)).mlp_tiles, 0);
}

// Every tiling with_tiling's auto may choose for `c` (MLP 0, 2 .. 64; vocabulary whole or whole
// blocks under V) with its device bytes.
struct Candidate {
  ModelConfig config;
  uint64_t bytes = 0;
  size_t chunks = 0;  // of its layout
};
std::vector<Candidate> every_auto_tiling(const ModelConfig& c, const TrainOptions& o) {
  std::vector<Candidate> all;
  for (int64_t m = 0; m <= kMaxAutoMlpTiles; m = m == 0 ? 2 : m + 1)
    for (int64_t v = 0; v < c.vocab; v += kVocabTileBlock)
      all.push_back({tiled(c, v, m), device_bytes(tiled(c, v, m), o),
                     build_param_layout(tiled(c, v, m), 4)->chunks.size()});
  return all;
}

// The fewest tiles that fit, by brute force: the layout with the fewest chunks, then the fewer MLP
// tiles, then the smallest tile of that count (the evenest cut); none fits: untiled.
TEST(TilingRule, TheFewestTilesThatFitAreTheFewestChunks) {
  const ModelConfig c = both_heavy();
  const TrainOptions o = paged_run();
  const std::vector<Candidate> all = every_auto_tiling(c, o);
  const uint64_t need = device_bytes(c, o);
  uint64_t least = need;
  for (const Candidate& k : all) least = std::min(least, k.bytes);
  ASSERT_LT(least, need / 2);
  bool vocab_alone = false, both = false;
  for (int step = 0; step <= 40; ++step) {
    const uint64_t budget = least - 1000 + (need + 1000 - least) * uint64_t(step) / 40;
    const Candidate* want = nullptr;
    const auto order = [](const Candidate& k) {
      return std::tuple(k.chunks, mlp_tiles(k.config), k.config.vocab_tile);
    };
    for (const Candidate& k : all)
      if (k.bytes <= budget && (want == nullptr || order(k) < order(*want))) want = &k;
    const ModelConfig got = expect_value(with_tiling(c, o, budget));
    if (want == nullptr) {
      EXPECT_EQ(got.mlp_tiles, 0) << budget;
      EXPECT_EQ(got.vocab_tile, 0) << budget;
      EXPECT_EQ(fewest_fitting_tiles(c, o, budget).device_bytes, least) << budget;
      continue;
    }
    EXPECT_EQ(got.mlp_tiles, want->config.mlp_tiles) << budget;
    EXPECT_EQ(got.vocab_tile, want->config.vocab_tile) << budget;
    vocab_alone |= got.vocab_tile > 0 && got.mlp_tiles == 0;
    both |= got.vocab_tile > 0 && got.mlp_tiles > 1;
  }
  EXPECT_TRUE(vocab_alone) << "no budget where the tables' tiles alone fit";
  EXPECT_TRUE(both) << "no budget that needed both tilings";
  // A given axis is kept and the other searched around it.
  TrainOptions whole_tables = o;
  whole_tables.vocab_tile = 0;
  const ModelConfig mlp_only = expect_value(with_tiling(c, whole_tables, need - 1));
  EXPECT_EQ(mlp_only.vocab_tile, 0);
  EXPECT_GT(mlp_only.mlp_tiles, 1);
  EXPECT_LE(device_bytes(mlp_only, o), need - 1);
}

// For a refusal's suggestions: auto's tiles whatever tiling was given.
TEST(TilingRule, TheFewestFittingTilesSetTheGivenTilingAside) {
  const ModelConfig c = both_heavy();
  TrainOptions given = paged_run();
  given.mlp_tiles = 0;
  given.vocab_tile = 0;
  const uint64_t need = device_bytes(c, given);
  for (const uint64_t budget : {need / 3, need / 2, need - 1}) {
    const ModelConfig auto_tiles = expect_value(with_tiling(c, paged_run(), budget));
    const Tiling t = fewest_fitting_tiles(c, given, budget);
    EXPECT_EQ(t.mlp_tiles, auto_tiles.mlp_tiles) << budget;
    EXPECT_EQ(t.vocab_tile, auto_tiles.vocab_tile) << budget;
    EXPECT_EQ(t.device_bytes, device_bytes(auto_tiles, given)) << budget;
    EXPECT_TRUE(t.fits) << budget;
    EXPECT_TRUE(t.tiled()) << budget;
  }
  const Tiling none = fewest_fitting_tiles(c, given, 1);
  EXPECT_FALSE(none.fits);
  EXPECT_EQ(none.mlp_tiles, kMaxAutoMlpTiles);
  EXPECT_EQ(none.vocab_tile, kVocabTileBlock);
  EXPECT_FALSE(fewest_fitting_tiles(c, given, need).tiled());  // fits untiled
  TrainOptions resident = given;
  resident.weight_home = Tier::device;
  EXPECT_FALSE(fewest_fitting_tiles(c, resident, need / 2).tiled());
  EXPECT_FALSE(fewest_fitting_tiles(c, resident, need / 2).fits);
  // The flags that ask for a tiling where the given options would not take it.
  EXPECT_EQ(tiling_flags(tiled(c, 2048, 80), paged_run()), "--mlp-tiles 80 --vocab-tile 2048");
  EXPECT_EQ(tiling_flags(tiled(c, 0, 80), given), "--mlp-tiles 80");
  given.mlp_tiles = 80;
  EXPECT_EQ(tiling_flags(tiled(c, 0, 80), given), "");
  EXPECT_EQ(tiling_flags(tiled(c, 0, 0), given), "--mlp-tiles 0");
  EXPECT_EQ(tiling_summary(tiled(c, 3 * kVocabTileBlock, 2)),
            "every layer's MLP in 2 tiles per weight and the token table and the head in 3 tiles of 3072 rows");
  EXPECT_EQ(tiling_summary(tiled(mlp_heavy(), 0, 5)), "every layer's MLP in 5 tiles per weight");
  EXPECT_EQ(tiling_summary(c), "whole tables and MLPs");
}

// The search sizes a one-layer model (tiling.cc): paged, the layers beyond the first add only
// their activations, the same whatever the tiles.
TEST(TilingRule, TheLayersBeyondTheFirstAddTheSameBytesWhateverTheTiles) {
  ModelConfig c = both_heavy();
  c.n_layer = 5;
  ModelConfig one = c;
  one.n_layer = 1;
  for (const bool checkpointing : {false, true}) {
    TrainOptions o = paged_run();
    o.activation_checkpointing = checkpointing;
    const uint64_t others = device_bytes(c, o) - device_bytes(one, o);
    EXPECT_GT(others, 0u);
    for (const auto& [v, m] : {std::pair<int64_t, int64_t>{0, 2}, {1024, 0}, {3072, 7}, {1024, 64}})
      EXPECT_EQ(device_bytes(tiled(c, v, m), o) - device_bytes(tiled(one, v, m), o), others) << v << " " << m;
  }
}

// From the tiled minimum to the untiled need, in eight steps and at the bytes of a few tile counts:
// every budget trains, in the fewest tiles that fit, as the plan says, in the arena the plan
// predicts, within fp32 rounding of the untiled run (losses 1e-6 relative, masters 2e-4 relative
// L2 after 3 steps: mlp_tile_test.cc's tolerance); the untiled need itself trains untiled, and a
// byte below the tiled minimum does not fit.
TEST(TilingSweep, EveryBudgetFromTheTiledMinimumToTheUntiledNeedTrainsTiledAsPlanned) {
  constexpr int kSteps = 3;
  const ModelConfig c = mlp_heavy();
  const TrainOptions o = paged_run();
  const uint64_t need = device_bytes(c, o);
  const uint64_t least = fewest_fitting_tiles(c, o, 1).device_bytes;
  const Outcome want = train(c, DType::f32, 0, kSteps);
  const PlanFixed all_fixed{.weights = true, .optimizer = true, .gradients = true, .checkpointing = true};
  const Hardware room{.gpu_bytes = 0, .cpu_bytes = 8ull << 30, .nvme_bytes = 0};
  // Eight even steps, and the bytes of 32, 16, 8, 4 and 3 tiles (the budget where each just fits).
  std::vector<uint64_t> budgets;
  for (int step = 0; step <= 8; ++step) budgets.push_back(least + (need - least) * uint64_t(step) / 8);
  for (const int64_t n : {32, 16, 8, 4, 3}) budgets.push_back(device_bytes(tiled(c, 0, n), o));
  std::sort(budgets.begin(), budgets.end());
  int64_t last_tiles = kMaxAutoMlpTiles + 1;
  for (const uint64_t budget : budgets) {
    SCOPED_TRACE(::testing::Message() << "budget " << budget << " of " << least << " .. " << need);
    const ModelConfig t = expect_value(with_tiling(c, o, budget));
    EXPECT_EQ(t.mlp_tiles > 1, budget < need);
    EXPECT_LE(t.mlp_tiles, last_tiles);  // more room, no more tiles
    if (t.mlp_tiles > 2) EXPECT_GT(device_bytes(tiled(c, 0, t.mlp_tiles - 1), o), budget);  // and no fewer fit
    last_tiles = t.mlp_tiles;
    Hardware h = room;
    h.gpu_bytes = budget;
    const Plan plan = expect_value(make_plan(c, o, h, all_fixed));
    ASSERT_TRUE(plan.fits);
    EXPECT_EQ(plan.chosen.model.mlp_tiles, t.mlp_tiles);
    EXPECT_EQ(plan.chosen.model.vocab_tile, t.vocab_tile);
    const Outcome got = train(t, DType::f32, budget, kSteps);
    ASSERT_EQ(got.losses.size(), want.losses.size());
    for (size_t i = 0; i < want.losses.size(); ++i) EXPECT_NEAR(got.losses[i], want.losses[i], 1e-6 * want.losses[i]);
    for (const auto& [name, values] : want.masters) EXPECT_LT(relative_l2(got.masters.at(name), values), 2e-4) << name;
    EXPECT_EQ(got.arena_peak, plan.chosen.bytes.tier(Tier::device));
    EXPECT_LE(got.arena_peak, budget);
  }
  EXPECT_EQ(last_tiles, 0);
  Hardware below = room;
  below.gpu_bytes = least - 1;
  EXPECT_FALSE(expect_value(make_plan(c, o, below, all_fixed)).fits);
}

}  // namespace tiling_test
}  // namespace strata::model
