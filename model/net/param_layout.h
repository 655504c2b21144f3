// ParamLayout: where every parameter of a ModelConfig lives. Parameters are grouped into chunks,
// the unit the offload layers move: the embedding chunk (token table, GPT-2 positions), one chunk
// per transformer layer, and the head chunk (final norm, untied head). Inside a chunk each field
// (a tensor, or fused tensors back to back) starts at a multiple of kFieldAlignment elements -- the
// same element in every precision's layout, and a whole number of 8-bit Adam blocks, so a rank's
// shard cut (4096 elements) never splits a block of a field's first tensor -- and the chunk is
// padded to kChunkAlignment bytes, so one chunk is one
// large transfer. The spec table (one row per Hugging Face tensor) is what the loader, the
// planner and checkpoints read. Not an allocator: offsets and sizes only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/net/model_config.h"
#include "runtime/status.h"

namespace strata::model {

inline constexpr uint64_t kFieldAlignment = 256;   // elements (kernels::kAdam8bitBlock); each field starts here
inline constexpr uint64_t kChunkAlignment = 4096;  // bytes; each chunk's size is a multiple

// The tensors of one transformer layer, pointers into its chunk (weights or gradients alike), as
// bytes: elements are ParamLayout::element_bytes wide (fp32, or bf16/fp16 working weights).
// Matrices are (out, in) as matmul_forward takes them. Null where the architecture has none
// (LLaMA has no biases and no norm shifts).
struct LayerParams {
  std::byte* ln1_w = nullptr;        // (C)        GPT-2 ln_1 gain / LLaMA input_layernorm
  std::byte* ln1_b = nullptr;        // (C)        GPT-2 only
  std::byte* qkv_w = nullptr;        // (C + 2*NKV*HS, C) rows [q | k | v]
  std::byte* qkv_b = nullptr;        // (C + 2*NKV*HS) GPT-2; LLaMA with qkv_bias (Qwen2)
  std::byte* attn_proj_w = nullptr;  // (C, C)     c_proj / o_proj
  std::byte* attn_proj_b = nullptr;  // (C)        GPT-2 only
  std::byte* ln2_w = nullptr;        // (C)        ln_2 / post_attention_layernorm
  std::byte* ln2_b = nullptr;        // (C)        GPT-2 only
  std::byte* fc_w = nullptr;         // GPT-2 (H, C) c_fc; LLaMA (2H, C) rows [gate | up]
  std::byte* fc_b = nullptr;         // (H)        GPT-2 only
  std::byte* fc_proj_w = nullptr;    // (C, H)     mlp.c_proj / down_proj
  std::byte* fc_proj_b = nullptr;    // (C)        GPT-2 only
};

// One name per LayerParams field, in field order.
enum class LayerField : uint8_t {
  ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b, ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b
};
inline constexpr int kLayerFieldCount = 12;
static_assert(sizeof(LayerParams) == kLayerFieldCount * sizeof(std::byte*),
              "LayerParams and LayerField must list the same tensors");
std::byte*& param_field(LayerParams& p, LayerField s);
std::string_view field_name(LayerField s);

// The tensors outside the layers.
struct GlobalParams {
  std::byte* wte = nullptr;      // (V, C)     token embedding (also the head when tied)
  std::byte* wpe = nullptr;      // (maxT, C)  GPT-2 only
  std::byte* lnf_w = nullptr;    // (C)        ln_f / model.norm
  std::byte* lnf_b = nullptr;    // (C)        GPT-2 only
  std::byte* lm_head = nullptr;  // (V, C)     untied head only; the forward uses wte when tied
};
enum class GlobalField : uint8_t { wte, wpe, lnf_w, lnf_b, lm_head };
inline constexpr int kGlobalFieldCount = 5;
static_assert(sizeof(GlobalParams) == kGlobalFieldCount * sizeof(std::byte*),
              "GlobalParams and GlobalField must list the same tensors");
std::byte*& param_field(GlobalParams& p, GlobalField s);

// mlp_in / mlp_out: a tile of a layer's first / second MLP weight (ModelConfig::mlp_tiles).
enum class ChunkKind : uint8_t { embedding, layer, mlp_in, mlp_out, head };

struct ChunkSpec {
  ChunkKind kind = ChunkKind::layer;
  int layer = -1;      // for ChunkKind::layer, mlp_in, mlp_out
  std::string name;    // "embedding", "layer 3", "head"; tiled: "embedding tile 2/4", "head tile 1/4",
                       // "layer 3 mlp in tile 1/4", "layer 3 mlp out tile 4/4"
  uint64_t bytes = 0;  // padded to kChunkAlignment
  int tile = 0;        // embedding / head: which vocabulary tile (the first also holds wpe / ln_f);
                       // mlp_in / mlp_out: which MLP tile
  int tiles = 1;       //   of how many
  int64_t row_begin = 0, rows = 0;  // the tile's rows: vocabulary rows (embedding and head; 0 rows
                                    // untiled tied head), hidden units (mlp_in), output rows (mlp_out)
};

// One Hugging Face tensor, or one tile of it. Several may share one field (LLaMA q/k/v, gate/up):
// they are row blocks of the fused tensor, back to back. A tiled tensor (a (V, C) table with
// ModelConfig::vocab_tile, an MLP weight or bias with mlp_tiles) is one spec per tile, each in its
// own chunk, all with the tensor's name and shape: the tile holds rows [row_begin, row_begin +
// elements / row length) of the tensor in strata's layout, `elements` of them. For a tensor the
// HF file stores transposed (GPT-2's c_fc, c_proj) those rows are columns of the file's tensor.
struct ParamSpec {
  std::string name;            // HF name, e.g. "model.layers.3.self_attn.k_proj.weight"
  std::vector<int64_t> shape;  // the whole tensor's shape in strata's layout: (out, in) for matrices
  bool hf_transposed = false;  // the HF file stores the transpose (GPT-2 Conv1D weights (in, out))
  int chunk = 0;               // index into ParamLayout::chunks
  int layer = -1;              // -1 outside the layers
  int field = 0;               // LayerField (layer >= 0) or GlobalField value
  uint64_t field_offset = 0;   // bytes from the chunk's start to the field (the fused tensor)
  uint64_t offset = 0;         // bytes from the chunk's start to this tensor
  uint64_t elements = 0;       // of this spec: the tensor's, or its tile's
  bool weight_decay = false;   // AdamW decays 2-D and larger tensors only
  int tensor = 0;              // the tensor's ordinal in the layout (shared by its tiles)
  int64_t row_begin = 0;       // a tile's first row; 0 for a whole tensor

