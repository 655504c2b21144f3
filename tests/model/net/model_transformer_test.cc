// The Transformer's error paths and initialisation (model/net/transformer.h): budgets, batch limits,
// call order, loading the wrong checkpoint, unknown names, that init() gives a model whose
// first loss is ln(V) (near-uniform logits) deterministically in the seed, that the logits'
// padded rows (padded_vocab) carry the loss exactly while their padding is never written, and that
// forward_with_loss_gradient + backward gives forward + backward's loss and gradients bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/ops_loss.h"
#include "model/net/transformer.h"
#include "tests/model/model_test_files.h"

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
  std::byte* layer1 = expect_value(model->weights().acquire(model->layer_chunk(1)));
  ASSERT_TRUE(model->weights().release(model->layer_chunk(1)).is_ok());
  ASSERT_TRUE(backend->synchronize(Stream::compute).is_ok());
  ASSERT_TRUE(backend->copy_to_host(row.data(), model->bind_layer(1, layer1).fc_w + 5 * 48 * 4, 48 * 4, Stream::d2h).is_ok());
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


TEST(TransformerTest, PaddedVocabRoundsUpToSixtyFour) {
  EXPECT_EQ(padded_vocab(50257), 50304);  // GPT-2: 16-byte rows in bf16 and fp32
  EXPECT_EQ(padded_vocab(32000), 32000);  // LLaMA: already a multiple
  EXPECT_EQ(padded_vocab(1), 64);
  EXPECT_EQ(padded_vocab(256), 256);
  EXPECT_EQ(padded_vocab(257), 320);
}

// V = 250 pads each logits row to 256: the loss the model reports is the cross-entropy of the rows'
// first V columns bit for bit, and neither the forward nor the in-place backward writes a padding
// column (the CPU arena starts zeroed, so the padding must still be zero bytes).
TEST(TransformerTest, PaddedLogitsRowsCarryTheLossAndLeaveThePadding) {
  auto backend = cpu_backend();
  ModelConfig c = expect_value(model_preset("gpt2-tiny"));
  c.vocab = 250;
  const int64_t B = 2, T = 16, N = B * T, V = c.vocab;
  auto model = expect_value(Transformer::create(*backend, c, {.batch = B, .seq_len = T}));
  ASSERT_EQ(model->logits_stride(), 256);
  ASSERT_TRUE(model->init(3).is_ok());
  std::vector<int32_t> tokens(N), targets(N);
  for (int64_t i = 0; i < N; ++i) {
    tokens[i] = int32_t((i * 37) % V);
    targets[i] = i % 5 == 4 ? kernels::kIgnoreTarget : int32_t((i * 53 + 11) % V);
  }
  auto* dev = static_cast<int32_t*>(expect_value(backend->allocate(2 * N * 4, "tokens")));
  ASSERT_TRUE(backend->copy_to_device(dev, tokens.data(), N * 4, Stream::h2d).is_ok());
  ASSERT_TRUE(backend->copy_to_device(dev + N, targets.data(), N * 4, Stream::h2d).is_ok());
  ASSERT_TRUE(backend->synchronize(Stream::h2d).is_ok());

  ASSERT_TRUE(model->forward(dev, dev + N, B, T).is_ok());
  const auto loss = expect_value(model->read_loss());
  const int64_t Vp = model->logits_stride();
  std::vector<float> padded(size_t(N * Vp));
  const auto read_logits = [&] {
    ASSERT_TRUE(backend->synchronize(Stream::compute).is_ok());
    ASSERT_TRUE(backend->copy_to_host(padded.data(), model->activations().logits, padded.size() * 4, Stream::d2h).is_ok());
    ASSERT_TRUE(backend->synchronize(Stream::d2h).is_ok());
  };
  read_logits();
  std::vector<float> packed(size_t(N * V)), lse(N);
  for (int64_t n = 0; n < N; ++n) std::memcpy(&packed[n * V], &padded[n * Vp], V * 4);
  const kernels::CrossEntropyResult want =
      kernels::crossentropy_forward(lse.data(), nullptr, packed.data(), targets.data(), N, V);
  EXPECT_EQ(loss.valid_count, want.valid_count);
  EXPECT_EQ(loss.loss_sum, want.loss_sum);
  EXPECT_EQ(loss.mean_loss, want.mean_loss);
  EXPECT_NEAR(loss.mean_loss, std::log(250.0), 0.05);
  const auto padding_is_zero = [&] {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t v = V; v < Vp; ++v) {
        uint32_t bits;
        std::memcpy(&bits, &padded[n * Vp + v], 4);
        if (bits != 0) return false;
      }
    return true;
  };
  EXPECT_TRUE(padding_is_zero()) << "the forward wrote a padding column";

  ASSERT_TRUE(model->zero_grad().is_ok());
  ASSERT_TRUE(model->backward(want.valid_count).is_ok());
  read_logits();
  EXPECT_TRUE(padding_is_zero()) << "the backward wrote a padding column";
  // dlogits of a counted row sum to 0 (softmax minus one-hot, times dloss); ignored rows are 0.
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) sum += padded[n * Vp + v];
    EXPECT_NEAR(sum, 0.0, 1e-5) << "row " << n;
  }
  const auto dwte = expect_value(model->copy_parameter_to_host("transformer.wte.weight", ParamState::gradients));
  double norm = 0.0;
  for (float g : dwte) norm += double(g) * g;
  EXPECT_TRUE(std::isfinite(norm) && norm > 0.0) << norm;
  EXPECT_TRUE(backend->release(dev).is_ok());
}

