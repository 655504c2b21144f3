// Keeps the committed golden files (tests/data/golden/*_tiny.safetensors, written by
// tools/reference/torch_reference.py) honest before the C++ models exist: every expected tensor
// is present with the dtype and shape its metadata config implies, the loss follows from the
// stored logits and targets, and layer 0's stored activations follow from the stored weights
// through strata's own CPU kernels (which pins the conventions: Conv1D transposition, RoPE
// pairing, grouped-query head mapping, attention scale, tied head). Not the model test itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cpu/ops_attention.h"
#include "kernels/cpu/ops_embedding.h"
#include "kernels/cpu/ops_loss.h"
#include "kernels/cpu/ops_matmul.h"
#include "kernels/cpu/ops_norm.h"
#include "kernels/cpu/ops_rope.h"
#include "model/hf/safetensors.h"
#include "tests/model/model_test_files.h"

namespace strata::model {
namespace {

using testing::expect_value;
using Shape = std::vector<uint64_t>;

// Tolerance of every "one strata fp32 op from stored fp32 inputs" check below, normwise
// (max |got - want| / max |want|). The stored value is the float64 result rounded to fp32
// (<= 6e-8 relative); the op's own fp32 rounding over dot products of K <= 48 terms (or a row
// norm with double statistics) is a few ulps of the row scale, ~1e-7 normwise; torch's own fp32
// run of the same op lands at 1e-7..5e-7 (the file's "torch_fp32_error"). 1e-6 leaves a margin
// of 2-10x, while a convention error (a transposed weight, the wrong RoPE pairing or head
// mapping, a missing scale) moves results by O(1).
constexpr double kOpTolerance = 1e-6;

std::string golden_path(const std::string& name) { return std::string(STRATA_TEST_DATA_DIR) + "/golden/" + name; }

struct Golden {
  SafetensorsFile file;
  nlohmann::json config;
  nlohmann::json optimizer;
  int64_t B = 0, T = 0;

