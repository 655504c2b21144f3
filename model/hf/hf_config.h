// Hugging Face config.json <-> ModelConfig: reading the architecture and dimensions of a model
// directory (`strata train --init-from`) and writing the config.json that lets transformers'
// from_pretrained(DIR) load strata's weights (checkpoints, `strata export --hf`). Supported:
// GPT-2 (GPT2LMHeadModel) and the LLaMA family (LlamaForCausalLM: LLaMA 1/2/3; MistralForCausalLM
// within its sliding window; Qwen2ForCausalLM, whose q/k/v biases strata's layout holds). Not the
// weights (hf_weights.h reads them, hf_export.h writes them) and not a tokenizer config.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/net/model_config.h"
#include "model/hf/safetensors.h"
#include "runtime/status.h"

namespace strata::model {

inline constexpr std::string_view kHfConfigFile = "config.json";

// The model_type values read_hf_config accepts.
std::vector<std::string_view> supported_hf_model_types();

struct HfModelConfig {
  ModelConfig config;                 // validated; name: config.json's "strata_model_name" when strata wrote it,
                                      // else "hf-<model_type>[L=..,C=..,NH=..,NKV=..,H=..,V=..]"
  std::string model_type;             // "gpt2", "llama", "mistral", "qwen2"
  std::vector<std::string> notes;     // what was read and defaulted, for the log
  std::vector<std::string> warnings;  // where strata's model differs from transformers' (rope_scaling)
};

// Parses config.json text; `origin` (its path) prefixes every message. Errors (invalid_argument,
// naming the key and what to do): not a JSON object; a model_type other than the supported ones
// (listed); a required dimension missing or not a positive integer; a GPT-2 activation other than
// gelu_new / gelu_pytorch_tanh, or a LLaMA hidden_act other than silu; head_dim not hidden_size /
// num_attention_heads; LLaMA attention_bias or mlp_bias true (o_proj / MLP biases strata has no
// slot for); GPT-2 scale_attn_by_inverse_layer_idx or reorder_and_upcast_attn; Qwen2 with
// use_sliding_window; then validate()'s. A Mistral sliding_window caps max_seq (a note): within
// the window, attention is plain causal attention.
StatusOr<HfModelConfig> parse_hf_config(std::string_view json_text, const std::string& origin);
// Reads and parses the file `path`; not_found naming it when it is missing.
StatusOr<HfModelConfig> read_hf_config(const std::string& path);

// The config.json of `config` with weights stored as `dtype` (torch_dtype: float32, bfloat16,
// float16), loadable by transformers (GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM).
// Dropout 0, strata's name under "strata_model_name".
std::string hf_config_json(const ModelConfig& config, SafeDType dtype);
// Writes it to `path` atomically (temporary file, fsync, rename); errno errors naming the path.
Status write_hf_config(const std::string& path, const ModelConfig& config, SafeDType dtype);
// The same for any small text file (config.json, the shard index).
Status write_text_atomically(const std::string& path, std::string_view text);

// Explicit dimensions given beside --init-from: equal ones are accepted (named in `notes`), a
// different value is invalid_argument naming the flag, both values and the config key ("--n-layer
// 4 contradicts config.json's num_hidden_layers 2"). One exception: a LLaMA max_seq below the
// config's lowers it (a note): LLaMA's positions are computed, not stored.
StatusOr<ModelConfig> apply_overrides_to_hf(const HfModelConfig& hf, const ModelOverrides& given,
                                            const std::string& origin, std::vector<std::string>& notes);

}  // namespace strata::model
