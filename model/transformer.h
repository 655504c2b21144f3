// Transformer: the GPT-2 / LLaMA decoder (model_config.h) on a Backend, fp32, forward and backward
// written once against ComputeOps, in the manner of llm.c's train_gpt2.c. It owns its parameter
// and gradient chunks (laid out by param_layout.h) and its activation buffers for up to (B, T),
// all from the backend's arena, sized up front. Activation checkpointing keeps only each layer's
// input in the forward and recomputes the layer in the backward. Not an optimizer, not an
// offloader: every chunk stays resident; the offload layers move chunks by ParamLayout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/ops_loss.h"
#include "model/model_config.h"
#include "model/param_layout.h"
#include "model/safetensors.h"
#include "runtime/backend.h"

namespace strata::model {

struct TransformerOptions {
  int64_t batch = 1;              // B: largest batch forward() will see
  int64_t seq_len = 0;            // T: longest sequence forward() will see; 0 = config.max_seq
  bool checkpoint_layers = true;  // keep only layer inputs; recompute each layer in backward()
};

// One layer's internals for (B, T), N = B * T rows. Pointers into the activation block.
struct LayerActivations {
  float* ln1 = nullptr;        // (N, C) first norm output
  float* ln1_mean = nullptr;   // (N)    GPT-2 LayerNorm only
  float* ln1_rstd = nullptr;   // (N)
  float* q = nullptr;          // (B, T, NH, HS)  LLaMA: after RoPE
  float* k = nullptr;          // (B, T, NKV, HS) LLaMA: after RoPE
  float* v = nullptr;          // (B, T, NKV, HS)
  float* att = nullptr;        // (N, C) attention output, heads side by side
  float* att_lse = nullptr;    // (B, NH, T)
  float* att_proj = nullptr;   // (N, C) after c_proj / o_proj
  float* res1 = nullptr;       // (N, C) layer input + att_proj
  float* ln2 = nullptr;        // (N, C)
  float* ln2_mean = nullptr;   // (N)    GPT-2 only
  float* ln2_rstd = nullptr;   // (N)
  float* fc = nullptr;         // (N, FC) GPT-2 pre-GELU (H); LLaMA [gate | up] (2H)
  float* fc_act = nullptr;     // (N, H) gelu(fc) / silu(gate) * up
  float* fc_proj = nullptr;    // (N, C) MLP output before the residual add
};

struct Activations {
  float* residual = nullptr;   // (L + 1, N, C): [l] is layer l's input, [L] the last output
  std::vector<LayerActivations> layers;  // L of them, or 1 shared when checkpointing
  float* lnf = nullptr;        // (N, C) final norm output (the head's input)
  float* lnf_mean = nullptr;   // (N)    GPT-2 only
  float* lnf_rstd = nullptr;   // (N)
  float* logits = nullptr;     // (N, V); overwritten by dlogits in backward()
  float* ce_lse = nullptr;     // (N)
  float* ce_losses = nullptr;  // (N)
  kernels::CrossEntropyResult* loss = nullptr;  // one, in device memory
};

// Gradient scratch for one layer at a time (zeroed before each use).
struct ActivationGrads {
  float* dres = nullptr;   // (N, C) d loss / d residual stream, carried down through the layers
  float* dln = nullptr;    // (N, C) d norm output
  float* datt = nullptr;   // (N, C)
  float* dq = nullptr;     // (N, C) LLaMA: before RoPE
  float* dk = nullptr;     // (N, NKV*HS)
  float* dv = nullptr;     // (N, NKV*HS)
  float* dq_rot = nullptr; // (N, C) LLaMA only: after RoPE
  float* dk_rot = nullptr; // (N, NKV*HS) LLaMA only
  float* dfc = nullptr;    // (N, FC)
  float* dfc_act = nullptr;  // (N, H)
};

// Which copy of a parameter copy_parameter_to_host reads.
enum class ParamState : uint8_t { weights, gradients };

// Thread-safety: one thread drives a Transformer (its work goes to the backend's compute and h2d
// streams). Lifetime: must not outlive the backend; the destructor waits for all streams and
// returns every block it allocated.
class Transformer {
 public:
  // Validates the config and options, builds the layout and allocates every chunk and the
  // activations. Over budget: the arena's out_of_memory, its tag naming the chunk or buffer.
  static StatusOr<std::unique_ptr<Transformer>> create(Backend& backend, const ModelConfig& config,
                                                       const TransformerOptions& options = {});
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  // Reads every parameter by its HF name (GPT-2 Conv1D weights transposed into (out, in); GPT-2
  // names also found without the "transformer." prefix; F32, BF16 or F16 converted to fp32).
  // not_found naming the first missing tensor; invalid_argument for a shape or dtype mismatch.
  // Tensors the layout does not use (HF mask buffers) are ignored. Returns once copied.
  Status load_hf_safetensors(const SafetensorsFile& file);
  Status load_hf_safetensors(const std::string& path);
  // GPT-2 initialisation, deterministic in `seed`: matrices normal(0, 0.02), residual projections
  // normal(0, 0.02 / sqrt(2L)), norm gains 1, biases 0. Returns once copied.
  Status init(uint64_t seed);