// The loss's gradient written by the forward (forward_with_loss_gradient) against the backward's
// own: the same loss, the same dlogits (padding untouched) and the same gradient of every parameter
// checked, bit for bit; a backward with another loss gradient is refused and names both; a plain
// forward after it trains as before.
TEST(TransformerTest, ForwardWithLossGradientEqualsForwardThenBackward) {
  auto backend = cpu_backend();
  ModelConfig c = expect_value(model_preset("gpt2-tiny"));
  c.vocab = 250;  // padded logits rows, as GPT-2's
  const int64_t B = 2, T = 16, N = B * T;
  auto model = expect_value(Transformer::create(*backend, c, {.batch = B, .seq_len = T}));
  ASSERT_TRUE(model->init(5).is_ok());
  std::vector<int32_t> ids(2 * N);
  int64_t counted = 0;
  for (int64_t i = 0; i < N; ++i) {
    ids[i] = int32_t((i * 41) % c.vocab);
    ids[N + i] = i % 7 == 3 ? kernels::kIgnoreTarget : int32_t((i * 29 + 5) % c.vocab);
    counted += ids[N + i] != kernels::kIgnoreTarget;
  }
  auto* dev = static_cast<int32_t*>(expect_value(backend->allocate(2 * N * 4, "tokens")));
  ASSERT_TRUE(backend->copy_to_device(dev, ids.data(), 2 * N * 4, Stream::h2d).is_ok());
  ASSERT_TRUE(backend->synchronize(Stream::h2d).is_ok());
  const float grad_scale = 0.375f;
  const std::vector<std::string> checked = {"transformer.wte.weight", "transformer.wpe.weight",
                                            "transformer.h.0.attn.c_attn.weight", "transformer.h.1.mlp.c_fc.bias",
                                            "transformer.ln_f.weight"};
  struct Run {
    kernels::CrossEntropyResult loss;
    std::vector<uint8_t> dlogits;
    std::vector<std::vector<float>> grads;
  };
  const auto run = [&](bool fused) {
    Run r;
    EXPECT_TRUE(model->zero_grad().is_ok());
    EXPECT_TRUE((fused ? model->forward_with_loss_gradient(dev, dev + N, B, T, counted, grad_scale)
                       : model->forward(dev, dev + N, B, T))
                    .is_ok());
    r.loss = expect_value(model->read_loss());
    EXPECT_TRUE(model->backward(counted, grad_scale).is_ok());
    r.dlogits.resize(size_t(N * model->logits_stride() * 4));
    EXPECT_TRUE(backend->synchronize(Stream::compute).is_ok());
    EXPECT_TRUE(backend->copy_to_host(r.dlogits.data(), model->activations().logits, r.dlogits.size(), Stream::d2h)
                    .is_ok());
    EXPECT_TRUE(backend->synchronize(Stream::d2h).is_ok());
    for (const std::string& name : checked)
      r.grads.push_back(expect_value(model->copy_parameter_to_host(name, ParamState::gradients)));
    return r;
  };
  const Run plain = run(false), fused = run(true);
  // Field by field: CrossEntropyResult has padding after mean_loss, which memcmp would read.
  EXPECT_EQ(std::memcmp(&plain.loss.loss_sum, &fused.loss.loss_sum, sizeof(double)), 0) << "the loss sum";
  EXPECT_EQ(plain.loss.valid_count, fused.loss.valid_count);
  EXPECT_EQ(std::memcmp(&plain.loss.mean_loss, &fused.loss.mean_loss, sizeof(float)), 0) << "the mean loss";
  EXPECT_EQ(plain.dlogits, fused.dlogits) << "dlogits (and the padding)";
  for (size_t i = 0; i < checked.size(); ++i) {
    EXPECT_EQ(plain.grads[i], fused.grads[i]) << checked[i];
    double norm = 0.0;
    for (float g : fused.grads[i]) norm += double(g) * g;
    EXPECT_GT(norm, 0.0) << checked[i] << ": a gradient that cannot tell";
  }

  // The forward itself leaves dlogits: each counted row of softmax - onehot (times dloss) sums to 0.
  ASSERT_TRUE(model->forward_with_loss_gradient(dev, dev + N, B, T, counted, grad_scale).is_ok());
  const int64_t Vp = model->logits_stride();
  std::vector<float> held(size_t(N * Vp));
  ASSERT_TRUE(backend->synchronize(Stream::compute).is_ok());
  ASSERT_TRUE(backend->copy_to_host(held.data(), model->activations().logits, held.size() * 4, Stream::d2h).is_ok());
  ASSERT_TRUE(backend->synchronize(Stream::d2h).is_ok());
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0.0;
    for (int64_t v = 0; v < c.vocab; ++v) sum += held[size_t(n * Vp + v)];
    EXPECT_NEAR(sum, 0.0, 1e-5) << "row " << n << " after forward_with_loss_gradient";
  }
  const Status other = model->backward(counted, 2 * grad_scale);
  EXPECT_EQ(other.code(), Code::failed_precondition);
  EXPECT_NE(other.message().find("forward_with_loss_gradient the same counted_targets and grad_scale"),
            std::string::npos)
      << other.to_string();
  EXPECT_EQ(model->forward_with_loss_gradient(dev, dev + N, B, T, N + 1, grad_scale).code(), Code::invalid_argument);
  const Run again = run(false);
  EXPECT_EQ(again.dlogits, plain.dlogits) << "a plain forward after a refused backward";
  EXPECT_TRUE(backend->release(dev).is_ok());
}

}  // namespace
}  // namespace strata::model