  // A tensor's values, after checking its dtype and shape.
  template <typename T>
  std::vector<T> values(const std::string& name, SafeDType dtype, const Shape& shape) const {
    auto bytes = expect_value(file.data(name, dtype, shape));
    std::vector<T> out(bytes.size() / sizeof(T));
    if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
  std::vector<float> f32(const std::string& name, const Shape& shape) const {
    return values<float>(name, SafeDType::f32, shape);
  }
};

Golden open_golden(const std::string& name) {
  Golden g{expect_value(SafetensorsFile::open(golden_path(name))), {}, {}};
  const auto& md = g.file.metadata();
  for (const char* key : {"format", "model", "config", "batch", "optimizer", "seed", "init", "torch_version"}) {
    EXPECT_TRUE(md.count(key)) << name << " metadata lacks " << key;
  }
  if (!md.count("config") || !md.count("batch") || !md.count("optimizer")) return g;
  g.config = nlohmann::json::parse(md.at("config"));
  g.optimizer = nlohmann::json::parse(md.at("optimizer"));
  const auto batch = nlohmann::json::parse(md.at("batch"));
  g.B = batch.at("B").get<int64_t>();
  g.T = batch.at("T").get<int64_t>();
  return g;
}

struct Expected {
  std::string name;
  SafeDType dtype;
  Shape shape;
};

uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

// The Hugging Face parameter names and shapes the config implies (Conv1D weights (in, out)).
std::vector<Expected> gpt2_parameters(const nlohmann::json& c) {
  const uint64_t V = c.at("vocab_size"), P = c.at("n_positions"), C = c.at("n_embd"), H = c.at("n_inner");
  std::vector<Expected> p = {{"transformer.wte.weight", SafeDType::f32, {V, C}},
                             {"transformer.wpe.weight", SafeDType::f32, {P, C}},
                             {"transformer.ln_f.weight", SafeDType::f32, {C}},
                             {"transformer.ln_f.bias", SafeDType::f32, {C}}};
  for (int i = 0; i < c.at("n_layer").get<int>(); ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    for (const char* ln : {"ln_1", "ln_2"}) {
      p.push_back({h + ln + ".weight", SafeDType::f32, {C}});
      p.push_back({h + ln + ".bias", SafeDType::f32, {C}});
    }
    p.push_back({h + "attn.c_attn.weight", SafeDType::f32, {C, 3 * C}});
    p.push_back({h + "attn.c_attn.bias", SafeDType::f32, {3 * C}});
    p.push_back({h + "attn.c_proj.weight", SafeDType::f32, {C, C}});
    p.push_back({h + "attn.c_proj.bias", SafeDType::f32, {C}});
    p.push_back({h + "mlp.c_fc.weight", SafeDType::f32, {C, H}});
    p.push_back({h + "mlp.c_fc.bias", SafeDType::f32, {H}});
    p.push_back({h + "mlp.c_proj.weight", SafeDType::f32, {H, C}});
    p.push_back({h + "mlp.c_proj.bias", SafeDType::f32, {C}});
  }
  return p;
}

std::vector<Expected> llama_parameters(const nlohmann::json& c) {
  const uint64_t V = c.at("vocab_size"), C = c.at("hidden_size"), H = c.at("intermediate_size");
  const uint64_t NH = c.at("num_attention_heads"), NKV = c.at("num_key_value_heads"), HS = C / NH;
  std::vector<Expected> p = {{"model.embed_tokens.weight", SafeDType::f32, {V, C}},
                             {"model.norm.weight", SafeDType::f32, {C}},
                             {"lm_head.weight", SafeDType::f32, {V, C}}};
  for (int i = 0; i < c.at("num_hidden_layers").get<int>(); ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    p.push_back({l + "input_layernorm.weight", SafeDType::f32, {C}});
    p.push_back({l + "post_attention_layernorm.weight", SafeDType::f32, {C}});
    p.push_back({l + "self_attn.q_proj.weight", SafeDType::f32, {NH * HS, C}});
    p.push_back({l + "self_attn.k_proj.weight", SafeDType::f32, {NKV * HS, C}});
    p.push_back({l + "self_attn.v_proj.weight", SafeDType::f32, {NKV * HS, C}});
    p.push_back({l + "self_attn.o_proj.weight", SafeDType::f32, {C, NH * HS}});
    p.push_back({l + "mlp.gate_proj.weight", SafeDType::f32, {H, C}});
    p.push_back({l + "mlp.up_proj.weight", SafeDType::f32, {H, C}});
    p.push_back({l + "mlp.down_proj.weight", SafeDType::f32, {C, H}});
  }
  return p;
}

// Parameters, their "grad." twins, the batch, logits, loss, AdamW losses and the activations.
std::vector<Expected> expected_tensors(const Golden& g, bool gpt2) {
  std::vector<Expected> all = gpt2 ? gpt2_parameters(g.config) : llama_parameters(g.config);
  const size_t n_params = all.size();
  for (size_t i = 0; i < n_params; ++i) all.push_back({"grad." + all[i].name, all[i].dtype, all[i].shape});
  const uint64_t B = u(g.B), T = u(g.T), V = g.config.at("vocab_size");
  const uint64_t C = gpt2 ? g.config.at("n_embd") : g.config.at("hidden_size");
  all.push_back({"tokens", SafeDType::i32, {B, T}});
  all.push_back({"targets", SafeDType::i32, {B, T}});
  all.push_back({"logits", SafeDType::f32, {B, T, V}});
  all.push_back({"loss", SafeDType::f64, {1}});
  all.push_back({"adamw.losses", SafeDType::f64, {g.optimizer.at("steps").get<uint64_t>() + 1}});
  if (gpt2) {
    for (const char* a : {"act.embed", "act.h.0.ln_1", "act.h.0.attn.y", "act.h.0.attn.out", "act.h.0.out", "act.ln_f"}) {
      all.push_back({a, SafeDType::f32, {B, T, C}});
    }
    all.push_back({"act.h.0.attn.qkv", SafeDType::f32, {B, T, 3 * C}});
  } else {
    const uint64_t NH = g.config.at("num_attention_heads"), NKV = g.config.at("num_key_value_heads");
    for (const char* a : {"act.embed", "act.layers.0.input_layernorm", "act.layers.0.self_attn.y",
                          "act.layers.0.self_attn.out", "act.layers.0.out", "act.norm"}) {
      all.push_back({a, SafeDType::f32, {B, T, C}});
    }
    all.push_back({"act.layers.0.self_attn.q_rot", SafeDType::f32, {B, T, NH, C / NH}});
    all.push_back({"act.layers.0.self_attn.k_rot", SafeDType::f32, {B, T, NKV, C / NH}});
  }
  return all;
}

void expect_exact_tensor_set(const std::string& file_name, bool gpt2) {
  const Golden g = open_golden(file_name);
  ASSERT_FALSE(g.config.is_null());
  EXPECT_EQ(g.file.metadata().at("format"), "strata-golden-v1");
  EXPECT_EQ(g.file.metadata().at("model"), gpt2 ? "gpt2" : "llama");
  EXPECT_LT(std::filesystem::file_size(golden_path(file_name)), 1u << 20) << "golden files stay under 1 MiB";
  const std::vector<Expected> expected = expected_tensors(g, gpt2);
  std::set<std::string> names;
  for (const Expected& e : expected) {
    names.insert(e.name);
    const SafetensorsTensor* t = g.file.find(e.name);
    ASSERT_NE(t, nullptr) << file_name << " lacks " << e.name;
    EXPECT_EQ(t->dtype, e.dtype) << e.name;
    EXPECT_EQ(t->shape, e.shape) << e.name;
  }
  for (const SafetensorsTensor& t : g.file.tensors()) EXPECT_TRUE(names.count(t.name)) << "unexpected " << t.name;
  EXPECT_EQ(g.file.tensors().size(), expected.size());
}

TEST(GoldenFilesTest, Gpt2HoldsEveryExpectedTensor) { expect_exact_tensor_set("gpt2_tiny.safetensors", true); }
TEST(GoldenFilesTest, LlamaHoldsEveryExpectedTensor) { expect_exact_tensor_set("llama_tiny.safetensors", false); }

// The optimizer rule the C++ trainer must replicate is written down, and the trajectory starts
// at the golden loss and falls at every step (a fixed batch at lr 1e-3 overfits steadily).
void expect_optimizer_and_trajectory(const std::string& file_name) {
  const Golden g = open_golden(file_name);
  ASSERT_FALSE(g.optimizer.is_null());
  EXPECT_EQ(g.optimizer.at("type"), "torch.optim.AdamW");
  EXPECT_DOUBLE_EQ(g.optimizer.at("lr").get<double>(), 1e-3);
  EXPECT_DOUBLE_EQ(g.optimizer.at("betas")[0].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(g.optimizer.at("betas")[1].get<double>(), 0.95);
  EXPECT_DOUBLE_EQ(g.optimizer.at("eps").get<double>(), 1e-8);
  EXPECT_DOUBLE_EQ(g.optimizer.at("weight_decay").get<double>(), 0.1);
  EXPECT_NE(g.optimizer.at("weight_decay_rule").get<std::string>().find("ndim >= 2"), std::string::npos);
  const uint64_t steps = g.optimizer.at("steps").get<uint64_t>();
  EXPECT_EQ(steps, 10u);
  const auto loss = g.values<double>("loss", SafeDType::f64, {1});
  const auto losses = g.values<double>("adamw.losses", SafeDType::f64, {steps + 1});
  // Both are the same float64 forward of the same weights; only summation order could differ.
  EXPECT_NEAR(losses[0], loss[0], 1e-12 * loss[0]);
  for (uint64_t i = 1; i <= steps; ++i) EXPECT_LT(losses[i], losses[i - 1]) << "step " << i;
  // Near ln(V) at init (weights ~0.02 give logits ~0.1), as a sanity check of the scale.
  EXPECT_NEAR(loss[0], std::log(g.config.at("vocab_size").get<double>()), 0.1);
}

TEST(GoldenFilesTest, Gpt2OptimizerRuleAndTrajectory) { expect_optimizer_and_trajectory("gpt2_tiny.safetensors"); }
TEST(GoldenFilesTest, LlamaOptimizerRuleAndTrajectory) { expect_optimizer_and_trajectory("llama_tiny.safetensors"); }

// The mean cross-entropy of the stored logits and targets, by strata's kernel, is the stored loss.
// Tolerance 1e-6 relative: the stored logits (|z| < 1) are the float64 ones rounded to fp32, which
// moves a row's loss by at most 2 max|dz| ~ 1.2e-7 (softmax - onehot has L1 norm <= 2), about 2e-8
// of a loss near 5.5; the kernel's fp32 lse adds at most half an ulp of 5.5 (2.4e-7, 4e-8
// relative). 1e-6 is a 10x margin; a wrong target, row or shift moves the loss by >= 1e-3.
void expect_loss_from_logits(const std::string& file_name) {
  const Golden g = open_golden(file_name);
  ASSERT_FALSE(g.config.is_null());
  const int64_t N = g.B * g.T, V = g.config.at("vocab_size").get<int64_t>();
  const auto logits = g.f32("logits", {u(g.B), u(g.T), u(V)});
  const auto targets = g.values<int32_t>("targets", SafeDType::i32, {u(g.B), u(g.T)});
  const double loss = g.values<double>("loss", SafeDType::f64, {1})[0];
  ASSERT_EQ(logits.size(), static_cast<size_t>(N * V));
  ASSERT_EQ(targets.size(), static_cast<size_t>(N));
  for (int32_t t : targets) ASSERT_TRUE(t >= 0 && t < V) << t;
  std::vector<float> lse(N);
  const kernels::CrossEntropyResult r = kernels::crossentropy_forward(lse.data(), nullptr, logits.data(), targets.data(), N, V);
  EXPECT_EQ(r.valid_count, N);
  EXPECT_NEAR(r.loss_sum / static_cast<double>(N), loss, 1e-6 * loss);
  EXPECT_NEAR(r.mean_loss, loss, 1e-6 * loss);
}

TEST(GoldenFilesTest, Gpt2LossFollowsFromLogits) { expect_loss_from_logits("gpt2_tiny.safetensors"); }
TEST(GoldenFilesTest, LlamaLossFollowsFromLogits) { expect_loss_from_logits("llama_tiny.safetensors"); }

double normwise_error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  EXPECT_GT(scale, 0.0) << "an all-zero golden tensor checks nothing";
  return scale > 0.0 ? diff / scale : diff;
}

// (rows, cols) -> (cols, rows): a Conv1D weight (in, out) becomes the (out, in) matmul_forward takes.
std::vector<float> transposed(const std::vector<float>& w, int64_t rows, int64_t cols) {
  std::vector<float> t(w.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = w[r * cols + c];
  }
  return t;
}

// Columns [begin, begin + width) of a (rows, cols) matrix, contiguous.
std::vector<float> columns(const std::vector<float>& m, int64_t rows, int64_t cols, int64_t begin, int64_t width) {
  std::vector<float> out(rows * width);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(m.begin() + r * cols + begin, width, out.begin() + r * width);
  return out;
}

std::vector<float> linear(const std::vector<float>& inp, const std::vector<float>& weight_out_in, const float* bias,
                          int64_t N, int64_t C, int64_t OC) {
  std::vector<float> out(N * OC);
  kernels::matmul_forward(out.data(), inp.data(), weight_out_in.data(), bias, N, C, OC);
  return out;
}

TEST(GoldenFilesTest, Gpt2LayerZeroFollowsFromWeights) {
  const Golden g = open_golden("gpt2_tiny.safetensors");
  ASSERT_FALSE(g.config.is_null());
  const int64_t B = g.B, T = g.T, N = B * T, C = g.config.at("n_embd"), V = g.config.at("vocab_size");
  const int64_t P = g.config.at("n_positions"), NH = g.config.at("n_head"), HS = C / NH;
  const float eps = g.config.at("layer_norm_epsilon").get<float>();
  const Shape btc = {u(B), u(T), u(C)};
  const auto tokens = g.values<int32_t>("tokens", SafeDType::i32, {u(B), u(T)});
  const auto wte = g.f32("transformer.wte.weight", {u(V), u(C)});
  const auto wpe = g.f32("transformer.wpe.weight", {u(P), u(C)});

  // Token + position embedding: an fp32 add of two fp32 values is the float64 sum rounded, exactly.
  std::vector<float> embed(N * C);
  kernels::encoder_forward(embed.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  EXPECT_EQ(embed, g.f32("act.embed", btc));

  const auto golden_embed = g.f32("act.embed", btc);
  std::vector<float> ln1(N * C), mean(N), rstd(N);
  kernels::layernorm_forward(ln1.data(), mean.data(), rstd.data(), golden_embed.data(),
                             g.f32("transformer.h.0.ln_1.weight", {u(C)}).data(),
                             g.f32("transformer.h.0.ln_1.bias", {u(C)}).data(), N, C, eps);
  EXPECT_LE(normwise_error(ln1, g.f32("act.h.0.ln_1", btc)), kOpTolerance);

  // Conv1D: weight (C, 3C) stored (in, out), so matmul_forward gets its transpose (3C, C).
  const auto w_attn = transposed(g.f32("transformer.h.0.attn.c_attn.weight", {u(C), u(3 * C)}), C, 3 * C);
  const auto b_attn = g.f32("transformer.h.0.attn.c_attn.bias", {u(3 * C)});
  const auto golden_ln1 = g.f32("act.h.0.ln_1", btc);
  EXPECT_LE(normwise_error(linear(golden_ln1, w_attn, b_attn.data(), N, C, 3 * C),
                           g.f32("act.h.0.attn.qkv", {u(B), u(T), u(3 * C)})),
            kOpTolerance);

  // qkv rows are [q | k | v], each (NH, HS): attention over them is y, heads side by side.
  const auto qkv = g.f32("act.h.0.attn.qkv", {u(B), u(T), u(3 * C)});
  const auto q = columns(qkv, N, 3 * C, 0, C), k = columns(qkv, N, 3 * C, C, C), v = columns(qkv, N, 3 * C, 2 * C, C);
  std::vector<float> y(N * C), lse(B * NH * T);
  kernels::attention_forward(y.data(), lse.data(), q.data(), k.data(), v.data(), B, T, NH, NH, HS);
  EXPECT_LE(normwise_error(y, g.f32("act.h.0.attn.y", btc)), kOpTolerance);

  const auto w_proj = transposed(g.f32("transformer.h.0.attn.c_proj.weight", {u(C), u(C)}), C, C);
  const auto b_proj = g.f32("transformer.h.0.attn.c_proj.bias", {u(C)});
  EXPECT_LE(normwise_error(linear(g.f32("act.h.0.attn.y", btc), w_proj, b_proj.data(), N, C, C),
                           g.f32("act.h.0.attn.out", btc)),
            kOpTolerance);

  // The head is tied: logits = ln_f output @ wte^T.
  EXPECT_LE(normwise_error(linear(g.f32("act.ln_f", btc), wte, nullptr, N, C, V), g.f32("logits", {u(B), u(T), u(V)})),
            kOpTolerance);
}

TEST(GoldenFilesTest, LlamaLayerZeroFollowsFromWeights) {
  const Golden g = open_golden("llama_tiny.safetensors");
  ASSERT_FALSE(g.config.is_null());
  const int64_t B = g.B, T = g.T, N = B * T, C = g.config.at("hidden_size"), V = g.config.at("vocab_size");
  const int64_t NH = g.config.at("num_attention_heads"), NKV = g.config.at("num_key_value_heads"), HS = C / NH;
  const float eps = g.config.at("rms_norm_eps").get<float>();
  const float theta = g.config.at("rope_theta").get<float>();
  const Shape btc = {u(B), u(T), u(C)};
  const auto tokens = g.values<int32_t>("tokens", SafeDType::i32, {u(B), u(T)});

  // Token embedding: a copy, exact.
  std::vector<float> embed(N * C);
  kernels::token_embedding_forward(embed.data(), tokens.data(), g.f32("model.embed_tokens.weight", {u(V), u(C)}).data(),
                                   N, C);
  EXPECT_EQ(embed, g.f32("act.embed", btc));

  std::vector<float> norm(N * C), rstd(N);
  kernels::rmsnorm_forward(norm.data(), rstd.data(), g.f32("act.embed", btc).data(),
                           g.f32("model.layers.0.input_layernorm.weight", {u(C)}).data(), N, C, eps);
  EXPECT_LE(normwise_error(norm, g.f32("act.layers.0.input_layernorm", btc)), kOpTolerance);

  // q and k projections (nn.Linear, (out, in) as matmul_forward takes), then rotate-half RoPE.
  const auto h = g.f32("act.layers.0.input_layernorm", btc);
  const std::string a = "model.layers.0.self_attn.";
  auto q = linear(h, g.f32(a + "q_proj.weight", {u(NH * HS), u(C)}), nullptr, N, C, NH * HS);
  auto k = linear(h, g.f32(a + "k_proj.weight", {u(NKV * HS), u(C)}), nullptr, N, C, NKV * HS);
  const auto v = linear(h, g.f32(a + "v_proj.weight", {u(NKV * HS), u(C)}), nullptr, N, C, NKV * HS);
  kernels::rope_forward(q.data(), q.data(), B, T, NH, HS, theta, 0);
  kernels::rope_forward(k.data(), k.data(), B, T, NKV, HS, theta, 0);
  const auto q_rot = g.f32("act.layers.0.self_attn.q_rot", {u(B), u(T), u(NH), u(HS)});
  const auto k_rot = g.f32("act.layers.0.self_attn.k_rot", {u(B), u(T), u(NKV), u(HS)});
  EXPECT_LE(normwise_error(q, q_rot), kOpTolerance);
  EXPECT_LE(normwise_error(k, k_rot), kOpTolerance);

  // Grouped-query attention: query head h reads kv head h / (NH / NKV).
  std::vector<float> y(N * C), lse(B * NH * T);
  kernels::attention_forward(y.data(), lse.data(), q_rot.data(), k_rot.data(), v.data(), B, T, NH, NKV, HS);
  EXPECT_LE(normwise_error(y, g.f32("act.layers.0.self_attn.y", btc)), kOpTolerance);

  EXPECT_LE(normwise_error(linear(g.f32("act.layers.0.self_attn.y", btc), g.f32(a + "o_proj.weight", {u(C), u(NH * HS)}),
                                  nullptr, N, NH * HS, C),
                           g.f32("act.layers.0.self_attn.out", btc)),
            kOpTolerance);

  // The head is untied: logits = final norm output @ lm_head^T.
  EXPECT_LE(normwise_error(linear(g.f32("act.norm", btc), g.f32("lm_head.weight", {u(V), u(C)}), nullptr, N, C, V),
                           g.f32("logits", {u(B), u(T), u(V)})),
            kOpTolerance);
}

}  // namespace
}  // namespace strata::model
