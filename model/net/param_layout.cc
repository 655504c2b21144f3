// The parameter spec table of a ModelConfig (param_layout.h).
#include "model/net/param_layout.h"

#include <algorithm>
#include <initializer_list>
#include <list>

#include <fmt/format.h>

#include "kernels/cpu/adam8bit.h"
#include "runtime/align.h"
#include "runtime/mutex.h"

namespace strata::model {
namespace {

static_assert(kFieldAlignment % kernels::kAdam8bitBlock == 0, "a field must start on an 8-bit Adam block");

// One HF tensor of a field: `rows` x `cols` in strata's layout (cols 0 for a vector), or of a
// tile of it: rows [row_begin, row_begin + tile_rows) (tile_rows 0: all).
struct Member {
  // Moved into the spec from the (const) initializer list the field gets: mutable, so a layout of
  // thousands of layers copies no name.
  mutable std::string name;
  int64_t rows = 0;
  int64_t cols = 0;
  bool hf_transposed = false;
  int64_t row_begin = 0;
  int64_t tile_rows = 0;
};

// The layout being built and the ordinal its next new tensor takes (kept, not recounted: a
// layout builds in time linear in its tensors).
struct LayoutUnderConstruction {
  ParamLayout& layout;
  int next_tensor = 0;
};

// Appends one chunk's fields to the layout, each field aligned, members back to back.
class ChunkBuilder {
 public:
  ChunkBuilder(LayoutUnderConstruction& build, ChunkKind kind, int layer, std::string name)
      : build_(build), layout_(build.layout), layer_(layer) {
    chunk_ = static_cast<int>(layout_.chunks.size());
    layout_.chunks.push_back({.kind = kind, .layer = layer, .name = std::move(name)});
  }
  ChunkSpec& spec() { return layout_.chunks[chunk_]; }
  ~ChunkBuilder() { layout_.chunks[chunk_].bytes = round_up(cursor_, kChunkAlignment); }

  void field(int field, std::initializer_list<Member> members) {
    cursor_ = round_up(cursor_, kFieldAlignment * layout_.element_bytes);
    const uint64_t field_offset = cursor_;
    for (const auto& m : members) {
      ParamSpec p;
      p.name = std::move(m.name);
      p.shape = m.cols > 0 ? std::vector<int64_t>{m.rows, m.cols} : std::vector<int64_t>{m.rows};
      p.hf_transposed = m.hf_transposed;
      p.chunk = chunk_;
      p.layer = layer_;
      p.field = field;
      p.field_offset = field_offset;
      p.offset = cursor_;
      p.elements = uint64_t(m.tile_rows > 0 ? m.tile_rows : m.rows) * uint64_t(m.cols > 0 ? m.cols : 1);
      p.weight_decay = m.cols > 0;
      p.row_begin = m.row_begin;
      // A tensor's tiles share the ordinal of its first tile; a new tensor takes the next one.
      const ParamSpec* first = m.row_begin > 0 ? last_of(layout_, p.name) : nullptr;
      p.tensor = first != nullptr ? first->tensor : build_.next_tensor++;
      cursor_ += p.elements * layout_.element_bytes;
      layout_.params.push_back(std::move(p));
    }
  }
  void field(LayerField s, std::initializer_list<Member> members) { field(static_cast<int>(s), members); }
  void field(GlobalField s, std::initializer_list<Member> members) { field(static_cast<int>(s), members); }

 private:
  LayoutUnderConstruction& build_;
  ParamLayout& layout_;
  int chunk_ = 0;
  int layer_ = -1;
  uint64_t cursor_ = 0;

