// Hugging Face in and out (model/hf/hf_config.h, hf_weights.h, hf_export.h): tiny HF-format
// directories written by the test itself (a hand-written config.json, F32/BF16/F16 tensors in
// HF layouts, sharded with an index or not) load into a Transformer with every value exact;
// config.json of GPT-2, LLaMA (tied, untied, GQA), Mistral (sliding window) and Qwen2 (q/k/v
// biases) parse to the right dimensions and the unsupported ones are refused by name; bad
// directories (missing shard, a tensor named twice, wrong shape, wrong dtype, missing lm_head)
// fail with errors that say so; export then load gives the same fp32 weights bit for bit.
#include "model/hf/hf_weights.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/half.h"
#include "model/hf/hf_config.h"
#include "model/hf/hf_export.h"
#include "model/net/param_layout.h"
#include "model/hf/safetensors.h"
#include "model/net/transformer.h"
#include "tests/model/model_run.h"
#include "tests/model/model_test_files.h"

namespace strata::model {
namespace {

using testing::expect_value;
using testing::TempDir;
using testing::write_text;

// config.json text as transformers' save_pretrained writes it (only the keys strata reads, plus
// one it ignores).
std::string gpt2_config_json(bool tied) {
  return fmt::format(R"({{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 96,
    "n_positions": 32, "n_ctx": 32, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_inner": null,
    "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05, "tie_word_embeddings": {},
    "bos_token_id": 50256, "torch_dtype": "float32"}})",
                     tied ? "true" : "false");
}

std::string llama_config_json(bool tied, std::string_view model_type = "llama", std::string_view extra = "") {
  return fmt::format(R"({{"architectures": ["LlamaForCausalLM"], "model_type": "{}", "vocab_size": 80,
    "max_position_embeddings": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu", "rms_norm_eps": 1e-06,
    "rope_theta": 500000.0, "tie_word_embeddings": {}, "torch_dtype": "bfloat16"{}}})",
                     model_type, tied ? "true" : "false", extra);
}

// A value per element that differs across tensors and is exact in bf16 and f16 after rounding
// (the test compares against the rounded value).
float value_of(size_t tensor, uint64_t e) { return 0.05f * std::sin(0.37f * float(e) + 1.3f * float(tensor)); }

std::vector<std::byte> encode(const std::vector<float>& v, SafeDType dtype) {
  std::vector<std::byte> out(v.size() * safe_dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == SafeDType::f32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = dtype == SafeDType::bf16 ? kernels::float_to_bf16(v[i]) : kernels::float_to_fp16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

float decode(float v, SafeDType dtype) {
  if (dtype == SafeDType::bf16) return kernels::bf16_to_float(kernels::float_to_bf16(v));
  if (dtype == SafeDType::f16) return kernels::fp16_to_float(kernels::float_to_fp16(v));
  return v;
}

// Writes the weights of `config` in HF layouts as the test's own files: `shards` files with an
// index (1: model.safetensors), round-robin by tensor. Returns the expected values (HF layout,
// widened from `dtype`), by name.
std::map<std::string, std::vector<float>> write_hf_weights(const std::string& dir, const ModelConfig& config,
                                                           SafeDType dtype, int shards) {
  const ParamLayout layout = expect_value(build_param_layout(config, 4));
  std::map<std::string, std::vector<float>> expected;
  std::vector<std::vector<std::vector<std::byte>>> bytes(shards);
  std::vector<std::vector<SafetensorsBlob>> blobs(shards);
  std::string weight_map;
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const ParamSpec& p = layout.params[i];
    std::vector<float> v(p.elements);
    for (uint64_t e = 0; e < p.elements; ++e) v[e] = value_of(i, e);
    std::vector<float>& want = expected[p.name];
    for (float x : v) want.push_back(decode(x, dtype));
    const int s = int(i % size_t(shards));
    bytes[s].push_back(encode(v, dtype));
    const std::string file =
        shards == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards);
    weight_map += fmt::format("{}\"{}\": \"{}\"", weight_map.empty() ? "" : ", ", p.name, file);
  }
  for (int s = 0; s < shards; ++s) {
    size_t k = 0;
    for (size_t i = size_t(s); i < layout.params.size(); i += size_t(shards)) {
      std::vector<uint64_t> shape;
      for (int64_t d : layout.params[i].hf_shape()) shape.push_back(uint64_t(d));
      blobs[s].push_back(
          {.spec = {.name = layout.params[i].name, .dtype = dtype, .shape = shape}, .bytes = bytes[s][k++]});
    }
    const std::string file =
        shards == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards);
    EXPECT_TRUE(write_safetensors(dir + "/" + file, blobs[s], {{"format", "pt"}}).is_ok());
  }
  if (shards > 1)
    write_text(dir + "/model.safetensors.index.json", "{\"metadata\": {}, \"weight_map\": {" + weight_map + "}}");
  return expected;
}

