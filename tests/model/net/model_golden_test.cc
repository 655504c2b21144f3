// The Transformer (model/net/transformer.h) against PyTorch: the committed golden files
// (tests/data/golden, see its README) hold weights, a batch, logits, loss, every gradient and
// layer-0 activations of the tiny GPT-2 and LLaMA, computed in float64. Here the model loads the
// HF weights on the CPU backend in fp32 and must reproduce all of them; checkpointing on and off
// must give identical gradients, and a second backward without zero_grad must double them. In
// bf16 and fp16 the loss, logits and gradients must stay within the bounds their rounding allows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/hf/safetensors.h"
#include "model/net/transformer.h"
#include "tests/model/golden_file.h"
#include "tests/model/model_run.h"
#include "tests/model/model_test_files.h"

namespace strata::model {
namespace {

using testing::compare_gradients;
using testing::expect_value;
using testing::Golden;
using testing::golden_gradients;
using testing::GradientMap;
using testing::make_model_run;
using testing::ModelRun;
using testing::normwise_error;
using testing::open_golden;
using testing::WorstError;

// The CPU backend's bounds against the golden files, with their reasons: golden_file.h.
constexpr double kActTolerance = testing::kFp32ActivationTolerance;
constexpr double kLossTolerance = testing::golden_bound(DType::f32).loss;
constexpr double kGradTolerance = testing::golden_bound(DType::f32).grad;

class ModelGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelGoldenTest, LossAndLogitsMatch) {
  const Golden g = open_golden(GetParam());
  ModelRun r = make_model_run(GetParam(), g, /*checkpoint=*/true);
  ASSERT_TRUE(r.forward(g).is_ok());
  const auto loss = expect_value(r.model->read_loss());
  EXPECT_EQ(loss.valid_count, g.B * g.T);
  EXPECT_LE(std::fabs(loss.loss_sum / double(loss.valid_count) - g.loss()) / g.loss(), kLossTolerance);
  EXPECT_LE(std::fabs(double(loss.mean_loss) - g.loss()) / g.loss(), kLossTolerance);
  EXPECT_LE(normwise_error(r.logits(g), g.f32("logits")), kActTolerance);
}

TEST_P(ModelGoldenTest, EveryGradientMatches) {
  const Golden g = open_golden(GetParam());
  ModelRun r = make_model_run(GetParam(), g, /*checkpoint=*/true);
  r.fresh_gradients(g);
  const WorstError worst = compare_gradients(r.gradients(), golden_gradients(g), kGradTolerance);
  std::printf("%s: worst gradient error %.3g (%s)\n", GetParam().c_str(), worst.error, worst.name.c_str());
}

TEST_P(ModelGoldenTest, CheckpointingGivesIdenticalGradients) {
  const Golden g = open_golden(GetParam());
  GradientMap grads[2];
  for (bool checkpoint : {false, true}) {
    ModelRun r = make_model_run(GetParam(), g, checkpoint);
    r.fresh_gradients(g);
    grads[checkpoint] = r.gradients();
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (const auto& [name, grad] : grads[0]) EXPECT_EQ(grad, grads[1][name]) << name;  // bit-identical
}

TEST_P(ModelGoldenTest, SecondBackwardWithoutZeroGradDoubles) {
  const Golden g = open_golden(GetParam());
  ModelRun r = make_model_run(GetParam(), g, /*checkpoint=*/true);
  r.fresh_gradients(g);
  const auto once = r.gradients();
  ASSERT_TRUE(r.forward(g).is_ok());  // backward consumed the logits
  ASSERT_TRUE(r.model->backward().is_ok());
  for (const auto& [name, twice] : r.gradients()) {
    std::vector<float> doubled = once.at(name);
    for (float& x : doubled) x *= 2.f;
    // Exactly 2x except where a tensor sums two contributions (tied wte: head + embedding).
    EXPECT_LE(normwise_error(twice, doubled), 1e-6) << name;
  }
  // And zero_grad really clears: one more pass equals the first.
  r.fresh_gradients(g);
  for (const auto& [name, grad] : r.gradients()) EXPECT_EQ(grad, once.at(name)) << name;
}

INSTANTIATE_TEST_SUITE_P(TinyModels, ModelGoldenTest, ::testing::Values("gpt2-tiny", "llama-tiny"),
                         [](const auto& info) { return info.param == "gpt2-tiny" ? "Gpt2" : "Llama"; });

// bf16 / fp16 working precision against the same float64 golden values: loss, logits and every
// gradient within the bounds their rounding allows (golden_bound in golden_file.h says how they
// were measured and chosen).
class HalfPrecisionGoldenTest : public ::testing::TestWithParam<testing::PrecisionCase> {};

TEST_P(HalfPrecisionGoldenTest, LossAndEveryGradientWithinTheRoundingBound) {
  const testing::PrecisionCase& hc = GetParam();
  const Golden g = open_golden(hc.preset);
  ModelRun r = make_model_run(hc.preset, g, /*checkpoint=*/true, hc.dtype);
  const testing::GoldenErrors e = testing::check_against_golden(r, g, testing::golden_bound(hc.dtype));
  std::printf("%s %s: loss error %.2g, logits error %.3g, worst gradient error %.3g (%s)\n", hc.preset.c_str(),
              std::string(dtype_name(hc.dtype)).c_str(), e.loss, e.logits, e.grad.error, e.grad.name.c_str());
}

INSTANTIATE_TEST_SUITE_P(Precisions, HalfPrecisionGoldenTest,
                         ::testing::ValuesIn(testing::tiny_models_in({DType::bf16, DType::f16})),
                         testing::precision_case_name);

// Layer 0's internals and the final norm, kept when checkpointing is off.
TEST(ModelGoldenActivationsTest, Gpt2LayerZero) {
  const Golden g = open_golden("gpt2-tiny");
  ModelRun r = make_model_run("gpt2-tiny", g, /*checkpoint=*/false);
  ASSERT_TRUE(r.forward(g).is_ok());
  const ModelConfig& c = r.model->config();
  const int64_t N = g.B * g.T, C = c.dim;
  const Activations& a = r.model->activations();
  const LayerActivations& l0 = a.layers[0];
  EXPECT_EQ(r.device_to_host(a.residual, N * C), g.f32("act.embed"));  // one fp32 add: exact
  EXPECT_LE(normwise_error(r.device_to_host(l0.ln1, N * C), g.f32("act.h.0.ln_1")), kActTolerance);
  // c_attn's output rows [q | k | v], as the model keeps them (one (N, 3C) tensor, q, k, v its column blocks).
  EXPECT_LE(normwise_error(r.device_to_host(l0.qkv, N * 3 * C), g.f32("act.h.0.attn.qkv")), kActTolerance);
  EXPECT_EQ(l0.q, l0.qkv);
  EXPECT_EQ(l0.k, l0.qkv + C * sizeof(float));
  EXPECT_EQ(l0.v, l0.qkv + 2 * C * sizeof(float));
  EXPECT_LE(normwise_error(r.device_to_host(l0.att, N * C), g.f32("act.h.0.attn.y")), kActTolerance);
  EXPECT_LE(normwise_error(r.device_to_host(l0.att_proj, N * C), g.f32("act.h.0.attn.out")), kActTolerance);
  EXPECT_LE(normwise_error(r.device_to_host(a.residual + N * C * sizeof(float), N * C), g.f32("act.h.0.out")), kActTolerance);
  EXPECT_LE(normwise_error(r.device_to_host(a.lnf, N * C), g.f32("act.ln_f")), kActTolerance);
}

TEST(ModelGoldenActivationsTest, LlamaLayerZero) {
  const Golden g = open_golden("llama-tiny");
  ModelRun r = make_model_run("llama-tiny", g, /*checkpoint=*/false);
  ASSERT_TRUE(r.forward(g).is_ok());
  const ModelConfig& c = r.model->config();
  const int64_t N = g.B * g.T, C = c.dim, KV = c.kv_dim();
  const Activations& a = r.model->activations();
  const LayerActivations& l0 = a.layers[0];
  EXPECT_EQ(r.device_to_host(a.residual, N * C), g.f32("act.embed"));  // a row copy: exact
  EXPECT_LE(normwise_error(r.device_to_host(l0.ln1, N * C), g.f32("act.layers.0.input_layernorm")), kActTolerance);
  // q and k after RoPE: column blocks [0, C) and [C, C + KV) of the fused projection's rows.
  const std::vector<float> qkv = r.device_to_host(l0.qkv, N * (C + 2 * KV));
  std::vector<float> q_rot, k_rot;
  for (int64_t n = 0; n < N; ++n) {
    const auto row = qkv.begin() + n * (C + 2 * KV);
    q_rot.insert(q_rot.end(), row, row + C);
    k_rot.insert(k_rot.end(), row + C, row + C + KV);
  }
  EXPECT_LE(normwise_error(q_rot, g.f32("act.layers.0.self_attn.q_rot")), kActTolerance);
  EXPECT_LE(normwise_error(k_rot, g.f32("act.layers.0.self_attn.k_rot")), kActTolerance);
  EXPECT_LE(normwise_error(r.device_to_host(l0.att, N * C), g.f32("act.layers.0.self_attn.y")), kActTolerance);
  EXPECT_LE(normwise_error(r.device_to_host(l0.att_proj, N * C), g.f32("act.layers.0.self_attn.out")), kActTolerance);
  EXPECT_LE(normwise_error(r.device_to_host(a.residual + N * C * sizeof(float), N * C), g.f32("act.layers.0.out")), kActTolerance);
  EXPECT_LE(normwise_error(r.device_to_host(a.lnf, N * C), g.f32("act.norm")), kActTolerance);
}

}  // namespace
}  // namespace strata::model