  // The latest spec of tensor `name` (its tiles are recent: searched from the back).
  static const ParamSpec* last_of(const ParamLayout& layout, const std::string& name) {
    for (auto it = layout.params.rbegin(); it != layout.params.rend(); ++it)
      if (it->name == name) return &*it;
    return nullptr;
  }
};

// A tile's rows of one MLP tensor (the whole tensor: rows {0, X}).
Member tile_of(std::string name, int64_t rows, int64_t cols, bool hf_transposed, TileRows r) {
  return {.name = std::move(name), .rows = rows, .cols = cols, .hf_transposed = hf_transposed, .row_begin = r.begin,
          .tile_rows = r.rows()};
}

// The MLP's first weight over hidden units `r`: GPT-2 c_fc and its bias; LLaMA the same rows of
// gate and up, back to back in the fc_w field ([gate | up] of the tile).
void mlp_in_fields(ChunkBuilder& b, const ModelConfig& c, const std::string& prefix, TileRows r) {
  const int64_t C = c.dim, H = c.ffn_hidden;
  if (c.arch == Arch::gpt2) {
    b.field(LayerField::fc_w, {tile_of(prefix + "mlp.c_fc.weight", H, C, true, r)});
    b.field(LayerField::fc_b, {tile_of(prefix + "mlp.c_fc.bias", H, 0, false, r)});
    return;
  }
  b.field(LayerField::fc_w, {tile_of(prefix + "mlp.gate_proj.weight", H, C, false, r),
                           tile_of(prefix + "mlp.up_proj.weight", H, C, false, r)});
}

// The MLP's second weight over output rows `r` (of C): c_proj and its bias / down_proj.
void mlp_out_fields(ChunkBuilder& b, const ModelConfig& c, const std::string& prefix, TileRows r) {
  const int64_t C = c.dim, H = c.ffn_hidden;
  if (c.arch == Arch::gpt2) {
    b.field(LayerField::fc_proj_w, {tile_of(prefix + "mlp.c_proj.weight", C, H, true, r)});
    b.field(LayerField::fc_proj_b, {tile_of(prefix + "mlp.c_proj.bias", C, 0, false, r)});
    return;
  }
  b.field(LayerField::fc_proj_w, {tile_of(prefix + "mlp.down_proj.weight", C, H, false, r)});
}

// Layer i's attention half (and its MLP when untiled) in the layer's chunk; with mlp_tiles > 1
// the MLP's tiles follow in chunks of their own, the first weight's tiles, then the second's.
void add_layer(LayoutUnderConstruction& layout, const ModelConfig& c, int i) {
  const bool gpt2 = c.arch == Arch::gpt2;
  const std::string prefix = gpt2 ? fmt::format("transformer.h.{}.", i) : fmt::format("model.layers.{}.", i);
  const int64_t C = c.dim, KV = c.kv_dim(), QKV = c.qkv_rows(), tiles = mlp_tiles(c);
  {
    ChunkBuilder b(layout, ChunkKind::layer, i, fmt::format("layer {}", i));
    if (gpt2) {
      const std::string& h = prefix;
      b.field(LayerField::ln1_w, {{h + "ln_1.weight", C}});
      b.field(LayerField::ln1_b, {{h + "ln_1.bias", C}});
      b.field(LayerField::qkv_w, {{h + "attn.c_attn.weight", QKV, C, true}});
      b.field(LayerField::qkv_b, {{h + "attn.c_attn.bias", QKV}});
      b.field(LayerField::attn_proj_w, {{h + "attn.c_proj.weight", C, C, true}});
      b.field(LayerField::attn_proj_b, {{h + "attn.c_proj.bias", C}});
      b.field(LayerField::ln2_w, {{h + "ln_2.weight", C}});
      b.field(LayerField::ln2_b, {{h + "ln_2.bias", C}});
    } else {
      const std::string& l = prefix;
      b.field(LayerField::ln1_w, {{l + "input_layernorm.weight", C}});
      b.field(LayerField::qkv_w, {{l + "self_attn.q_proj.weight", C, C},
                                {l + "self_attn.k_proj.weight", KV, C},
                                {l + "self_attn.v_proj.weight", KV, C}});
      if (c.qkv_bias) {  // Qwen2: one bias per projection, laid out [q | k | v] like the weight rows
        b.field(LayerField::qkv_b, {{l + "self_attn.q_proj.bias", C},
                                  {l + "self_attn.k_proj.bias", KV},
                                  {l + "self_attn.v_proj.bias", KV}});
      }
      b.field(LayerField::attn_proj_w, {{l + "self_attn.o_proj.weight", C, C}});
      b.field(LayerField::ln2_w, {{l + "post_attention_layernorm.weight", C}});
    }
    if (tiles == 1) {
      mlp_in_fields(b, c, prefix, {0, c.ffn_hidden});
      mlp_out_fields(b, c, prefix, {0, C});
    }
  }
  if (tiles == 1) return;
  for (const ChunkKind kind : {ChunkKind::mlp_in, ChunkKind::mlp_out}) {
    const bool in = kind == ChunkKind::mlp_in;
    for (int64_t k = 0; k < tiles; ++k) {
      const TileRows r = mlp_tile_rows(in ? c.ffn_hidden : C, tiles, k);
      ChunkBuilder b(layout, kind, i, fmt::format("layer {} mlp {} tile {}/{}", i, in ? "in" : "out", k + 1, tiles));
      if (in) {
        mlp_in_fields(b, c, prefix, r);
      } else {
        mlp_out_fields(b, c, prefix, r);
      }
      b.spec().tile = int(k);
      b.spec().tiles = int(tiles);
      b.spec().row_begin = r.begin;
      b.spec().rows = r.rows();
    }
  }
}

}  // namespace

namespace {
// (rows, cols) -> (cols, rows).
void transpose_into(float* dst, const float* src, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  }
}
}  // namespace

