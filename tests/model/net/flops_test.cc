// Tests of the model FLOPs count against hand-computed values (GPT-2 124M against llm.c's
// estimate, a LLaMA GQA config) and of the step rates (TFLOP/s, MFU).
#include "model/net/flops.h"

#include <optional>

#include <gtest/gtest.h>

#include "model/train/train_options.h"

namespace strata::model {
namespace {

ModelConfig preset(const char* name) {
  StatusOr<ModelConfig> c = model_preset(name);
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  return *c;
}

// gpt2-124m: V = 50257, C = 768, L = 12, H = 3072, T = 1024, head tied to wte.
//   per layer: qkv 2304 * 768 = 1,769,472; attn out 768 * 768 = 589,824; fc 3072 * 768 =
//   2,359,296; proj 768 * 3072 = 2,359,296; sum 7,077,888; x 12 = 84,934,656
//   head 50257 * 768 = 38,597,376 (once, though tied)  ->  N_mm = 123,532,032
//   forward matmul 2 * N_mm = 247,064,064; attention 2 * 12 * 768 * 1024 = 18,874,368
//   forward 265,938,432; training 3x = 797,815,296 FLOPs per token.
// llm.c (gpt2_estimate_mfu): 6 * N + 6 * L * C * T with N = all 124,439,808 parameters
//   = 746,638,848 + 56,623,104 = 803,261,952; ours is lower by exactly 6 * 907,776, the
//   parameters that multiply nothing: wpe 1024 * 768 = 786,432, biases and norm gains 121,344.
TEST(FlopsTest, Gpt2SmallMatchesHandCountAndLlmC) {
  const ModelConfig c = preset("gpt2-124m");
  EXPECT_EQ(matmul_parameter_count(c), 123'532'032u);
  const TokenFlops f = token_flops(c, 1024);
  EXPECT_EQ(f.matmul, 247'064'064u);
  EXPECT_EQ(f.attention, 18'874'368u);
  EXPECT_EQ(f.forward(), 265'938'432u);
  EXPECT_EQ(f.training(), 797'815'296u);

  const uint64_t non_matmul = parameter_count(c) - matmul_parameter_count(c);
  EXPECT_EQ(non_matmul, 907'776u);
  const uint64_t llmc = 6 * parameter_count(c) + 6ull * 12 * 768 * 1024;
  EXPECT_EQ(llmc, 803'261'952u);
  EXPECT_EQ(f.training() + 6 * non_matmul, llmc);
}

// llama-1b (Llama 3.2 1B): V = 128256, C = 2048, L = 16, NH = 32, NKV = 8 (HS = 64), H = 8192, tied.
//   per layer: qkv (2048 + 2 * 8 * 64 = 3072) * 2048 = 6,291,456; attn out 2048^2 = 4,194,304;
//   gate|up 16384 * 2048 = 33,554,432; down 2048 * 8192 = 16,777,216; sum 60,817,408; x 16 =
//   973,078,528; head 128256 * 2048 = 262,668,288  ->  N_mm = 1,235,746,816
//   T = 2048: attention 2 * 16 * 2048 * 2048 = 134,217,728; forward 2,471,493,632 + 134,217,728 =
//   2,605,711,360; training 7,817,134,080 per token.
TEST(FlopsTest, LlamaGroupedQueryAttention) {
  ModelConfig c = preset("llama-1b");
  EXPECT_EQ(matmul_parameter_count(c), 1'235'746'816u);
  // Everything but the RMSNorm gains (16 * 2 * 2048 + 2048) multiplies.
  EXPECT_EQ(parameter_count(c) - matmul_parameter_count(c), 67'584u);
  const TokenFlops f = token_flops(c, 2048);
  EXPECT_EQ(f.attention, 134'217'728u);
  EXPECT_EQ(f.forward(), 2'605'711'360u);
  EXPECT_EQ(f.training(), 7'817'134'080u);

  // Without GQA (32 kv heads) k and v grow by 2 * 24 * 64 rows of 2048 per layer; the attention
  // products do not change (every query head still meets every key position).
  c.n_kv_head = 32;
  const TokenFlops mha = token_flops(c, 2048);
  EXPECT_EQ(mha.matmul - f.matmul, 2ull * 16 * (2 * 24 * 64) * 2048);
  EXPECT_EQ(mha.attention, f.attention);
}

// The head is one V x C GEMM whether it is its own weight or the token embedding's; the embedding
// lookup itself is not a matmul. llama-tiny (untied): per layer 96*48 + 48*48 + 256*48 + 128*48 =
// 25,344, x 2 = 50,688, head 256 * 48 = 12,288 -> 62,976.
TEST(FlopsTest, TyingTheHeadDoesNotChangeTheCount) {
  ModelConfig c = preset("llama-tiny");
  ASSERT_FALSE(c.tied_head);
  EXPECT_EQ(matmul_parameter_count(c), 62'976u);
  c.tied_head = true;
  EXPECT_EQ(matmul_parameter_count(c), 62'976u);
  EXPECT_EQ(token_flops(c, 64).training(), 3u * (2 * 62'976 + 2 * 2 * 48 * 64));
}

TEST(FlopsTest, AttentionGrowsWithTheSequenceAndVanishesWithoutOne) {
  const ModelConfig c = preset("gpt2-124m");
  EXPECT_EQ(token_flops(c, 2048).attention, 2 * token_flops(c, 1024).attention);
  EXPECT_EQ(token_flops(c, 0).attention, 0u);
  EXPECT_EQ(token_flops(c, 0).forward(), 247'064'064u);
}

// A step is tokens x per-token training FLOPs: 16 x 1024 x 4 = 65,536 tokens of gpt2-124m at
// T = 1024 is 65,536 x 797,815,296 = 52,285,623,238,656 FLOPs, whatever else the run sets.
TEST(FlopsTest, StepFlopsIgnoreCheckpointingAndPrecision) {
  const ModelConfig c = preset("gpt2-124m");
  TrainOptions options;
  options.micro_batch = 16;
  options.seq = 1024;
  options.grad_accum = 4;
  EXPECT_DOUBLE_EQ(training_flops_per_step(c, options), 52'285'623'238'656.0);
  EXPECT_DOUBLE_EQ(training_flops_per_step(c, 65'536, 1024), 52'285'623'238'656.0);

  TrainOptions checkpointed = options;
  checkpointed.activation_checkpointing = true;
  checkpointed.dtype = DType::bf16;
  checkpointed.tf32 = true;
  EXPECT_DOUBLE_EQ(training_flops_per_step(c, checkpointed), training_flops_per_step(c, options));

  options.seq = 512;  // the sequence length does change it: half the attention per token
  options.micro_batch = 32;
  EXPECT_DOUBLE_EQ(training_flops_per_step(c, options),
                   65'536.0 * 3 * (247'064'064.0 + 18'874'368.0 / 2));
}

TEST(StepComputeRatesTest, TflopsAndMfu) {
  // 5e14 FLOPs in 2 s = 250 TFLOP/s; against an A100's 312 that is 80.1%.
  const ComputeRates r = step_compute_rates(5e14, 2.0, 312.0);
  ASSERT_TRUE(r.tflops.has_value());
  ASSERT_TRUE(r.mfu.has_value());
  EXPECT_DOUBLE_EQ(*r.tflops, 250.0);
  EXPECT_DOUBLE_EQ(*r.mfu, 250.0 / 312.0);
}

TEST(StepComputeRatesTest, NoPeakGivesTflopsOnly) {
  const ComputeRates r = step_compute_rates(3e12, 0.5, std::nullopt);
  ASSERT_TRUE(r.tflops.has_value());
  EXPECT_DOUBLE_EQ(*r.tflops, 6.0);
  EXPECT_FALSE(r.mfu.has_value());
  EXPECT_FALSE(step_compute_rates(3e12, 0.5, 0.0).mfu.has_value());
}

TEST(StepComputeRatesTest, AStepWithoutDurationHasNoRates) {
  for (double seconds : {0.0, -1.0}) {
    const ComputeRates r = step_compute_rates(3e12, seconds, 312.0);
    EXPECT_FALSE(r.tflops.has_value()) << seconds;
    EXPECT_FALSE(r.mfu.has_value()) << seconds;
  }
}

TEST(StepComputeRatesTest, MfuIsNotClampedWhenThePeakIsTooLow) {
  const ComputeRates r = step_compute_rates(2e12, 1.0, 1.0);
  ASSERT_TRUE(r.mfu.has_value());
  EXPECT_DOUBLE_EQ(*r.mfu, 2.0);
}

}  // namespace
}  // namespace strata::model
