// Transformer::init and the HF loaders one chunk at a time (model/net/transformer.h): init's parallel
// generation equals the sequential per-tensor streams bit for bit (SplitMix64::discard makes a
// range start mid-stream), and take_fp32_source() gives each chunk's exact fp32 values again —
// regenerated after init, re-read from the (still mapped) files after a load — whose rounding
// is what the device holds. Not the loss or shape checks (model_transformer_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/half.h"
#include "model/hf/hf_weights.h"
#include "model/net/transformer.h"
#include "tests/model/model_test_files.h"
#include "runtime/splitmix64.h"

namespace strata::model {
namespace {

using testing::expect_value;

std::unique_ptr<Backend> cpu_backend() {
  return expect_value(make_backend(BackendOptions{.kind = BackendKind::cpu, .memory_budget = 64ull << 20}));
}

std::string golden(const std::string& name) { return std::string(STRATA_TEST_DATA_DIR) + "/golden/" + name; }

// llama-tiny with V = 4096: its embedding and head (4096 x 48 = 196608 values) span several of
// init's parallel ranges (2^16 values each).
ModelConfig wide_vocab_llama() {
  ModelConfig c = expect_value(model_preset("llama-tiny"));
  c.vocab = 4096;
  return c;
}

// Tensor i's values as init made them before it went parallel: one SplitMix64 stream per tensor,
// Box-Muller from consecutive pairs, in a single loop (the reference the parallel fill must equal).
std::vector<float> sequential_init(const ParamLayout& masters, int64_t n_layer, uint64_t seed, size_t i) {
  const ParamSpec& p = masters.params[i];
  if (p.shape.size() == 1) {
    const bool gain = p.layer >= 0 ? (p.field == int(LayerField::ln1_w) || p.field == int(LayerField::ln2_w))
                                   : p.field == int(GlobalField::lnf_w);
    return std::vector<float>(p.elements, gain ? 1.f : 0.f);
  }
  const bool residual_proj = p.layer >= 0 && (p.field == int(LayerField::attn_proj_w) || p.field == int(LayerField::fc_proj_w));
  const float stddev = residual_proj ? 0.02f / std::sqrt(2.0f * float(n_layer)) : 0.02f;
  SplitMix64 bits(seed * 0x100000001B3ull + i);
  std::vector<float> out(p.elements);
  for (float& x : out) {
    const double u1 = (double(bits.next() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = double(bits.next() >> 11) * 0x1.0p-53;
    x = float(stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
  return out;
}

// Every chunk of `model`'s master layout from `source`.
std::vector<std::vector<float>> produce_all(const Transformer& model, const Transformer::Fp32ChunkSource& source) {
  std::vector<std::vector<float>> chunks;
  for (size_t c = 0; c < model.master_layout().chunks.size(); ++c) {
    chunks.emplace_back(model.master_layout().chunks[c].bytes / sizeof(float), -1.f);  // padding must be written
    EXPECT_TRUE(source(c, chunks.back().data()).is_ok()) << c;
  }
  return chunks;
}

// Checks that the chunks hold every tensor (in strata's layout) as `want(i)` gives it and zero
// between them.
template <typename Want>
void expect_chunks(const ParamLayout& masters, const std::vector<std::vector<float>>& chunks, const Want& want) {
  std::vector<std::vector<bool>> covered(chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) covered[c].assign(chunks[c].size(), false);
  for (size_t i = 0; i < masters.params.size(); ++i) {
    const ParamSpec& p = masters.params[i];
    const float* got = chunks[p.chunk].data() + p.offset / sizeof(float);
    EXPECT_EQ(std::vector<float>(got, got + p.elements), want(i)) << p.name;
    std::fill_n(covered[p.chunk].begin() + p.offset / sizeof(float), p.elements, true);
  }
  for (size_t c = 0; c < chunks.size(); ++c)
    for (size_t e = 0; e < chunks[c].size(); ++e)
      if (!covered[c][e]) ASSERT_EQ(chunks[c][e], 0.f) << "padding of chunk " << c << " at " << e;
}

TEST(SplitMix64Test, DiscardSkipsOutputs) {
  for (uint64_t k : {0ull, 1ull, 2ull, 7ull, 1000ull, 123457ull}) {
    SplitMix64 walked(42), jumped(42);
    for (uint64_t i = 0; i < k; ++i) walked.next();
    jumped.discard(k);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(jumped.next(), walked.next()) << "k=" << k << " +" << i;
  }
  SplitMix64 cycled(5);  // the period is 2^64 outputs: the state wraps exactly as next()'s does
  cycled.discard(uint64_t{1} << 63);
  cycled.discard(uint64_t{1} << 63);
  EXPECT_EQ(cycled.next(), SplitMix64(5).next());
}

TEST(TransformerInitTest, ParallelInitEqualsTheSequentialStreams) {
  auto backend = cpu_backend();
  const ModelConfig c = wide_vocab_llama();
  auto model = expect_value(Transformer::create(*backend, c, {.batch = 1, .seq_len = 8}));
  ASSERT_TRUE(model->init(7).is_ok());
  const ParamLayout& masters = model->master_layout();
  const ParamSpec* embed = masters.find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  ASSERT_GT(embed->elements, 2 * (uint64_t{1} << 16)) << "the test needs a tensor of several ranges";
  for (size_t i = 0; i < masters.params.size(); ++i) {
    const ParamSpec& p = masters.params[i];
    const std::vector<float> want = sequential_init(masters, c.n_layer, 7, i);
    EXPECT_EQ(expect_value(model->copy_parameter_to_host(p.name, ParamState::weights)), to_hf_layout(p, want.data()))
        << p.name;
  }
  EXPECT_FALSE(model->take_fp32_source()) << "fp32 weights are exact on the device: no source";
}

TEST(TransformerInitTest, SourceAfterInitRegeneratesWhatInitWrote) {
  auto backend = cpu_backend();
  const ModelConfig c = wide_vocab_llama();
  auto exact = expect_value(Transformer::create(*backend, c, {.batch = 1, .seq_len = 8}));
  auto half = expect_value(Transformer::create(*backend, c, {.batch = 1, .seq_len = 8, .dtype = DType::bf16}));
  ASSERT_TRUE(exact->init(11).is_ok());
  ASSERT_TRUE(half->init(11).is_ok());
  const Transformer::Fp32ChunkSource source = half->take_fp32_source();
  ASSERT_TRUE(source);
  EXPECT_FALSE(half->take_fp32_source()) << "taken once";
  const ParamLayout& masters = half->master_layout();
  const std::vector<std::vector<float>> chunks = produce_all(*half, source);
  // The fp32 model's weights are init's values exactly; the source gives the same...
  expect_chunks(masters, chunks, [&](size_t i) {
    const ParamSpec& p = masters.params[i];
    std::vector<float> hf = expect_value(exact->copy_parameter_to_host(p.name, ParamState::weights));
    std::vector<float> ours(p.elements);
    from_hf_layout(p, hf.data(), ours.data());
    return ours;
  });
  // ...and rounded to bf16 they are the 16-bit model's weights.
  for (const ParamSpec& p : masters.params) {
    const float* v = chunks[p.chunk].data() + p.offset / sizeof(float);
    std::vector<float> rounded(p.elements);
    for (uint64_t e = 0; e < p.elements; ++e) rounded[e] = kernels::bf16_to_float(kernels::float_to_bf16(v[e]));
    EXPECT_EQ(expect_value(half->copy_parameter_to_host(p.name, ParamState::weights)), to_hf_layout(p, rounded.data()))
        << p.name;
  }
}

// begin_init writes each chunk's weights when its source first produces the chunk (the trainer's
// masters), finish_init the chunks it never produced: every byte of every chunk (padding included)
// and every value the source gives are init's.
TEST(TransformerInitTest, BeginInitWritesInitsBitsThroughItsSource) {
  auto backend = cpu_backend();
  const ModelConfig c = wide_vocab_llama();
  auto eager = expect_value(Transformer::create(*backend, c, {.batch = 1, .seq_len = 8, .dtype = DType::bf16}));
  auto deferred = expect_value(Transformer::create(*backend, c, {.batch = 1, .seq_len = 8, .dtype = DType::bf16}));
  ASSERT_TRUE(eager->init(11).is_ok());
  ASSERT_TRUE(deferred->begin_init(11).is_ok());
  EXPECT_EQ(deferred->elements_written(), 0u) << "nothing is written before the source runs";
  const std::vector<std::vector<float>> want = produce_all(*eager, eager->take_fp32_source());
  const Transformer::Fp32ChunkSource source = deferred->take_fp32_source();
  ASSERT_TRUE(source);
  const size_t chunks = want.size(), skipped = 1;  // a chunk the source never produces
  ASSERT_GT(chunks, 2u);
  for (size_t k = chunks; k-- > 0;) {  // in reverse, and the last chunk twice: order does not matter
    if (k == skipped) continue;
    std::vector<float> got(want[k].size(), -1.f);
    ASSERT_TRUE(source(k, got.data()).is_ok()) << k;
    EXPECT_EQ(got, want[k]) << "chunk " << k;
  }
  std::vector<float> again(want[chunks - 1].size(), -1.f);
  ASSERT_TRUE(source(chunks - 1, again.data()).is_ok());
  EXPECT_EQ(again, want[chunks - 1]);
  EXPECT_LT(deferred->elements_written(), eager->elements_written()) << "chunk " << skipped << " is not written yet";
  ASSERT_TRUE(deferred->finish_init().is_ok());
  EXPECT_EQ(deferred->elements_written(), eager->elements_written());
  for (size_t k = 0; k < chunks; ++k) {
    const uint64_t bytes = eager->layout().chunks[k].bytes;
    std::vector<std::byte> a(bytes, std::byte{0x5a}), b(bytes, std::byte{0xa5});
    ASSERT_TRUE(eager->weights().read(k, a.data()).is_ok());
    ASSERT_TRUE(deferred->weights().read(k, b.data()).is_ok());
    EXPECT_EQ(a, b) << "chunk " << k;
  }
}

// The source of a load re-reads the files, which it keeps mapped after the loader's own copy
// (load_hf_safetensors(path)'s, an HfWeights the caller drops) is gone.
TEST(TransformerInitTest, SourceAfterLoadGivesTheFilesValues) {
  auto backend = cpu_backend();
  const ModelConfig c = expect_value(model_preset("gpt2-tiny"));  // Conv1D weights: transposed on load
  const std::string path = golden("gpt2_tiny.safetensors");
  const auto file = expect_value(SafetensorsFile::open(path));
  const auto file_values = [&](const ParamLayout& masters) {
    return [&](size_t i) {
      const ParamSpec& p = masters.params[i];
      const SafetensorsTensor* t = file.find(p.name);
      EXPECT_NE(t, nullptr) << p.name;
      EXPECT_EQ(t->dtype, SafeDType::f32);
      std::vector<float> hf(p.elements), ours(p.elements);
      std::memcpy(hf.data(), file.data(*t).data(), p.elements * sizeof(float));
      from_hf_layout(p, hf.data(), ours.data());
      return ours;
    };
  };

  auto by_path = expect_value(Transformer::create(*backend, c, {.batch = 1, .seq_len = 8, .dtype = DType::bf16}));
  ASSERT_TRUE(by_path->load_hf_safetensors(path).is_ok());
  Transformer::Fp32ChunkSource source = by_path->take_fp32_source();
  ASSERT_TRUE(source);
  expect_chunks(by_path->master_layout(), produce_all(*by_path, source), file_values(by_path->master_layout()));

  auto by_dir = expect_value(Transformer::create(*backend, c, {.batch = 1, .seq_len = 8, .dtype = DType::f16}));
  {
    const HfWeights weights = expect_value(HfWeights::open(path));
    ASSERT_TRUE(by_dir->load_hf_weights(weights).is_ok());
  }
  source = by_dir->take_fp32_source();
  ASSERT_TRUE(source);
  expect_chunks(by_dir->master_layout(), produce_all(*by_dir, source), file_values(by_dir->master_layout()));

  auto f32 = expect_value(Transformer::create(*backend, c, {.batch = 1, .seq_len = 8}));
  ASSERT_TRUE(f32->load_hf_safetensors(file).is_ok());
  EXPECT_FALSE(f32->take_fp32_source()) << "fp32 weights are exact on the device: no source";
}

}  // namespace
}  // namespace strata::model