std::vector<float> to_hf_layout(const ParamSpec& p, const float* src) {
  std::vector<float> hf(p.elements);
  if (p.hf_transposed) {
    transpose_into(hf.data(), src, p.shape[0], p.shape[1]);  // (out, in) -> HF (in, out)
  } else {
    std::copy_n(src, p.elements, hf.data());
  }
  return hf;
}

void from_hf_layout(const ParamSpec& p, const float* hf_src, float* dst) {
  if (p.hf_transposed) {
    transpose_into(dst, hf_src, p.shape[1], p.shape[0]);  // HF (in, out) -> (out, in)
  } else {
    std::copy_n(hf_src, p.elements, dst);
  }
}

std::byte*& param_field(LayerParams& p, LayerField s) {
  switch (s) {
    case LayerField::ln1_w: return p.ln1_w;
    case LayerField::ln1_b: return p.ln1_b;
    case LayerField::qkv_w: return p.qkv_w;
    case LayerField::qkv_b: return p.qkv_b;
    case LayerField::attn_proj_w: return p.attn_proj_w;
    case LayerField::attn_proj_b: return p.attn_proj_b;
    case LayerField::ln2_w: return p.ln2_w;
    case LayerField::ln2_b: return p.ln2_b;
    case LayerField::fc_w: return p.fc_w;
    case LayerField::fc_b: return p.fc_b;
    case LayerField::fc_proj_w: return p.fc_proj_w;
    case LayerField::fc_proj_b: return p.fc_proj_b;
  }
  return p.ln1_w;  // unreachable: every enumerator is handled above
}

std::string_view field_name(LayerField s) {
  static constexpr std::string_view names[kLayerFieldCount] = {
      "ln1_w", "ln1_b", "qkv_w", "qkv_b", "attn_proj_w", "attn_proj_b",
      "ln2_w", "ln2_b", "fc_w", "fc_b", "fc_proj_w", "fc_proj_b"};
  return names[static_cast<int>(s)];
}

std::byte*& param_field(GlobalParams& p, GlobalField s) {
  switch (s) {
    case GlobalField::wte: return p.wte;
    case GlobalField::wpe: return p.wpe;
    case GlobalField::lnf_w: return p.lnf_w;
    case GlobalField::lnf_b: return p.lnf_b;
    case GlobalField::lm_head: return p.lm_head;
  }
  return p.wte;  // unreachable: every enumerator is handled above
}

std::vector<int64_t> ParamSpec::hf_shape() const {
  if (!hf_transposed || shape.size() != 2) return shape;
  return {shape[1], shape[0]};
}

uint64_t ParamLayout::total_bytes() const {
  uint64_t sum = 0;
  for (const auto& c : chunks) sum += c.bytes;
  return sum;
}

uint64_t ParamLayout::total_elements() const {
  uint64_t sum = 0;
  for (const auto& p : params) sum += p.elements;
  return sum;
}

uint64_t ParamSpec::tensor_elements() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= uint64_t(d);
  return n;
}

size_t ParamLayout::embedding_chunks() const {
  size_t n = 0;
  while (n < chunks.size() && chunks[n].kind == ChunkKind::embedding) ++n;
  return n;
}

size_t ParamLayout::head_chunks() const {
  size_t n = 0;
  while (n < chunks.size() && chunks[chunks.size() - 1 - n].kind == ChunkKind::head) ++n;
  return n;
}

size_t ParamLayout::layer_chunks() const {
  const size_t first = embedding_chunks();
  if (first >= chunks.size() || chunks[first].kind != ChunkKind::layer) return 1;
  size_t n = 1;
  while (first + n < chunks.size() && (chunks[first + n].kind == ChunkKind::mlp_in || chunks[first + n].kind == ChunkKind::mlp_out)) ++n;
  return n;
}

const ParamSpec* ParamLayout::find(std::string_view hf_name) const {
  for (const auto& p : params) {
    if (p.name == hf_name) return &p;
  }
  return nullptr;
}

