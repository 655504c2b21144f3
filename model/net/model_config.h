// ModelConfig: the dimensions of a decoder-only transformer, GPT-2 style (learned positions,
// LayerNorm, GELU MLP, multi-head attention, head tied to the token embedding) or LLaMA style
// (RMSNorm, RoPE, SwiGLU MLP, grouped-query attention, untied head), with presets by name and the
// checks that keep a hand-written config buildable. Not the parameter layout (param_layout.h) and
// not the model (transformer.h).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace strata::model {

enum class Arch : uint8_t { gpt2, llama };

// Memory-centric tiling: a tiled table's rows per tile are a multiple of this, and the head's
// input gradient is always reduced over the vocabulary in blocks of this many rows (tiled or not,
// transformer.cc), so a run's bits do not depend on the tiling.
inline constexpr int64_t kVocabTileBlock = 1024;
std::string_view arch_name(Arch arch);

// The largest value of each dimension strata takes, from a flag, a config file or a config.json
// (validate checks them, the flags' ranges are these): within them the layout's int layer and
// chunk numbers, the int32 token ids and parameter_count's 64 bits hold, and a layout builds in
// about a second. Whether a model within them fits a machine is size_bounds.h's question.
struct DimensionLimit {
  std::string_view field;  // ModelConfig's name: "vocab", "max_seq", "dim", ...
  int64_t max;
};
inline constexpr int64_t kMaxLayers = 16384;
inline constexpr int64_t kMaxWidth = int64_t(1) << 20;  // dim, and the heads that divide it
inline constexpr int64_t kMaxFfnHidden = int64_t(1) << 22;
inline constexpr int64_t kMaxVocab = 0x7fffffff;         // int32 token ids
inline constexpr int64_t kMaxPositions = int64_t(1) << 24;
inline constexpr std::array<DimensionLimit, 7> kDimensionLimits = {{{"vocab", kMaxVocab},
                                                                    {"max_seq", kMaxPositions},
                                                                    {"dim", kMaxWidth},
                                                                    {"n_layer", kMaxLayers},
                                                                    {"n_head", kMaxWidth},
                                                                    {"n_kv_head", kMaxWidth},
                                                                    {"ffn_hidden", kMaxFfnHidden}}};
// The limit of dimension `field` (kDimensionLimits); 0 for a name that is not one.
int64_t dimension_limit(std::string_view field);

struct ModelConfig {
  std::string name;           // preset name or "custom"; for logs only
  Arch arch = Arch::gpt2;
  int64_t vocab = 0;          // V
  int64_t max_seq = 0;        // maxT: GPT-2's position table rows; LLaMA's longest sequence
  int64_t dim = 0;            // C, the residual stream width
  int64_t n_layer = 0;        // L
  int64_t n_head = 0;         // NH query heads; head size HS = C / NH
  int64_t n_kv_head = 0;      // NKV key/value heads (GQA); == NH for GPT-2
  int64_t ffn_hidden = 0;     // H: GPT-2 MLP width (4C), LLaMA SwiGLU width
  float norm_eps = 1e-5f;     // LayerNorm / RMSNorm epsilon
  float rope_theta = 10000.f; // LLaMA RoPE base; unused by GPT-2
  bool tied_head = true;      // logits use the token embedding (V, C) as the head weight
  bool qkv_bias = false;      // LLaMA layout with q/k/v biases (Qwen2); GPT-2 always has them
  // Layout, not architecture: memory-centric tiling cuts the (V, C) token table and untied head
  // into tiles of this many rows (a multiple of kVocabTileBlock, param_layout.h), each its own
  // chunk, so the device holds about two tiles of them at a time. 0: whole tables. Changes the
  // chunking only: no value, no checkpoint, no name.
  int64_t vocab_tile = 0;
  // Layout too: memory-centric tiling of every layer's MLP into this many tiles per weight. The
  // first weight (GPT-2 c_fc, LLaMA [gate | up]) is cut along the hidden units, the second
  // (c_proj / down_proj) along its output rows, each block its own chunk, so the device holds
  // about two tiles of an MLP at a time. Tile k of n holds rows [k X / n, (k + 1) X / n) of an
  // X-row weight. 0 or 1: whole MLPs. Unlike vocabulary tiles it changes summation order: the
  // input gradients of the two weights are summed tile by tile (transformer.h).
  int64_t mlp_tiles = 0;