struct LoadedModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Transformer> model;
};

LoadedModel make_model(const ModelConfig& config) {
  LoadedModel m;
  m.backend = expect_value(make_backend(testing::test_backend(BackendKind::cpu)));
  m.model = expect_value(Transformer::create(*m.backend, config, TransformerOptions{.batch = 1, .seq_len = 8}));
  return m;
}

std::string message_of(const Status& s) { return s.message(); }

// --- config.json ----------------------------------------------------------------------------

TEST(HfConfig, Gpt2ConfigSetsDimensionsAndDefaultsTheMlpWidth) {
  const HfModelConfig hf = expect_value(parse_hf_config(gpt2_config_json(true), "gpt2/config.json"));
  EXPECT_EQ(hf.model_type, "gpt2");
  EXPECT_EQ(hf.config.arch, Arch::gpt2);
  EXPECT_EQ(hf.config.vocab, 96);
  EXPECT_EQ(hf.config.max_seq, 32);
  EXPECT_EQ(hf.config.dim, 32);
  EXPECT_EQ(hf.config.n_layer, 2);
  EXPECT_EQ(hf.config.n_head, 4);
  EXPECT_EQ(hf.config.n_kv_head, 4);
  EXPECT_EQ(hf.config.ffn_hidden, 128);  // n_inner null: 4 x n_embd
  EXPECT_FLOAT_EQ(hf.config.norm_eps, 1e-5f);
  EXPECT_TRUE(hf.config.tied_head);
  EXPECT_EQ(hf.config.name, "hf-gpt2[L=2,C=32,NH=4,NKV=4,H=128,V=96]");
  ASSERT_EQ(hf.notes.size(), 1u);
  EXPECT_NE(hf.notes[0].find("n_inner"), std::string::npos);
}

TEST(HfConfig, LlamaConfigWithGqaAndTiedHead) {
  const HfModelConfig hf = expect_value(parse_hf_config(llama_config_json(true), "l/config.json"));
  EXPECT_EQ(hf.config.arch, Arch::llama);
  EXPECT_EQ(hf.config.vocab, 80);
  EXPECT_EQ(hf.config.max_seq, 64);
  EXPECT_EQ(hf.config.dim, 32);
  EXPECT_EQ(hf.config.n_head, 4);
  EXPECT_EQ(hf.config.n_kv_head, 2);
  EXPECT_EQ(hf.config.ffn_hidden, 48);
  EXPECT_FLOAT_EQ(hf.config.norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(hf.config.rope_theta, 500000.f);
  EXPECT_TRUE(hf.config.tied_head);
  EXPECT_FALSE(hf.config.qkv_bias);
  EXPECT_FALSE(expect_value(parse_hf_config(llama_config_json(false), "l")).config.tied_head);
}

TEST(HfConfig, MistralSlidingWindowCapsMaxSeqAndQwen2HasQkvBiases) {
  const HfModelConfig mistral =
      expect_value(parse_hf_config(llama_config_json(false, "mistral", R"(, "sliding_window": 16)"), "m"));
  EXPECT_EQ(mistral.config.max_seq, 16);
  ASSERT_FALSE(mistral.notes.empty());
  EXPECT_NE(mistral.notes.back().find("sliding_window 16"), std::string::npos);
  const HfModelConfig qwen = expect_value(parse_hf_config(llama_config_json(false, "qwen2"), "q"));
  EXPECT_TRUE(qwen.config.qkv_bias);
  const ParamLayout layout = expect_value(build_param_layout(qwen.config, 4));
  const ParamSpec* kb = layout.find("model.layers.1.self_attn.k_proj.bias");
  ASSERT_NE(kb, nullptr);
  EXPECT_EQ(kb->shape, std::vector<int64_t>{16});  // NKV 2 x head size 8
  EXPECT_FALSE(kb->weight_decay);
  EXPECT_EQ(layout.total_elements(), parameter_count(qwen.config));
  const HfModelConfig scaled = expect_value(
      parse_hf_config(llama_config_json(false, "llama", R"(, "rope_scaling": {"rope_type": "llama3"})"), "s"));
  ASSERT_EQ(scaled.warnings.size(), 1u);
  EXPECT_NE(scaled.warnings[0].find("plain RoPE"), std::string::npos);
  // transformers 5 moved rope_theta under rope_parameters.
  const std::string v5 = R"({"model_type": "llama", "vocab_size": 80, "max_position_embeddings": 64,
      "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
      "rope_parameters": {"rope_theta": 250000.0, "rope_type": "default"}})";
  const HfModelConfig moved = expect_value(parse_hf_config(v5, "v5"));
  EXPECT_FLOAT_EQ(moved.config.rope_theta, 250000.f);
  EXPECT_EQ(moved.config.n_kv_head, 4);  // num_key_value_heads absent: one per query head
  EXPECT_TRUE(moved.warnings.empty());
}

