// The Transformer's error paths and initialisation (model/transformer.h): budgets, batch limits,
// call order, loading the wrong checkpoint, unknown names, and that init() gives a model whose
// first loss is ln(V) (near-uniform logits) deterministically in the seed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model/transformer.h"
#include "model_test_files.h"

namespace strata::model {
namespace {

using testing::expect_value;

std::unique_ptr<Backend> cpu_backend(uint64_t budget = 64ull << 20) {
  return expect_value(make_backend(BackendOptions{.kind = BackendKind::cpu, .memory_budget = budget}));
}

std::string golden(const std::string& name) { return std::string(STRATA_TEST_DATA_DIR) + "/golden/" + name; }

TEST(TransformerTest, OverBudgetNamesWhatDidNotFit) {
  auto backend = cpu_backend(1ull << 20);
  auto r = Transformer::create(*backend, expect_value(model_preset("gpt2-tiny")), {.batch = 64, .seq_len = 64});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::out_of_memory);
  EXPECT_NE(r.status().message().find("gpt2-tiny activations (B=64, T=64)"), std::string::npos) << r.status().to_string();
  EXPECT_EQ(backend->memory().in_use, 0u) << "a failed create returns what it took";
}

TEST(TransformerTest, RejectsBadOptionsAndShapes) {
  auto backend = cpu_backend();
  const ModelConfig c = expect_value(model_preset("llama-tiny"));
  auto bad = Transformer::create(*backend, c, {.batch = 1, .seq_len = 65});
  EXPECT_EQ(bad.status().code(), Code::invalid_argument);
  EXPECT_NE(bad.status().message().find("max_seq 64"), std::string::npos);

  auto model = expect_value(Transformer::create(*backend, c, {.batch = 2, .seq_len = 16}));
  EXPECT_EQ(model->backward().code(), Code::failed_precondition);
  auto* tokens = static_cast<int32_t*>(expect_value(backend->allocate(4 * 64, "tokens")));
  const Status s = model->forward(tokens, tokens, 3, 16);
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_NE(s.message().find("B=3 T=16"), std::string::npos) << s.to_string();
  auto unknown = model->copy_parameter_to_host("transformer.wte.weight", ParamState::weights);
  EXPECT_EQ(unknown.status().code(), Code::not_found);
  EXPECT_NE(unknown.status().message().find("model.embed_tokens.weight"), std::string::npos);
  EXPECT_TRUE(backend->release(tokens).is_ok());
}

TEST(TransformerTest, LoadingTheWrongCheckpointFails) {
  auto backend = cpu_backend();
  auto gpt2 = expect_value(Transformer::create(*backend, expect_value(model_preset("gpt2-tiny")), {.batch = 1}));
  Status s = gpt2->load_hf_safetensors(golden("llama_tiny.safetensors"));
  EXPECT_EQ(s.code(), Code::not_found);
  EXPECT_NE(s.message().find("transformer.wte.weight"), std::string::npos) << s.to_string();

  ModelConfig wider = expect_value(model_preset("gpt2-tiny"));
  wider.max_seq = 128;  // wpe (128, 48) vs the file's (64, 48)
  auto other = expect_value(Transformer::create(*backend, wider, {.batch = 1, .seq_len = 8}));
  s = other->load_hf_safetensors(golden("gpt2_tiny.safetensors"));
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_NE(s.message().find("[64, 48]"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("[128, 48]"), std::string::npos) << s.to_string();

  EXPECT_EQ(gpt2->load_hf_safetensors(golden("no_such_file.safetensors")).code(), Code::not_found);

  // Integer data under a parameter's name.
  testing::TempDir dir;
  const std::vector<int32_t> ints(256 * 48, 1);
  const SafetensorsBlob blob{{"transformer.wte.weight", SafeDType::i32, {256, 48}},
                             std::as_bytes(std::span<const int32_t>(ints))};
  ASSERT_TRUE(write_safetensors(dir.file("ints.safetensors"), std::span(&blob, 1)).is_ok());
  s = gpt2->load_hf_safetensors(dir.file("ints.safetensors"));
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_NE(s.message().find("is I32; the model loads F32, BF16 or F16"), std::string::npos) << s.to_string();
}

TEST(TransformerTest, LoadTransposesConv1DWeights) {
  auto backend = cpu_backend();
  auto model = expect_value(Transformer::create(*backend, expect_value(model_preset("gpt2-tiny")), {.batch = 1}));
  const auto file = expect_value(SafetensorsFile::open(golden("gpt2_tiny.safetensors")));
  ASSERT_TRUE(model->load_hf_safetensors(file).is_ok());
  // Round trip in the HF layout...
  const std::string name = "transformer.h.1.mlp.c_fc.weight";  // HF (48, 192)
  const auto hf = expect_value(model->copy_parameter_to_host(name, ParamState::weights));
  std::vector<float> want(hf.size());
  std::memcpy(want.data(), file.data(*file.find(name)).data(), want.size() * 4);
  EXPECT_EQ(hf, want);
  // ...and on the device it is (out, in) = (192, 48): device row 5 is HF column 5.
  std::vector<float> row(48);
  ASSERT_TRUE(backend->copy_to_host(row.data(), model->layer_params(1).fc_w + 5 * 48 * 4, 48 * 4, Stream::d2h).is_ok());
  ASSERT_TRUE(backend->synchronize(Stream::d2h).is_ok());
  for (int i = 0; i < 48; ++i) EXPECT_EQ(row[i], want[i * 192 + 5]) << i;
}

TEST(TransformerTest, InitIsDeterministicAndGivesUniformLoss) {
  auto backend = cpu_backend();
  const ModelConfig c = expect_value(model_preset("llama-tiny"));
  auto model = expect_value(Transformer::create(*backend, c, {.batch = 2, .seq_len = 16}));
  ASSERT_TRUE(model->init(7).is_ok());
  const auto q = expect_value(model->copy_parameter_to_host("model.layers.0.self_attn.q_proj.weight", ParamState::weights));
  const auto o = expect_value(model->copy_parameter_to_host("model.layers.0.self_attn.o_proj.weight", ParamState::weights));
  auto stddev = [](const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += double(x) * x;
    return std::sqrt(s / double(v.size()));
  };
  EXPECT_NEAR(stddev(q), 0.02, 0.001);
  EXPECT_NEAR(stddev(o), 0.01, 0.0005);  // 0.02 / sqrt(2L), L = 2
  EXPECT_EQ(expect_value(model->copy_parameter_to_host("model.norm.weight", ParamState::weights)),
            std::vector<float>(48, 1.f));
  ASSERT_TRUE(model->init(7).is_ok());
  EXPECT_EQ(expect_value(model->copy_parameter_to_host("model.layers.0.self_attn.q_proj.weight", ParamState::weights)), q);
  ASSERT_TRUE(model->init(8).is_ok());
  EXPECT_NE(expect_value(model->copy_parameter_to_host("model.layers.0.self_attn.q_proj.weight", ParamState::weights)), q);

  // Small weights: logits near zero, so the loss is close to ln(V).
  std::vector<int32_t> tokens(32);
  for (int i = 0; i < 32; ++i) tokens[i] = (i * 37) % 256;
  auto* dev = static_cast<int32_t*>(expect_value(backend->allocate(32 * 4, "tokens")));
  ASSERT_TRUE(backend->copy_to_device(dev, tokens.data(), 32 * 4, Stream::h2d).is_ok());
  ASSERT_TRUE(backend->synchronize(Stream::h2d).is_ok());
  ASSERT_TRUE(model->forward(dev, dev, 2, 16).is_ok());
  const auto loss = expect_value(model->read_loss());
  EXPECT_EQ(loss.valid_count, 32);
  EXPECT_NEAR(loss.mean_loss, std::log(256.0), 0.05);
  const Status too_many = model->backward(33);  // only 32 targets exist
  EXPECT_EQ(too_many.code(), Code::invalid_argument);
  EXPECT_NE(too_many.message().find("counted_targets 33"), std::string::npos);
  EXPECT_TRUE(backend->release(dev).is_ok());
}

}  // namespace
}  // namespace strata::model
