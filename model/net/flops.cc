// Model FLOPs per token and per step, and the achieved rates of a step (flops.h).
#include "model/net/flops.h"

#include "model/train/train_options.h"

namespace strata::model {

uint64_t matmul_parameter_count(const ModelConfig& c) {
  const uint64_t C = c.dim, H = c.ffn_hidden, V = c.vocab;
  // q|k|v (QKV x C), attention output (C x C), MLP in (FC x C: GPT-2 fc, LLaMA gate|up), MLP out (C x H).
  const uint64_t layer = uint64_t(c.qkv_rows()) * C + C * C + uint64_t(c.fc_rows()) * C + C * H;
  return uint64_t(c.n_layer) * layer + V * C;  // + the head, once, tied or not
}

TokenFlops token_flops(const ModelConfig& c, int64_t seq_len) {
  TokenFlops f;
  f.matmul = 2 * matmul_parameter_count(c);
  if (seq_len > 0) f.attention = 2 * uint64_t(c.n_layer) * uint64_t(c.dim) * uint64_t(seq_len);
  return f;
}

double training_flops_per_step(const ModelConfig& config, uint64_t tokens, int64_t seq_len) {
  return static_cast<double>(token_flops(config, seq_len).training()) * static_cast<double>(tokens);
}

double training_flops_per_step(const ModelConfig& config, const TrainOptions& options) {
  return training_flops_per_step(config, options.tokens_per_step(), static_cast<int64_t>(options.seq));
}

ComputeRates step_compute_rates(double flops_per_step, double step_seconds, std::optional<double> peak_tflops) {
  ComputeRates rates;
  if (!(step_seconds > 0)) return rates;
  rates.tflops = flops_per_step / step_seconds / 1e12;
  if (peak_tflops && *peak_tflops > 0) rates.mfu = *rates.tflops / *peak_tflops;
  return rates;
}

}  // namespace strata::model