TEST(HfConfig, UnsupportedArchitecturesAndFeaturesAreRefusedByName) {
  const Status bert =
      parse_hf_config(R"({"model_type": "bert", "architectures": ["BertModel"]})", "b/config.json").status();
  EXPECT_EQ(bert.code(), Code::invalid_argument);
  EXPECT_NE(message_of(bert).find("model_type 'bert'"), std::string::npos) << bert.message();
  EXPECT_NE(message_of(bert).find("gpt2, llama, mistral, qwen2"), std::string::npos) << bert.message();
  const Status bias = parse_hf_config(llama_config_json(false, "llama", R"(, "attention_bias": true)"), "a").status();
  EXPECT_NE(message_of(bias).find("attention_bias"), std::string::npos) << bias.message();
  const Status head_dim = parse_hf_config(llama_config_json(false, "llama", R"(, "head_dim": 16)"), "h").status();
  EXPECT_NE(message_of(head_dim).find("head_dim 16"), std::string::npos) << head_dim.message();
  const Status missing = parse_hf_config(R"({"model_type": "llama", "vocab_size": 8})", "x/config.json").status();
  EXPECT_NE(message_of(missing).find("x/config.json: no 'max_position_embeddings'"), std::string::npos)
      << missing.message();
  const Status act = parse_hf_config(R"({"model_type": "gpt2", "vocab_size": 8, "n_positions": 8, "n_embd": 8,
      "n_layer": 1, "n_head": 2, "activation_function": "relu"})",
                                     "g")
                         .status();
  EXPECT_NE(message_of(act).find("activation_function 'relu'"), std::string::npos) << act.message();
}

TEST(HfConfig, ExplicitFlagsMustAgreeWithTheConfig) {
  const HfModelConfig hf = expect_value(parse_hf_config(llama_config_json(false), "d/config.json"));
  std::vector<std::string> notes;
  ModelOverrides agree;
  agree.n_layer = 2;
  agree.max_seq = 16;
  const ModelConfig same = expect_value(apply_overrides_to_hf(hf, agree, "d/config.json", notes));
  EXPECT_EQ(same.n_layer, 2);
  EXPECT_EQ(same.max_seq, 16);  // LLaMA positions are computed: a shorter limit is fine
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("--max-seq 16 lowers"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("--n-layer 2 agrees"), std::string::npos) << notes[1];
  ModelOverrides more_layers;
  more_layers.n_layer = 4;
  const Status layers = apply_overrides_to_hf(hf, more_layers, "d/config.json", notes).status();
  EXPECT_EQ(layers.code(), Code::invalid_argument);
  EXPECT_NE(message_of(layers).find("--n-layer 4 contradicts d/config.json's num_hidden_layers 2"), std::string::npos)
      << layers.message();
  ModelOverrides other_arch;
  other_arch.arch = Arch::gpt2;
  const Status arch = apply_overrides_to_hf(hf, other_arch, "d/config.json", notes).status();
  EXPECT_NE(message_of(arch).find("--arch gpt2 contradicts"), std::string::npos) << arch.message();
  const HfModelConfig gpt2 = expect_value(parse_hf_config(gpt2_config_json(true), "g/config.json"));
  ModelOverrides shorter;
  shorter.max_seq = 16;
  const Status positions = apply_overrides_to_hf(gpt2, shorter, "g/config.json", notes).status();
  EXPECT_NE(message_of(positions).find("--max-seq 16 contradicts g/config.json's n_positions 32"), std::string::npos)
      << positions.message();
}