  // inputs, targets: device int32 (B, T) the caller filled (ordered before this call, e.g.
  // copy_to_device then synchronize); targets in [0, V) or -1 (ignored). Queues the forward and
  // the mean loss over counted targets into loss_result(). invalid_argument if B or T exceed
  // the options or T > max_seq.
  Status forward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T);
  // Queues the backward of the last forward, ACCUMULATING into the gradient chunks. Each counted
  // row's loss gets gradient grad_scale / counted_targets (counted_targets 0 means B * T: no -1
  // targets). Micro-batch accumulation: pass grad_scale = 1 / micro_batches. Destroys logits().
  Status backward(int64_t counted_targets = 0, float grad_scale = 1.0f);
  // Queues zeroing of every gradient chunk.
  Status zero_grad();

  // The loss of the last forward: sum, counted rows, mean (synchronizes the compute stream).
  StatusOr<kernels::CrossEntropyResult> read_loss();
  // A parameter (or its gradient) by HF name in the HF layout, for checkpoints and tests
  // (synchronizes). not_found for an unknown name.
  StatusOr<std::vector<float>> copy_parameter_to_host(std::string_view hf_name, ParamState state);

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  const TransformerOptions& options() const { return options_; }
  const GlobalParams& params() const { return params_; }
  const GlobalParams& grads() const { return grads_; }
  const LayerParams& layer_params(int l) const { return layer_params_[l]; }
  const LayerParams& layer_grads(int l) const { return layer_grads_[l]; }
  // Device buffers of the last forward (B, T): with checkpointing off every layer's internals
  // stay valid until the next forward; with it on only the layer inputs (and the last layer).
  const Activations& activations() const { return acts_; }
  const kernels::CrossEntropyResult* loss_result() const { return acts_.loss; }

 private:
  Transformer(Backend& backend, ModelConfig config, ParamLayout layout, TransformerOptions options);
  Status allocate_all();
  void carve_activations(int64_t B, int64_t T);
  float* residual(int l) const { return acts_.residual + int64_t(l) * B_ * T_ * config_.dim; }
  const LayerActivations& layer_acts(int l) const { return acts_.layers[options_.checkpoint_layers ? 0 : l]; }
  Status layer_forward(int l, bool write_output = true);
  Status layer_backward(int l);
  Status attention_forward(const LayerParams& p, const LayerActivations& a);
  Status attention_backward(const LayerParams& p, const LayerParams& g, const LayerActivations& a);
  Status mlp_forward(const LayerParams& p, const LayerActivations& a);
  Status mlp_backward(const LayerParams& p, const LayerParams& g, const LayerActivations& a);
  Status norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b);
  Status norm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                       const float* mean, const float* rstd);
  Status write_chunks(const std::vector<std::vector<float>>& host_chunks);

  Backend& backend_;
  ComputeOps& ops_;
  const ModelConfig config_;
  const ParamLayout layout_;
  const TransformerOptions options_;
  std::vector<void*> blocks_;         // every arena block this model owns
  std::vector<float*> param_chunks_;  // one per layout chunk
  std::vector<float*> grad_chunks_;
  GlobalParams params_, grads_;
  std::vector<LayerParams> layer_params_, layer_grads_;
  float* act_block_ = nullptr;        // all activations, carved per (B, T)
  Activations acts_;
  ActivationGrads dacts_;
  const int32_t* inputs_ = nullptr;   // of the last forward
  const int32_t* targets_ = nullptr;
  int64_t B_ = 0, T_ = 0;
};

}  // namespace strata::model