StatusOr<ParamLayout> build_param_layout(const ModelConfig& c, uint64_t element_bytes) {
  STRATA_RETURN_IF_ERROR(validate(c));
  if (element_bytes != 2 && element_bytes != 4) {
    return error(Code::invalid_argument, "parameter layout: element size {} bytes; use 2 (bf16/fp16) or 4 (fp32)",
                 element_bytes);
  }
  ParamLayout layout;
  layout.element_bytes = element_bytes;
  LayoutUnderConstruction build{layout};
  layout.params.reserve(size_t(c.n_layer) * (8 + 6 * size_t(mlp_tiles(c))) + 2 * size_t(vocab_tiles(c)) + 4);
  const int64_t V = c.vocab, C = c.dim;
  const bool gpt2 = c.arch == Arch::gpt2;
  const int64_t tiles = vocab_tiles(c), R = tiles > 1 ? c.vocab_tile : V;
  const auto tile_name = [tiles](std::string_view what, int64_t k) {
    return tiles > 1 ? fmt::format("{} tile {}/{}", what, k + 1, tiles) : std::string(what);
  };
  // Tile k of table `name`: rows [k R, min(V, (k + 1) R)).
  const auto table_tile = [&](ChunkBuilder& b, GlobalField field, const std::string& name, int64_t k) {
    const int64_t begin = k * R, rows = std::min(V, begin + R) - begin;
    b.field(field, {{.name = name, .rows = V, .cols = C, .row_begin = begin, .tile_rows = rows}});
    b.spec().tile = int(k);
    b.spec().tiles = int(tiles);
    b.spec().row_begin = begin;
    b.spec().rows = rows;
  };
  for (int64_t k = 0; k < tiles; ++k) {
    ChunkBuilder b(build, ChunkKind::embedding, -1, tile_name("embedding", k));
    table_tile(b, GlobalField::wte, gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight", k);
    if (gpt2 && k == 0) b.field(GlobalField::wpe, {{"transformer.wpe.weight", c.max_seq, C}});
  }
  for (int i = 0; i < c.n_layer; ++i) add_layer(build, c, i);
  const int64_t head_tiles = c.tied_head ? 1 : tiles;
  for (int64_t k = 0; k < head_tiles; ++k) {
    ChunkBuilder b(build, ChunkKind::head, -1, c.tied_head ? std::string("head") : tile_name("head", k));
    if (k == 0) {
      b.field(GlobalField::lnf_w, {{gpt2 ? "transformer.ln_f.weight" : "model.norm.weight", C}});
      if (gpt2) b.field(GlobalField::lnf_b, {{"transformer.ln_f.bias", C}});
    }
    if (!c.tied_head) table_tile(b, GlobalField::lm_head, "lm_head.weight", k);
  }
  return layout;
}

namespace {

// Everything build_param_layout reads of a config (validate()'s messages aside).
struct LayoutKey {
  Arch arch;
  int64_t vocab, max_seq, dim, n_layer, n_head, n_kv_head, ffn_hidden, vocab_tile, mlp_tiles;
  bool tied_head, qkv_bias;
  uint64_t element_bytes;
  bool operator==(const LayoutKey&) const = default;
};

// The planner's candidates take a few (working and fp32, per tiling) and each tiling search about
// ten more of one layer (model/plan/tiling.cc): room for all, so no search evicts what the next reuses.
constexpr size_t kSharedLayouts = 32;

}  // namespace

StatusOr<std::shared_ptr<const ParamLayout>> shared_param_layout(const ModelConfig& c, uint64_t element_bytes) {
  static Mutex mu;
  static std::list<std::pair<LayoutKey, std::shared_ptr<const ParamLayout>>> recent GUARDED_BY(mu);  // newest first
  STRATA_RETURN_IF_ERROR(validate(c));
  const LayoutKey key{c.arch,       c.vocab,      c.max_seq,   c.dim,      c.n_layer,
                      c.n_head,     c.n_kv_head,  c.ffn_hidden, c.vocab_tile, c.mlp_tiles,
                      c.tied_head,  c.qkv_bias,   element_bytes};
  {
    MutexLock lock(mu);
    for (auto it = recent.begin(); it != recent.end(); ++it)
      if (it->first == key) {
        recent.splice(recent.begin(), recent, it);
        return recent.front().second;
      }
  }
  STRATA_ASSIGN_OR_RETURN(ParamLayout layout, build_param_layout(c, element_bytes));
  auto shared = std::make_shared<const ParamLayout>(std::move(layout));
  MutexLock lock(mu);
  recent.emplace_front(key, shared);
  if (recent.size() > kSharedLayouts) recent.pop_back();
  return shared;
}

}  // namespace strata::model