TEST(HfConfig, WrittenConfigReadsBackToTheSameModel) {
  for (const ModelConfig& c : {expect_value(parse_hf_config(gpt2_config_json(false), "g")).config,
                               expect_value(parse_hf_config(llama_config_json(true), "l")).config,
                               expect_value(parse_hf_config(llama_config_json(false, "qwen2"), "q")).config,
                               expect_value(model_preset("llama-1b"))}) {
    const HfModelConfig back = expect_value(parse_hf_config(hf_config_json(c, SafeDType::bf16), "written"));
    EXPECT_EQ(back.config.name, c.name);
    EXPECT_EQ(back.config.arch, c.arch);
    EXPECT_EQ(back.config.vocab, c.vocab);
    EXPECT_EQ(back.config.max_seq, c.max_seq);
    EXPECT_EQ(back.config.dim, c.dim);
    EXPECT_EQ(back.config.n_layer, c.n_layer);
    EXPECT_EQ(back.config.n_head, c.n_head);
    EXPECT_EQ(back.config.n_kv_head, c.n_kv_head);
    EXPECT_EQ(back.config.ffn_hidden, c.ffn_hidden);
    EXPECT_EQ(back.config.norm_eps, c.norm_eps);
    EXPECT_EQ(back.config.rope_theta, c.rope_theta);
    EXPECT_EQ(back.config.tied_head, c.tied_head);
    EXPECT_EQ(back.config.qkv_bias, c.qkv_bias);
  }
  EXPECT_NE(
      hf_config_json(expect_value(model_preset("gpt2-tiny")), SafeDType::bf16).find("\"torch_dtype\": \"bfloat16\""),
      std::string::npos);
}

// --- loading ----------------------------------------------------------------------------------

struct LoadCase {
  std::string name;
  std::string config_json;
  SafeDType dtype;
  int shards;
};

class HfLoadTest : public ::testing::TestWithParam<LoadCase> {};

TEST_P(HfLoadTest, EveryValueArrivesExactly) {
  const LoadCase& c = GetParam();
  TempDir dir;
  write_text(dir.file("config.json"), c.config_json);
  const ModelConfig config = expect_value(read_hf_config(dir.file("config.json"))).config;
  const auto expected = write_hf_weights(dir.path(), config, c.dtype, c.shards);
  const HfWeights weights = expect_value(HfWeights::open(dir.path()));
  EXPECT_EQ(weights.files().size(), size_t(c.shards));
  EXPECT_EQ(weights.config_path(), dir.file("config.json"));
  LoadedModel m = make_model(config);
  ASSERT_TRUE(m.model->load_hf_weights(weights).is_ok());
  for (const ParamSpec& p : m.model->layout().params) {
    // copy_parameter_to_host returns the HF layout (GPT-2 Conv1D weights transposed back).
    const std::vector<float> got = expect_value(m.model->copy_parameter_to_host(p.name, ParamState::weights));
    const std::vector<float>& want = expected.at(p.name);
    ASSERT_EQ(got.size(), want.size()) << p.name;
    for (size_t e = 0; e < got.size(); ++e) ASSERT_EQ(got[e], want[e]) << p.name << " element " << e;
  }
  EXPECT_EQ(m.model->layout().find("lm_head.weight") != nullptr, !config.tied_head);
}

INSTANTIATE_TEST_SUITE_P(
    Models, HfLoadTest,
    ::testing::Values(LoadCase{"gpt2_tied_f32", gpt2_config_json(true), SafeDType::f32, 1},
                      LoadCase{"gpt2_untied_bf16_sharded", gpt2_config_json(false), SafeDType::bf16, 3},
                      LoadCase{"llama_untied_bf16_sharded", llama_config_json(false), SafeDType::bf16, 4},
                      LoadCase{"llama_tied_f16_sharded", llama_config_json(true), SafeDType::f16, 2},
                      LoadCase{"llama_tied_f32", llama_config_json(true), SafeDType::f32, 1},
                      LoadCase{"qwen2_biases_f32_sharded", llama_config_json(false, "qwen2"), SafeDType::f32, 2}),
    [](const ::testing::TestParamInfo<LoadCase>& info) { return info.param.name; });

