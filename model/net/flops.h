// Model FLOPs of a training step (the numerator of MFU) and the achieved TFLOP/s and MFU of a step.
// Counted from the model's shape alone: the work the model needs, not the work a run happens to do,
// so activation checkpointing (which recomputes each layer's forward) and the fp16 loss scaler
// leave it unchanged. Not a profiler, and not the device's peak (runtime/device_peak.h).
//
// The count (per token, for one sequence of T tokens; C = dim, L = n_layer, V = vocab):
//   forward  = 2 * N_mm + 2 * L * C * T
//     N_mm: weights that multiply activations: per layer the q|k|v rows (C + 2 * NKV * HS) x C,
//     the attention output C x C, the MLP's first weight (GPT-2: H x C; LLaMA gate|up: 2H x C)
//     and its second C x H; plus the head V x C, counted once whether or not it is tied to the
//     token embedding. Embedding lookups, norms, biases, softmax, activations, the loss and the
//     optimizer count 0. 2 FLOPs per multiply-add.
//     Attention: per layer each query takes a dot product with each earlier key (q.k, 2 * HS
//     FLOPs per head) and weighs each earlier value (2 * HS): 4 * C per (query, key) pair. Causal
//     attention has T^2 / 2 pairs per sequence (the masked half is not model work), so
//     4 * C * T / 2 = 2 * C * T per token. GQA shares k/v heads but not the products: still C.
//   training = 3 * forward (backward computes the input and the weight gradient of every matmul,
//     and dQ, dK, dV, dP for attention: twice the forward).
// So training = 6 * N_mm + 6 * L * C * T per token: llm.c's gpt2_estimate_mfu (Kaplan et al. 2020,
// arXiv:2001.08361, section 2.1), which uses all parameters for N. PaLM (Chowdhery et al. 2022,
// appendix B) and Megatron-LM (Narayanan et al. 2021, eq. 3) count the attention non-causally,
// 12 * L * C * T per token, so their MFU is higher by that term; Megatron's 96 B s l h^2 also
// counts the recomputation of checkpointing, which model FLOPs (PaLM's MFU) exclude.
#pragma once

#include <cstdint>
#include <optional>

#include "model/net/model_config.h"

namespace strata::model {

struct TrainOptions;

// FLOPs per token, split so a log can show where they go. Exact integers: gpt2-124m at T = 1024
// forward is 265,938,432; llama-70b at T = 4096 stays far below 2^63.
struct TokenFlops {
  uint64_t matmul = 0;     // forward: 2 * N_mm
  uint64_t attention = 0;  // forward: 2 * L * C * T (causal q.k and p.v)
  uint64_t forward() const { return matmul + attention; }
  uint64_t training() const { return 3 * forward(); }  // forward + backward
};

// Weights that multiply activations (N_mm above), the head counted once. gpt2-124m: 123,532,032
// (parameter_count's 124,439,808 less the position table, biases and norm gains).
uint64_t matmul_parameter_count(const ModelConfig& config);

// Per token of a sequence of `seq_len` tokens (T >= 1; seq_len <= 0 counts no attention).
TokenFlops token_flops(const ModelConfig& config, int64_t seq_len);

// Model FLOPs of one optimizer step that trains `tokens` tokens in sequences of `seq_len`
// (tokens = micro_batch * seq * grad_accum). A double: 6 * 70e9 * 4M tokens is beyond uint64.
double training_flops_per_step(const ModelConfig& config, uint64_t tokens, int64_t seq_len);
// The same for a run's options (tokens_per_step(), seq); activation_checkpointing, dtype and the
// loss scaler do not change it.
double training_flops_per_step(const ModelConfig& config, const TrainOptions& options);

// What a step achieved. Pure arithmetic; the caller times the step (wall seconds, device synced).
struct ComputeRates {
  std::optional<double> tflops;  // flops_per_step / step_seconds / 1e12; nullopt when step_seconds <= 0
  std::optional<double> mfu;     // tflops / peak_tflops, a fraction; nullopt without tflops or without
                                 // a peak > 0. Not clamped: above 1 means the peak given is wrong.
};
ComputeRates step_compute_rates(double flops_per_step, double step_seconds, std::optional<double> peak_tflops);

}  // namespace strata::model
