// Memory-centric tiling of the MLP (ModelConfig::mlp_tiles): each layer's first MLP weight cut
// along its hidden units and its second along its output rows, each tile its own chunk. The
// layout's tiles cover each MLP tensor once, after their layer's chunk; the planner tiles a layer
// larger than the device (how auto chooses: tiling_test.cc); a model whose single layer is larger
// than the whole device budget trains with paged weights and the arena's peak under the budget, within
// fp32 rounding of the untiled run (the input gradients' sums over the hidden units and over the
// output rows are grouped by tile), and bit-identically whether the tiled weights are resident
// or paged.
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/plan/placement.h"
#include "model/plan/planner.h"
#include "model/plan/tiling.h"
#include "model/net/transformer.h"
#include "offload/tier_manager.h"
#include "tests/model/model_run.h"
#include "tests/model/tiled_training.h"

namespace strata::model {
namespace mlp_tile_test {

using testing::expect_value;
using tiled_training::Outcome;
using tiled_training::train;
using tiled_training::small_model;
using tiled_training::expect_tiles_cover;
using tiled_training::paging_status;
using tiled_training::relative_l2;

// A model whose MLPs dominate: C = 64 against H = 16000 hidden units, so one layer is 8.2 MB
// (GPT-2) or 12.3 MB (LLaMA: gate, up and down) in fp32, and its 15 tiles (uneven: 16000 and 64
// rows do not divide by 15) are 0.27-0.55 MB each.
ModelConfig mlp_heavy(Arch arch, int64_t tiles) {
  ModelConfig c = small_model(arch, "mlps", 512, 2, 16000);
  c.mlp_tiles = tiles;
  return c;
}

uint64_t layer_bytes(const ModelConfig& c) {
  ModelConfig whole = c;
  whole.mlp_tiles = 0;
  const ParamLayout layout = build_param_layout(whole, 4).value();
  return layout.chunks[layout.embedding_chunks()].bytes;
}

TEST(MlpTileLayout, TilesCoverEachMlpTensorOnceAfterTheirLayer) {
  for (const Arch arch : {Arch::gpt2, Arch::llama}) {
    const ModelConfig c = mlp_heavy(arch, 15);
    const ParamLayout layout = expect_value(build_param_layout(c, 4));
    const ParamLayout whole = expect_value(build_param_layout(mlp_heavy(arch, 0), 4));
    EXPECT_EQ(layout.total_elements(), parameter_count(c));
    EXPECT_EQ(layout.layer_chunks(), 31u);
    EXPECT_EQ(whole.layer_chunks(), 1u);
    EXPECT_EQ(layout.chunks.size(), whole.chunks.size() + 2 * 30);
    const size_t first = layout.embedding_chunks();
    EXPECT_EQ(layout.chunks[first].name, "layer 0");
    EXPECT_EQ(layout.chunks[first + 1].name, "layer 0 mlp in tile 1/15");
    EXPECT_EQ(layout.chunks[first + 16].name, "layer 0 mlp out tile 1/15");
    EXPECT_EQ(layout.chunks[first + 31].name, "layer 1");
    EXPECT_EQ(layout.chunks[first + 15].kind, ChunkKind::mlp_in);
    EXPECT_EQ(layout.chunks[first + 15].row_begin, 14 * 16000 / 15);
    EXPECT_EQ(layout.chunks[first + 15].rows, 16000 - 14 * 16000 / 15);
    EXPECT_EQ(layout.chunks[first + 30].rows, 64 - 14 * 64 / 15);
    EXPECT_EQ(layout.head_chunks(), 1u);
    expect_tiles_cover(layout, whole);
    for (const ParamSpec& p : layout.params) {  // every MLP tensor is tiled
      const ChunkKind kind = layout.chunks[p.chunk].kind;
      if (kind == ChunkKind::mlp_in || kind == ChunkKind::mlp_out) EXPECT_FALSE(p.whole()) << p.name;
    }
  }
  ModelConfig bad = mlp_heavy(Arch::llama, 65);  // more tiles than the 64 output rows
  EXPECT_EQ(validate(bad).code(), Code::invalid_argument);
  EXPECT_NE(validate(bad).message().find("mlp_tiles 65"), std::string::npos) << validate(bad).message();
}

// The planner takes the run's tiling: a layer over the whole device budget fits once its MLP is
// tiled (auto), and where whole MLPs were asked for it says tiling would make it fit.
TEST(MlpTilePlan, ThePlannerTilesALayerLargerThanTheDeviceAndSuggestsItWhenRefused) {
  const ModelConfig c = mlp_heavy(Arch::llama, 0);
  TrainOptions o;
  o.micro_batch = 1;
  o.seq = 16;
  const Hardware h{.gpu_bytes = layer_bytes(c) / 10 * 9, .cpu_bytes = 8ull << 30, .nvme_bytes = 0};
  const Plan tiled = expect_value(make_plan(c, o, h, {}));
  EXPECT_TRUE(tiled.fits);
  EXPECT_NE(tiled.chosen.options.weight_home, Tier::device);
  EXPECT_LE(tiled.chosen.bytes.tier(Tier::device), h.gpu_bytes);
  o.mlp_tiles = 0;
  const Plan whole = expect_value(make_plan(c, o, h, {}));
  EXPECT_FALSE(whole.fits);
  // The suggestion names the fewest tiles that fit, with the plan's numbers.
  const ModelConfig chosen = tiled.chosen.model;
  ASSERT_GT(chosen.mlp_tiles, 1);
  bool suggested = false;
  for (const PlanSuggestion& s : whole.suggestions)
    suggested |= s.change == "--mlp-tiles " + std::to_string(chosen.mlp_tiles) && s.fits &&
                 s.effect.find(tiling_summary(chosen)) != std::string::npos;
  EXPECT_TRUE(suggested);
  o.mlp_tiles = 65;
  EXPECT_EQ(make_plan(c, o, h, {}).status().code(), Code::invalid_argument);
}

// Paged MLP tiles under checkpointing: the backward fetches each recomputed layer's first-weight
// tiles twice (for the recomputation, then for the backward), and the traffic counts it.
TEST(MlpTilePlan, CheckpointingFetchesTheFirstWeightsTilesTwice) {
  const ModelConfig c = mlp_heavy(Arch::llama, 15);
  TrainOptions o;
  o.micro_batch = 1;
  o.seq = 16;
  o.weight_home = Tier::nvme;
  const StepTraffic plain = plan_traffic(c, o);
  o.activation_checkpointing = true;
  const StepTraffic recomputed = plan_traffic(c, o);
  const ParamLayout layout = expect_value(build_param_layout(c, 4));
  uint64_t first_layer_in = 0;  // layer 0's: the one of the two layers that is recomputed
  for (const ChunkSpec& chunk : layout.chunks)
    if (chunk.kind == ChunkKind::mlp_in && chunk.layer == 0) first_layer_in += chunk.bytes;
  EXPECT_GT(first_layer_in, 8'000'000u);  // gate and up: 2 x 16000 x 64 x 4 B
  EXPECT_EQ(recomputed.h2d - plain.h2d, first_layer_in);
  EXPECT_EQ(recomputed.nvme_read - plain.nvme_read, first_layer_in);
}

class MlpTileTraining : public ::testing::TestWithParam<Arch> {};

// The device budget is 90% of ONE untiled layer: paged whole, the layer's slot alone does not fit;
// in 15 tiles the run trains under it. The tolerance: each step's input gradients d fc_act (a sum
// over C = 64 output rows) and d ln2 (over H = 16000 hidden units) are added in 15 partial GEMMs
// instead of one (and a BLAS may block a GEMM of other width differently even in the forward),
// which regroups fp32 sums: relative differences of ~1e-7 per value. AdamW normalises each update
// by the gradient's own scale, so a parameter whose gradient is only rounding noise may move by
// up to lr per step either way: the masters are compared as tensors (relative L2, measured at
// most 3.5e-5 after 6 steps at lr 3e-3), the losses value by value (measured within 8e-8).
TEST_P(MlpTileTraining, ALayerLargerThanTheBudgetTrainsWithinFp32RoundingOfUntiled) {
  const ModelConfig whole = mlp_heavy(GetParam(), 0);
  const ModelConfig tiled = mlp_heavy(GetParam(), 15);
  const uint64_t budget = layer_bytes(whole) / 10 * 9;
  const Outcome want = train(whole, DType::f32, 0, 6);
  const Outcome got = train(tiled, DType::f32, budget, 6);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) EXPECT_NEAR(got.losses[i], want.losses[i], 1e-6 * want.losses[i]) << i;
  for (const auto& [name, values] : want.masters) {
    ASSERT_EQ(got.masters.at(name).size(), values.size()) << name;
    EXPECT_LT(relative_l2(got.masters.at(name), values), 2e-4) << name;
  }
  EXPECT_LE(got.arena_peak, budget);
  EXPECT_GT(got.arena_peak, budget / 3);  // the tiles and the activations did take the room
  // Untiled, the same budget cannot even page the weights: two layer slots are over it.
  EXPECT_EQ(paging_status(whole, budget), Code::out_of_memory);
}

// Where the tiled weights live changes no bit: resident and paged tiled runs are identical.
TEST_P(MlpTileTraining, TiledRunsAreTheSameBitsResidentOrPaged) {
  const ModelConfig tiled = mlp_heavy(GetParam(), 15);
  const Outcome resident = train(tiled, DType::f32, 0, 4);
  const Outcome paged = train(tiled, DType::f32, layer_bytes(tiled) / 10 * 9, 4);
  EXPECT_EQ(paged.losses, resident.losses);
  EXPECT_EQ(paged.norms, resident.norms);
  for (const auto& [name, values] : resident.masters)
    EXPECT_EQ(0, std::memcmp(paged.masters.at(name).data(), values.data(), values.size() * sizeof(float))) << name;
}

// bf16 rounds each tile's partial input gradient to 16 bits before the next adds to it, so the
// regrouping costs bf16 roundings: the losses stay within 2% over a few steps.
TEST_P(MlpTileTraining, Bf16TiledTracksUntiledWithinBf16Roundings) {
  const Outcome want = train(mlp_heavy(GetParam(), 0), DType::bf16, 0, 4);
  const Outcome got = train(mlp_heavy(GetParam(), 15), DType::bf16, layer_bytes(mlp_heavy(GetParam(), 0)), 4);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) EXPECT_NEAR(got.losses[i], want.losses[i], 0.02 * want.losses[i]);
}

INSTANTIATE_TEST_SUITE_P(Archs, MlpTileTraining, ::testing::Values(Arch::gpt2, Arch::llama),
                         [](const ::testing::TestParamInfo<Arch>& info) {
                           return std::string(info.param == Arch::gpt2 ? "Gpt2" : "Llama");
                         });

}  // namespace mlp_tile_test
}  // namespace strata::model