TEST(HfWeights, SingleFileFindsTheConfigBesideIt) {
  TempDir dir;
  write_text(dir.file("config.json"), gpt2_config_json(true));
  const ModelConfig config = expect_value(read_hf_config(dir.file("config.json"))).config;
  write_hf_weights(dir.path(), config, SafeDType::f32, 1);
  const HfWeights w = expect_value(HfWeights::open(dir.file("model.safetensors")));
  EXPECT_EQ(w.config_path(), dir.file("config.json"));
  EXPECT_EQ(w.tensor_count(), expect_value(build_param_layout(config, 4)).params.size());
  // OpenAI's GPT-2 files have no "transformer." prefix: found either way.
  EXPECT_NE(w.find("transformer.wte.weight").tensor, nullptr);
}

TEST(HfWeights, BadDirectoriesAreRefusedBeforeLoading) {
  const ModelConfig llama = expect_value(parse_hf_config(llama_config_json(false), "l")).config;
  const ParamLayout layout = expect_value(build_param_layout(llama, 4));
  {  // a shard the index names is missing
    TempDir dir;
    write_hf_weights(dir.path(), llama, SafeDType::bf16, 3);
    std::filesystem::remove(dir.file("model-00002-of-00003.safetensors"));
    const Status s = HfWeights::open(dir.path()).status();
    EXPECT_EQ(s.code(), Code::not_found);
    EXPECT_NE(message_of(s).find("names shard model-00002-of-00003.safetensors, which is missing"), std::string::npos)
        << s.message();
  }
  {  // the index names a tensor twice
    TempDir dir;
    write_hf_weights(dir.path(), llama, SafeDType::bf16, 2);
    write_text(dir.file("model.safetensors.index.json"),
               R"({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors",
                                  "model.norm.weight": "model-00002-of-00002.safetensors"}})");
    const Status s = HfWeights::open(dir.path()).status();
    EXPECT_EQ(s.code(), Code::invalid_argument);
    EXPECT_NE(message_of(s).find("names tensor 'model.norm.weight' twice"), std::string::npos) << s.message();
  }
  {  // no weights at all
    TempDir dir;
    const Status s = HfWeights::open(dir.path()).status();
    EXPECT_EQ(s.code(), Code::not_found);
    EXPECT_NE(message_of(s).find("holds neither model.safetensors nor model.safetensors.index.json"),
              std::string::npos);
  }
  {  // a shape that does not match the config, a dtype the loader cannot read, a missing untied head
    TempDir dir;
    const std::vector<float> norm(40, 1.f);
    const std::vector<int32_t> ints(32, 1);
    const std::vector<float> wte(80 * 32, 0.f);
    const SafetensorsBlob blobs[] = {
        {{"model.norm.weight", SafeDType::f32, {40}}, std::as_bytes(std::span(norm))},
    };
    ASSERT_TRUE(write_safetensors(dir.file("shape.safetensors"), blobs).is_ok());
    const Status shape = expect_value(HfWeights::open(dir.file("shape.safetensors"))).check_layout(layout, "m");
    EXPECT_NE(message_of(shape).find("has no tensor 'model.embed_tokens.weight'"), std::string::npos)
        << shape.message();

    // A file holding every tensor, then one of them wrong at a time.
    auto check_with = [&](const std::string& name, SafeDType dtype, std::vector<uint64_t> shape_of) {
      std::vector<std::vector<std::byte>> store;
      std::vector<SafetensorsBlob> all;
      for (const ParamSpec& p : layout.params) {
        std::vector<uint64_t> s;
        for (int64_t d : p.hf_shape()) s.push_back(uint64_t(d));
        SafeDType t = SafeDType::f32;
        if (p.name == name) {
          if (shape_of.empty()) continue;  // leave it out
          s = shape_of;
          t = dtype;
        }
        uint64_t n = 1;
        for (uint64_t d : s) n *= d;
        store.emplace_back(n * safe_dtype_size(t));
        all.push_back({{p.name, t, s}, store.back()});
      }
      const std::string path = dir.file("all.safetensors");
      EXPECT_TRUE(write_safetensors(path, all).is_ok());
      return expect_value(HfWeights::open(path)).check_layout(layout, "tiny-llama");
    };
    const Status wrong_shape = check_with("model.layers.0.self_attn.k_proj.weight", SafeDType::f32, {32, 32});
    EXPECT_NE(message_of(wrong_shape)
                  .find("'model.layers.0.self_attn.k_proj.weight' has shape [32, 32] but model "
                        "'tiny-llama' needs [16, 32]"),
              std::string::npos)
        << wrong_shape.message();
    const Status wrong_dtype = check_with("model.norm.weight", SafeDType::i32, {32});
    EXPECT_NE(message_of(wrong_dtype).find("'model.norm.weight' is I32"), std::string::npos) << wrong_dtype.message();
    const Status no_head = check_with("lm_head.weight", SafeDType::f32, {});
    EXPECT_NE(message_of(no_head).find("no 'lm_head.weight'"), std::string::npos) << no_head.message();
    EXPECT_NE(message_of(no_head).find("tie_word_embeddings"), std::string::npos);
    EXPECT_TRUE(check_with("model.norm.weight", SafeDType::bf16, {32}).is_ok());
  }
}

