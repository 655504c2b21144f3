// Closed-form size bounds (model/net/size_bounds.h) and the dimension limits (model_config.h):
//  - the floor is at most what the planner sizes for every placement and tiling (so nothing that
//    fits is refused) and is exactly its stated formula;
//  - a model no machine holds is refused with the numbers, in microseconds, and one that fits is not;
//  - each dimension above its limit is refused naming the limit, at the limit accepted.
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/net/model_config.h"
#include "model/plan/planner.h"
#include "model/net/size_bounds.h"
#include "model/train/train_options.h"

namespace strata::model {
namespace {

bool mentions(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TrainOptions small_batch(DType dtype, AdamStates states) {
  TrainOptions o;
  o.micro_batch = 2;
  o.seq = 16;
  o.dtype = dtype;
  o.adam_states = states;
  return o;
}

TEST(SizeBounds, TheFloorIsBelowWhatEveryPlacementAndTilingTakes) {
  struct Case {
    std::string preset;
    ModelOverrides over;
    DType dtype;
    AdamStates states;
    int64_t vocab_tile, mlp_tiles;  // the run's options (-1 auto)
  };
  const std::vector<Case> cases = {
      {"gpt2-tiny", {}, DType::f32, AdamStates::f32, -1, -1},
      {"llama-tiny", {}, DType::bf16, AdamStates::q8, -1, -1},
      {"llama-tiny", {}, DType::f16, AdamStates::f32, 0, 4},
      {"gpt2-tiny", {.vocab = 4096, .dim = 64, .n_head = 4}, DType::bf16, AdamStates::f32, 1024, 2},
  };
  // A small device: the auto tilings cut what they can.
  const Hardware hw{.gpu_bytes = 256 << 10, .cpu_bytes = 1ull << 30, .nvme_bytes = 1ull << 30};
  for (const Case& c : cases) {
    const ModelConfig mc = model_config_with(c.preset, c.over).value();
    TrainOptions base = small_batch(c.dtype, c.states);
    base.vocab_tile = c.vocab_tile;
    base.mlp_tiles = c.mlp_tiles;
    const SizeFloor f = size_floor(mc, base);
    const uint64_t esize = dtype_size(c.dtype), moments = c.states == AdamStates::f32 ? 8 : 2;
    EXPECT_EQ(f.params, parameter_count(mc));
    EXPECT_EQ(f.state_bytes, f.params * (esize + 4 + 4 + moments)) << mc.name;
    EXPECT_EQ(f.activation_bytes, 2u * 16u * (uint64_t(mc.n_layer + 1) * mc.dim + mc.vocab) * esize) << mc.name;
    EXPECT_EQ(f.layer_bytes, uint64_t(mc.qkv_rows() + mc.dim) * uint64_t(mc.dim) * esize) << mc.name;
    const std::vector<TrainOptions> placements = plan_placements(base, {});
    ASSERT_GE(placements.size(), 12u);
    for (const TrainOptions& o : placements) {
      const PlanCandidate p = evaluate_placement(mc, o, hw);
      const uint64_t all = p.bytes.tier(Tier::device) + p.bytes.tier(Tier::cpu) + p.bytes.tier(Tier::nvme);
      EXPECT_LE(f.state_bytes, all) << mc.name << ": " << placement_summary(o);
      EXPECT_LE(f.device_bytes, p.bytes.tier(Tier::device)) << mc.name << ": " << placement_summary(o);
    }
  }
}

TEST(SizeBounds, AModelNoMachineHoldsIsRefusedWithTheNumbersAndOneThatFitsIsNot) {
  const BudgetSources from = {"--gpu-mem", "--cpu-mem", "--nvme-mem"};
  const Hardware workstation{.gpu_bytes = 24ull << 30, .cpu_bytes = 128ull << 30, .nvme_bytes = 2'000'000'000'000};
  const TrainOptions o = small_batch(DType::bf16, AdamStates::f32);
  EXPECT_TRUE(check_size_floor(model_preset("llama-70b").value(), o, workstation, from, "this machine").is_ok());

  const auto start = std::chrono::steady_clock::now();
  const ModelConfig wide = model_config_with("gpt2-tiny", {.dim = kMaxWidth}).value();
  const Status s = check_size_floor(wide, o, workstation, from, "the machine described");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(s.is_ok());
  EXPECT_LT(seconds, 0.1);  // microseconds of arithmetic; the bound leaves room for a loaded machine
  EXPECT_EQ(s.code(), Code::out_of_memory);
  const uint64_t params = parameter_count(wide);
  for (const std::string& part : std::vector<std::string>{
           "gpt2-tiny[dim=1048576] fits no placement on the machine described: its ",
        " parameters (" + std::to_string(params) + ")", "18 bytes per parameter in bf16 with fp32 moments",
        "gpu 24 GiB (--gpu-mem), cpu 128 GiB (--cpu-mem), nvme 1.82 TiB (--nvme-mem)"})
    EXPECT_TRUE(mentions(s.message(), part)) << part << "\n" << s.message();

  // The planner sizes llama-70b in milliseconds; a trillion-parameter model is refused without it.
  EXPECT_TRUE(cheap_to_plan(size_floor(model_preset("llama-70b").value(), o), o));
  EXPECT_FALSE(cheap_to_plan(size_floor(wide, o), o));

  // 8-bit moments are named when they would fit, and the device floor when only the device is short.
  const ModelConfig big = model_preset("llama-70b").value();
  const Hardware small_disk{.gpu_bytes = 24ull << 30, .cpu_bytes = 128ull << 30, .nvme_bytes = 1'000'000'000'000};
  const Status q8 = check_size_floor(big, o, small_disk, from, "this machine");
  EXPECT_TRUE(mentions(q8.message(), "--optimizer-type adamw8bit (then at least ")) << q8.message();
  TrainOptions long_seq = o;
  long_seq.micro_batch = 64;
  long_seq.seq = 4096;
  const Status device = check_size_floor(big, long_seq, workstation, from, "this machine");
  ASSERT_FALSE(device.is_ok());
  EXPECT_TRUE(mentions(device.message(), "the device needs at least")) << device.message();
  EXPECT_TRUE(mentions(device.message(), "for 64 x 4096 tokens")) << device.message();
}

TEST(SizeBounds, EachDimensionAboveItsLimitIsRefusedNamingTheLimit) {
  for (const DimensionLimit& d : kDimensionLimits) {
    ModelConfig c = model_preset("llama-tiny").value();
    int64_t* field = d.field == "vocab"       ? &c.vocab
                     : d.field == "max_seq"   ? &c.max_seq
                     : d.field == "dim"       ? &c.dim
                     : d.field == "n_layer"   ? &c.n_layer
                     : d.field == "n_head"    ? &c.n_head
                     : d.field == "n_kv_head" ? &c.n_kv_head
                                              : &c.ffn_hidden;
    *field = d.max + 1;
    const Status s = validate(c);
    ASSERT_FALSE(s.is_ok()) << d.field;
    EXPECT_TRUE(mentions(s.message(), std::string(d.field) + " is " + std::to_string(d.max + 1) +
                                          ", above strata's limit of " + std::to_string(d.max)))
        << s.message();
  }
  // At the limits the dimensions are valid and the parameter count holds in 64 bits.
  const ModelConfig widest = model_config_with("llama-tiny", {.vocab = kMaxVocab, .max_seq = kMaxPositions, .dim = kMaxWidth,
                                                              .n_layer = kMaxLayers, .n_head = 8192, .n_kv_head = 8192,
                                                              .ffn_hidden = kMaxFfnHidden})
                                 .value();
  const unsigned __int128 V = kMaxVocab, C = kMaxWidth, H = kMaxFfnHidden, L = kMaxLayers;
  const unsigned __int128 want = 2 * V * C + L * (C + 3 * C * C + C * C + C + 2 * H * C + C * H) + C;
  EXPECT_EQ(parameter_count(widest), uint64_t(want));
  EXPECT_LT(want, (unsigned __int128)(1) << 62);
}

}  // namespace
}  // namespace strata::model