  int64_t head_dim() const { return n_head > 0 ? dim / n_head : 0; }  // HS
  int64_t kv_dim() const { return n_kv_head * head_dim(); }           // NKV * HS
  int64_t qkv_rows() const { return dim + 2 * kv_dim(); }             // rows of the fused q|k|v weight
  // Rows of the first MLP weight: GPT-2 c_fc (H); LLaMA fused [gate | up] (2H).
  int64_t fc_rows() const { return arch == Arch::llama ? 2 * ffn_hidden : ffn_hidden; }
};

// Presets (real Hugging Face dimensions): gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b, llama-1b,
// llama-3b (Llama 3.2), llama-7b, llama-13b, llama-70b (Llama 2), llama-30b (LLaMA 1), and the
// test models gpt2-tiny and llama-tiny (tests/data/golden). not_found lists the known names.
StatusOr<ModelConfig> model_preset(std::string_view name);
std::vector<std::string_view> model_preset_names();

// Explicit dimensions over a preset (`strata train --preset llama-7b --n-layer 4`): each field
// that is set (> 0, or arch given) replaces the preset's. Fields that follow from others follow
// them unless given too: a changed arch sets the head's tying (GPT-2 tied, LLaMA untied); GPT-2's
// n_kv_head is n_head, as is LLaMA's when the preset's no longer divides n_head; a changed dim
// gives GPT-2 ffn_hidden 4 * dim and LLaMA 8/3 * dim rounded up to a multiple of 256.
struct ModelOverrides {
  std::optional<Arch> arch;
  int64_t vocab = 0, max_seq = 0, dim = 0, n_layer = 0, n_head = 0, n_kv_head = 0, ffn_hidden = 0;
  bool any() const {
    return arch || vocab > 0 || max_seq > 0 || dim > 0 || n_layer > 0 || n_head > 0 || n_kv_head > 0 || ffn_hidden > 0;
  }
};

// The preset `preset` with `overrides` applied, validated. With overrides its name records them,
// e.g. "llama-7b[n_layer=4]": checkpoints compare names, so a resume with other dimensions is
// refused. Errors: model_preset's, validate's.
StatusOr<ModelConfig> model_config_with(std::string_view preset, const ModelOverrides& overrides);

// invalid_argument naming the first problem and how to fix it: a dimension < 1 or above its
// limit (kDimensionLimits), dim not a multiple of n_head, n_head not a multiple of n_kv_head,
// GPT-2 with n_kv_head != n_head, an odd LLaMA head size (RoPE pairs elements), norm_eps or
// rope_theta <= 0, a vocab_tile < 0 or not a multiple of kVocabTileBlock, mlp_tiles < 0 or above
// min(H, C).
Status validate(const ModelConfig& config);

// Number of parameters (elements), the tied head counted once. gpt2-124m: 124,439,808.
uint64_t parameter_count(const ModelConfig& config);

// Tiles the (V, C) tables are cut into: ceil(V / vocab_tile), 1 when untiled.
int64_t vocab_tiles(const ModelConfig& config);
// Tiles each MLP weight is cut into: mlp_tiles, 1 when untiled (0 or 1).
int64_t mlp_tiles(const ModelConfig& config);
// Rows [begin, end) of tile k of `tiles` over a weight of `rows` rows: [k rows / tiles, (k + 1) rows / tiles).
struct TileRows {
  int64_t begin = 0, end = 0;
  int64_t rows() const { return end - begin; }
};
TileRows mlp_tile_rows(int64_t rows, int64_t tiles, int64_t k);

}  // namespace strata::model
