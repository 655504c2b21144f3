// ModelConfig presets, validation and parameter counts (model/net/model_config.h), and the parameter
// layout built from them (model/net/param_layout.h): alignment, no overlap, HF names, counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "model/net/model_config.h"
#include "model/net/param_layout.h"
#include "model/plan/placement.h"
#include "tests/model/model_test_files.h"

namespace strata::model {
namespace {

using testing::expect_value;

TEST(ModelConfigTest, PresetParameterCountsMatchHuggingFace) {
  // Published parameter counts (HF model cards / sum of the checkpoint's tensors).
  EXPECT_EQ(parameter_count(expect_value(model_preset("gpt2-124m"))), 124'439'808u);
  EXPECT_EQ(parameter_count(expect_value(model_preset("gpt2-350m"))), 354'823'168u);
  EXPECT_EQ(parameter_count(expect_value(model_preset("gpt2-774m"))), 774'030'080u);
  EXPECT_EQ(parameter_count(expect_value(model_preset("gpt2-1.5b"))), 1'557'611'200u);
  EXPECT_EQ(parameter_count(expect_value(model_preset("llama-1b"))), 1'235'814'400u);
  EXPECT_EQ(parameter_count(expect_value(model_preset("llama-3b"))), 3'212'749'824u);
  EXPECT_EQ(parameter_count(expect_value(model_preset("llama-7b"))), 6'738'415'616u);
  EXPECT_EQ(parameter_count(expect_value(model_preset("llama-13b"))), 13'015'864'320u);
  EXPECT_EQ(parameter_count(expect_value(model_preset("llama-30b"))), 32'528'943'616u);
  EXPECT_EQ(parameter_count(expect_value(model_preset("llama-70b"))), 68'976'648'192u);
}

TEST(ModelConfigTest, PresetsAreValidAndNamed) {
  const auto names = model_preset_names();
  EXPECT_EQ(names.size(), 12u);
  for (auto name : names) {
    const ModelConfig c = expect_value(model_preset(name));
    EXPECT_EQ(c.name, name);
    EXPECT_TRUE(validate(c).is_ok()) << name;
  }
  const ModelConfig l70 = expect_value(model_preset("llama-70b"));
  EXPECT_EQ(l70.n_kv_head, 8);
  EXPECT_EQ(l70.kv_dim(), 1024);
  const ModelConfig g = expect_value(model_preset("gpt2-124m"));
  EXPECT_EQ(g.arch, Arch::gpt2);
  EXPECT_EQ(g.max_seq, 1024);
  EXPECT_TRUE(g.tied_head);
  EXPECT_FALSE(expect_value(model_preset("llama-7b")).tied_head);
}

TEST(ModelConfigTest, UnknownPresetListsKnownNames) {
  auto r = model_preset("gpt3");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::not_found);
  EXPECT_NE(r.status().message().find("gpt3"), std::string::npos);
  EXPECT_NE(r.status().message().find("llama-7b"), std::string::npos);
  EXPECT_EQ(r.status().message().find("did you mean"), std::string::npos) << r.status().message();
}

TEST(ModelConfigTest, UnknownPresetSuggestsTheClosestAndKeepsTheList) {
  for (const char* typo : {"gpt2-124", "gpt2_124m", "GPT2-124M", "gpt2-12m"}) {
    auto r = model_preset(typo);
    ASSERT_FALSE(r.is_ok()) << typo;
    EXPECT_EQ(r.status().code(), Code::not_found);
    const std::string& m = r.status().message();
    EXPECT_NE(m.find(fmt::format("unknown model preset '{}'; did you mean gpt2-124m?", typo)), std::string::npos)
        << m;
    EXPECT_NE(m.find("known presets: "), std::string::npos) << m;
    EXPECT_NE(m.find("llama-13b"), std::string::npos) << m;
  }
}

void expect_invalid(const ModelConfig& c, const std::string& words) {
  const Status s = validate(c);
  EXPECT_EQ(s.code(), Code::invalid_argument) << words;
  EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
}

TEST(ModelConfigTest, ValidationNamesTheProblem) {
  const ModelConfig gpt2 = expect_value(model_preset("gpt2-tiny"));
  const ModelConfig llama = expect_value(model_preset("llama-tiny"));
  ModelConfig c = gpt2;
  c.n_layer = 0;
  expect_invalid(c, "n_layer is 0");
  c = gpt2;
  c.n_head = 5;
  c.n_kv_head = 5;
  expect_invalid(c, "dim 48 is not a multiple of n_head 5");
  c = llama;
  c.n_kv_head = 3;
  expect_invalid(c, "n_head 4 is not a multiple of n_kv_head 3");
  c = gpt2;
  c.n_kv_head = 2;
  expect_invalid(c, "GPT-2 has no grouped-query attention");
  c = llama;
  c.dim = 36;  // HS = 9
  expect_invalid(c, "head size 9");
  c = llama;
  c.norm_eps = 0.f;
  expect_invalid(c, "norm_eps");
  c = llama;
  c.rope_theta = -1.f;
  expect_invalid(c, "rope_theta");
  c = gpt2;
  c.vocab = int64_t(1) << 32;
  expect_invalid(c, "int32");
  EXPECT_EQ(build_param_layout(c).status().code(), Code::invalid_argument);
  EXPECT_EQ(build_param_layout(gpt2, 3).status().code(), Code::invalid_argument);
}

// Every tensor aligned, inside its chunk, no two overlapping; chunk sizes multiples of 4 KiB;
// the layout counts what parameter_count counts.
void expect_sound_layout(const ModelConfig& c, uint64_t element_bytes) {
  const ParamLayout layout = expect_value(build_param_layout(c, element_bytes));
  ASSERT_EQ(layout.chunks.size(), size_t(c.n_layer) + 2);
  EXPECT_EQ(layout.chunks.front().kind, ChunkKind::embedding);
  EXPECT_EQ(layout.chunks.back().kind, ChunkKind::head);
  EXPECT_EQ(layout.total_elements(), parameter_count(c)) << c.name;
  std::set<std::string> names;
  std::vector<uint64_t> end_in_chunk(layout.chunks.size(), 0);
  for (const auto& p : layout.params) {
    EXPECT_TRUE(names.insert(p.name).second) << "duplicate " << p.name;
    EXPECT_EQ(p.field_offset % (kFieldAlignment * layout.element_bytes), 0u) << p.name;
    EXPECT_GE(p.offset, end_in_chunk[p.chunk]) << p.name << " overlaps the tensor before it";
    end_in_chunk[p.chunk] = p.offset + p.elements * element_bytes;
    EXPECT_LE(end_in_chunk[p.chunk], layout.chunks[p.chunk].bytes) << p.name;
    EXPECT_EQ(p.weight_decay, p.shape.size() >= 2) << p.name;
    if (p.layer >= 0) {
      EXPECT_EQ(layout.chunks[p.chunk].layer, p.layer) << p.name;
    }
  }
  for (const auto& chunk : layout.chunks) {
    EXPECT_EQ(chunk.bytes % kChunkAlignment, 0u) << chunk.name;
    EXPECT_GT(chunk.bytes, 0u) << chunk.name;
  }
}

TEST(ParamLayoutTest, EveryPresetIsAlignedAndNonOverlapping) {
  for (auto name : model_preset_names()) {
    const ModelConfig c = expect_value(model_preset(name));
    expect_sound_layout(c, 4);
    expect_sound_layout(c, 2);
  }
}

// Fields start at 256-element boundaries: every tensor sits at the same element in the 16-bit and
// the fp32 layouts, and across ranks no shard cut splits a tensor's 8-bit block -- GPT-2 1.5B's
// 1600-wide norms included (at 256-byte alignment its bf16 fields were 128 elements apart). A fused
// tensor after the first of its field starts where the one before it ends: llama-tiny's key/value
// rows are 24 x 48 = 1152 elements, so v_proj starts 128 elements into a block, and at 8 ranks a
// cut falls in it (named, so a run refuses it).
TEST(ParamLayoutTest, TensorsSitAtTheSameElementInEveryPrecisionAndShardCutsKeep8BitBlocksWhole) {
  for (const char* name : {"gpt2-tiny", "llama-tiny", "gpt2-1.5b", "llama-7b"}) {
    const ModelConfig c = expect_value(model_preset(name));
    const ParamLayout half = expect_value(build_param_layout(c, 2));
    const ParamLayout full = expect_value(build_param_layout(c, 4));
    ASSERT_EQ(half.params.size(), full.params.size()) << name;
    for (size_t i = 0; i < half.params.size(); ++i)
      ASSERT_EQ(half.params[i].offset / 2, full.params[i].offset / 4) << name << ": " << half.params[i].name;
    for (int ranks : {2, 3, 4, 8}) {
      const std::optional<std::string> split = q8_block_split(half, ranks);
      if (std::string(name) == "llama-tiny" && ranks == 8) {
        ASSERT_TRUE(split.has_value());
        EXPECT_NE(split->find("v_proj"), std::string::npos) << *split;
      } else {
        EXPECT_EQ(split, std::nullopt) << name << " at " << ranks << " ranks";
      }
    }
  }
}

TEST(ParamLayoutTest, Gpt2NamesShapesAndChunks) {
  const ParamLayout layout = expect_value(build_param_layout(expect_value(model_preset("gpt2-124m"))));
  const ParamSpec* c_attn = layout.find("transformer.h.11.attn.c_attn.weight");
  ASSERT_NE(c_attn, nullptr);
  EXPECT_EQ(c_attn->shape, (std::vector<int64_t>{2304, 768}));     // strata: (out, in)
  EXPECT_EQ(c_attn->hf_shape(), (std::vector<int64_t>{768, 2304}));  // HF Conv1D: (in, out)
  EXPECT_TRUE(c_attn->hf_transposed);
  EXPECT_EQ(c_attn->layer, 11);
  EXPECT_EQ(layout.chunks[c_attn->chunk].name, "layer 11");
  EXPECT_EQ(c_attn->field, int(LayerField::qkv_w));
  const ParamSpec* wpe = layout.find("transformer.wpe.weight");
  ASSERT_NE(wpe, nullptr);
  EXPECT_EQ(wpe->chunk, 0);
  EXPECT_EQ(layout.find("lm_head.weight"), nullptr);  // tied to wte
  const ParamSpec* lnf = layout.find("transformer.ln_f.bias");
  ASSERT_NE(lnf, nullptr);
  EXPECT_EQ(layout.chunks[lnf->chunk].kind, ChunkKind::head);
  EXPECT_FALSE(lnf->weight_decay);
  // A layer: 12 tensors, 7,087,872 fp32 elements, rounded up to whole 4 KiB pages.
  const ChunkSpec& layer0 = layout.chunks[1];
  EXPECT_GE(layer0.bytes, 7'087'872u * 4);
  EXPECT_LT(layer0.bytes, 7'087'872u * 4 + 12 * kFieldAlignment * 4 + kChunkAlignment);
}

TEST(ParamLayoutTest, LlamaFusedSlotsAreBackToBack) {
  const ModelConfig c = expect_value(model_preset("llama-70b"));
  const ParamLayout layout = expect_value(build_param_layout(c));
  const ParamSpec* q = layout.find("model.layers.3.self_attn.q_proj.weight");
  const ParamSpec* k = layout.find("model.layers.3.self_attn.k_proj.weight");
  const ParamSpec* v = layout.find("model.layers.3.self_attn.v_proj.weight");
  ASSERT_TRUE(q && k && v);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{1024, 8192}));  // 8 kv heads of 128
  EXPECT_EQ(q->field_offset, q->offset);
  EXPECT_EQ(k->offset, q->offset + q->elements * 4);
  EXPECT_EQ(v->offset, k->offset + k->elements * 4);
  EXPECT_EQ(k->field_offset, q->offset);
  const ParamSpec* gate = layout.find("model.layers.3.mlp.gate_proj.weight");
  const ParamSpec* up = layout.find("model.layers.3.mlp.up_proj.weight");
  ASSERT_TRUE(gate && up);
  EXPECT_EQ(up->offset, gate->offset + gate->elements * 4);  // SwiGLU's fused [gate | up]
  EXPECT_EQ(up->field, int(LayerField::fc_w));
  EXPECT_NE(layout.find("lm_head.weight"), nullptr);
  EXPECT_EQ(layout.find("model.layers.0.input_layernorm.bias"), nullptr);
}

TEST(ParamLayoutTest, SlotNamesFollowTheStruct) {
  LayerParams p;
  std::byte value{};
  param_field(p, LayerField::fc_proj_b) = &value;
  EXPECT_EQ(p.fc_proj_b, &value);
  EXPECT_EQ(field_name(LayerField::qkv_w), "qkv_w");
  EXPECT_EQ(field_name(LayerField::fc_proj_b), "fc_proj_b");
  GlobalParams gp;
  param_field(gp, GlobalField::lm_head) = &value;
  EXPECT_EQ(gp.lm_head, &value);
}

// Explicit dimensions over a preset: the given fields replace the preset's, the dependent ones
// follow, and the name records what changed.
TEST(ModelConfigWithTest, OverridesReplaceThePresetsDimensions) {
  const ModelConfig base = expect_value(model_preset("llama-7b"));
  const ModelConfig same = expect_value(model_config_with("llama-7b", {}));
  EXPECT_EQ(same.name, "llama-7b");
  EXPECT_EQ(same.n_layer, base.n_layer);
  const ModelConfig shallow = expect_value(model_config_with("llama-7b", {.n_layer = 2}));
  EXPECT_EQ(shallow.name, "llama-7b[n_layer=2]");
  EXPECT_EQ(shallow.n_layer, 2);
  EXPECT_EQ(shallow.dim, base.dim);
  EXPECT_EQ(shallow.ffn_hidden, base.ffn_hidden);
  // A new width: GPT-2's MLP follows at 4C; LLaMA's at 8C/3 rounded up to 256 (768 -> 2048).
  const ModelConfig wide = expect_value(model_config_with("gpt2-124m", {.dim = 1024, .n_head = 16}));
  EXPECT_EQ(wide.ffn_hidden, 4096);
  EXPECT_EQ(wide.n_kv_head, 16);
  EXPECT_EQ(wide.name, "gpt2-124m[dim=1024,n_head=16]");
  const ModelConfig narrow = expect_value(model_config_with("llama-1b", {.dim = 768, .n_head = 12}));
  EXPECT_EQ(narrow.ffn_hidden, 2048);
  EXPECT_EQ(narrow.n_head % narrow.n_kv_head, 0);
  // Another architecture brings its head tying.
  const ModelConfig as_llama = expect_value(model_config_with("gpt2-tiny", {.arch = Arch::llama}));
  EXPECT_FALSE(as_llama.tied_head);
  EXPECT_EQ(as_llama.name, "gpt2-tiny[arch=llama]");
  EXPECT_GT(parameter_count(as_llama), 0u);
}

TEST(ModelConfigWithTest, ImpossibleDimensionsAreRefusedWithTheFix) {
  const auto bad = model_config_with("gpt2-124m", {.n_head = 7});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), Code::invalid_argument);
  EXPECT_NE(bad.status().message().find("gpt2-124m[n_head=7]"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("not a multiple of n_head 7"), std::string::npos) << bad.status().message();
  EXPECT_EQ(model_config_with("gpt2-125m", {.n_layer = 1}).status().code(), Code::not_found);
}

}  // namespace
}  // namespace strata::model