  std::vector<int64_t> hf_shape() const;  // shape of the whole tensor as the HF file stores it
  uint64_t tensor_elements() const;       // of the whole tensor
  // Elements of the tensor before this spec's first, row-major in strata's layout (the file's
  // too unless hf_transposed).
  uint64_t tensor_offset() const { return tensor_elements() / uint64_t(shape[0]) * uint64_t(row_begin); }
  bool whole() const { return elements == tensor_elements(); }
};

struct ParamLayout {
  uint64_t element_bytes = 4;    // 4 for fp32 masters and gradients, 2 for bf16 working weights
  std::vector<ChunkSpec> chunks;  // embedding, layer 0 .. L-1 (each followed by its MLP tiles), head
  std::vector<ParamSpec> params;  // chunk by chunk, offsets ascending

  uint64_t total_bytes() const;     // sum of padded chunk sizes
  uint64_t total_elements() const;  // == parameter_count(config)
  const ParamSpec* find(std::string_view hf_name) const;  // its first spec (tile); nullptr when absent
  // Chunk indices: the embedding's tiles [0, embedding_chunks), layer l at embedding_chunks +
  // l * layer_chunks (then its MLP tiles), the head's tiles after the layers.
  size_t embedding_chunks() const;
  size_t head_chunks() const;
  size_t layer_chunks() const;  // per layer: 1, or 1 + 2 * mlp_tiles
};

// One tensor's values between strata's layout (`shape`, (out, in) for matrices) and the HF file's
// (`hf_shape()`): a transposition when hf_transposed, else a copy. `src` holds p.elements values.
// Precondition: p.whole() or !p.hf_transposed (a tile of a transposed tensor is columns of the
// file's tensor, not a block of it: convert the whole tensor).
std::vector<float> to_hf_layout(const ParamSpec& p, const float* src);
void from_hf_layout(const ParamSpec& p, const float* hf_src, float* dst);

// The layout of `config` (validated first) at `element_bytes` per element (2 or 4). With
// config.vocab_tile the token table and the untied head are cut into tiles of that many rows
// (the last one shorter), each its own chunk: the embedding's first tile also holds GPT-2's
// positions, the head's first tile the final norm. With config.mlp_tiles > 1 each layer's chunk
// holds its attention half (norms included) and the MLP's tiles follow it: mlp_tiles chunks of
// the first weight (and bias), then mlp_tiles of the second. Tensor ordinals and the order of
// the fields inside a chunk do not depend on either tiling.
StatusOr<ParamLayout> build_param_layout(const ModelConfig& config, uint64_t element_bytes = 4);

// build_param_layout's layout, shared and immutable: the last few distinct (config, element_bytes)
// asked for are kept, so code that sizes many placements of one model (the planner: dozens of
// candidates, each sized by several functions) builds each layout once instead of hundreds of
// times. The config is validated on every call. Safe for concurrent use.
StatusOr<std::shared_ptr<const ParamLayout>> shared_param_layout(const ModelConfig& config, uint64_t element_bytes = 4);

}  // namespace strata::model