// --- export -----------------------------------------------------------------------------------

TEST(HfExport, ShardPlanFollowsTheSizeLimit) {
  const ModelConfig c = expect_value(model_preset("llama-tiny"));
  const ParamLayout layout = expect_value(build_param_layout(c, 4));
  EXPECT_EQ(plan_hf_shards(layout, {}).size(), 1u);
  // 4 KiB shards in bf16: each shard's tensors fit, or it holds one tensor alone.
  const auto shards = plan_hf_shards(layout, {.dtype = SafeDType::bf16, .shard_bytes = 4096});
  EXPECT_GT(shards.size(), 4u);
  size_t total = 0;
  for (const auto& s : shards) {
    uint64_t bytes = 0;
    for (size_t i : s) bytes += layout.params[i].elements * 2;
    EXPECT_TRUE(bytes <= 4096 || s.size() == 1);
    total += s.size();
  }
  EXPECT_EQ(total, layout.params.size());
}

class HfRoundTripTest : public ::testing::TestWithParam<std::string> {};

// init -> export (sharded, fp32) -> load into a fresh model: every weight bit for bit; bf16
// export rounds each value once.
TEST_P(HfRoundTripTest, ExportThenInitFromGivesTheSameWeights) {
  ModelConfig config = expect_value(model_preset(GetParam()));
  LoadedModel a = make_model(config);
  ASSERT_TRUE(a.model->init(11).is_ok());
  const HfTensorSource source = [&](const ParamSpec& p) {
    return a.model->copy_parameter_to_host(p.name, ParamState::weights);
  };
  TempDir dir;
  ASSERT_TRUE(write_hf_model(dir.path(), config, a.model->layout(), source, {.shard_bytes = 16384}).is_ok());
  EXPECT_TRUE(std::filesystem::exists(dir.file("model.safetensors.index.json")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("model.safetensors")));
  const HfWeights weights = expect_value(HfWeights::open(dir.path()));
  EXPECT_GT(weights.files().size(), 2u);
  const HfModelConfig back = expect_value(read_hf_config(weights.config_path()));
  EXPECT_EQ(back.config.name, config.name);
  LoadedModel b = make_model(back.config);
  ASSERT_TRUE(b.model->load_hf_weights(weights).is_ok());
  for (const ParamSpec& p : a.model->layout().params) {
    const std::vector<float> x = expect_value(a.model->copy_parameter_to_host(p.name, ParamState::weights));
    const std::vector<float> y = expect_value(b.model->copy_parameter_to_host(p.name, ParamState::weights));
    ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0) << p.name;
  }

  TempDir half;
  ASSERT_TRUE(write_hf_model(half.path(), config, a.model->layout(), source, {.dtype = SafeDType::bf16}).is_ok());
  const HfWeights hw = expect_value(HfWeights::open(half.path()));
  ASSERT_EQ(hw.files().size(), 1u);
  const std::string name = a.model->layout().params[0].name;
  const HfTensorRef ref = hw.find(name);
  ASSERT_NE(ref.tensor, nullptr);
  EXPECT_EQ(ref.tensor->dtype, SafeDType::bf16);
  const std::vector<float> x = expect_value(a.model->copy_parameter_to_host(name, ParamState::weights));
  const std::vector<float> y = expect_value(hf_tensor_as_f32(ref));
  for (size_t e = 0; e < x.size(); ++e) ASSERT_EQ(y[e], decode(x[e], SafeDType::bf16)) << e;
  EXPECT_NE(hw.files()[0].metadata().find("format"), hw.files()[0].metadata().end());  // transformers needs "pt"
}

INSTANTIATE_TEST_SUITE_P(Presets, HfRoundTripTest, ::testing::Values("gpt2-tiny", "llama-tiny"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "gpt2-tiny" ? std::string("gpt2") : std::string("llama");
                         });

}  // namespace
}  // namespace strata::model
