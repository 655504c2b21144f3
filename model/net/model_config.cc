// Model presets, validation and parameter count (model_config.h).
#include "model/net/model_config.h"

#include <algorithm>
#include <array>
#include <limits>

#include <fmt/format.h>

#include "runtime/suggest.h"

namespace strata::model {
namespace {

ModelConfig llama(std::string_view name, int64_t vocab, int64_t max_seq, int64_t dim, int64_t n_layer,
                  int64_t n_head, int64_t n_kv_head, int64_t ffn_hidden, float norm_eps, float rope_theta,
                  bool tied_head) {
  ModelConfig c;
  c.name = std::string(name);
  c.arch = Arch::llama;
  c.vocab = vocab;
  c.max_seq = max_seq;
  c.dim = dim;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_kv_head = n_kv_head;
  c.ffn_hidden = ffn_hidden;
  c.norm_eps = norm_eps;
  c.rope_theta = rope_theta;
  c.tied_head = tied_head;
  return c;
}

// GPT-2: MLP width 4C, no GQA, LayerNorm eps 1e-5, head tied to wte.
ModelConfig gpt2(std::string_view name, int64_t vocab, int64_t max_seq, int64_t dim, int64_t n_layer,
                 int64_t n_head) {
  ModelConfig c = llama(name, vocab, max_seq, dim, n_layer, n_head, n_head, 4 * dim, 1e-5f, 10000.f, true);
  c.arch = Arch::gpt2;
  return c;
}

// Hugging Face config.json values. Llama 3.2 (1b, 3b) trains with "llama3" RoPE scaling beyond
// its original 8192 positions; strata applies plain RoPE, so max_seq stops at 8192.
std::vector<ModelConfig> all_presets() {
  return {
      gpt2("gpt2-tiny", 256, 64, 48, 2, 4),  // tests/data/golden/gpt2_tiny (n_inner 192 = 4C)
      gpt2("gpt2-124m", 50257, 1024, 768, 12, 12),
      gpt2("gpt2-350m", 50257, 1024, 1024, 24, 16),
      gpt2("gpt2-774m", 50257, 1024, 1280, 36, 20),
      gpt2("gpt2-1.5b", 50257, 1024, 1600, 48, 25),
      llama("llama-tiny", 256, 64, 48, 2, 4, 2, 128, 1e-5f, 10000.f, false),  // golden llama_tiny
      llama("llama-1b", 128256, 8192, 2048, 16, 32, 8, 8192, 1e-5f, 500000.f, true),
      llama("llama-3b", 128256, 8192, 3072, 28, 24, 8, 8192, 1e-5f, 500000.f, true),
      llama("llama-7b", 32000, 4096, 4096, 32, 32, 32, 11008, 1e-5f, 10000.f, false),
      llama("llama-13b", 32000, 4096, 5120, 40, 40, 40, 13824, 1e-5f, 10000.f, false),
      llama("llama-30b", 32000, 2048, 6656, 60, 52, 52, 17920, 1e-6f, 10000.f, false),
      llama("llama-70b", 32000, 4096, 8192, 80, 64, 8, 28672, 1e-5f, 10000.f, false),
  };
}

}  // namespace

std::string_view arch_name(Arch arch) { return arch == Arch::llama ? "llama" : "gpt2"; }

std::vector<std::string_view> model_preset_names() {
  static const std::vector<ModelConfig> presets = all_presets();
  std::vector<std::string_view> names;
  for (const auto& p : presets) names.push_back(p.name);
  return names;
}

StatusOr<ModelConfig> model_preset(std::string_view name) {
  for (auto& p : all_presets()) {
    if (p.name == name) return p;
  }
  const std::vector<std::string_view> names = model_preset_names();
  return error(Code::not_found, "unknown model preset '{}'{}; known presets: {}", name,
               did_you_mean(name, std::vector<std::string>(names.begin(), names.end()), ""),
               fmt::join(names, ", "));
}

StatusOr<ModelConfig> model_config_with(std::string_view preset, const ModelOverrides& o) {
  STRATA_ASSIGN_OR_RETURN(ModelConfig c, model_preset(preset));
  if (!o.any()) return c;
  std::vector<std::string> changed;
  const auto set = [&changed](int64_t& field, int64_t value, const char* name) {
    if (value <= 0) return;
    field = value;
    changed.push_back(fmt::format("{}={}", name, value));
  };
  if (o.arch && *o.arch != c.arch) {
    c.arch = *o.arch;
    c.tied_head = c.arch == Arch::gpt2;
    changed.push_back(fmt::format("arch={}", arch_name(c.arch)));
  }
  set(c.vocab, o.vocab, "vocab");
  set(c.max_seq, o.max_seq, "max_seq");
  set(c.dim, o.dim, "dim");
  set(c.n_layer, o.n_layer, "n_layer");
  set(c.n_head, o.n_head, "n_head");
  set(c.n_kv_head, o.n_kv_head, "n_kv_head");
  set(c.ffn_hidden, o.ffn_hidden, "ffn_hidden");
  if (o.n_kv_head <= 0 && (c.arch == Arch::gpt2 || c.n_kv_head <= 0 || c.n_head % c.n_kv_head != 0))
    c.n_kv_head = c.n_head;
  if (o.dim > 0 && o.ffn_hidden <= 0)
    c.ffn_hidden = c.arch == Arch::gpt2 ? 4 * c.dim : (8 * c.dim / 3 + 255) / 256 * 256;
  c.name = fmt::format("{}[{}]", preset, fmt::join(changed, ","));
  STRATA_RETURN_IF_ERROR(validate(c));
  return c;
}

int64_t dimension_limit(std::string_view field) {
  for (const DimensionLimit& d : kDimensionLimits)
    if (d.field == field) return d.max;
  return 0;
}

Status validate(const ModelConfig& c) {
  const std::array<std::pair<const char*, int64_t>, 7> dims = {{{"vocab", c.vocab},
                                                                {"max_seq", c.max_seq},
                                                                {"dim", c.dim},
                                                                {"n_layer", c.n_layer},
                                                                {"n_head", c.n_head},
                                                                {"n_kv_head", c.n_kv_head},
                                                                {"ffn_hidden", c.ffn_hidden}}};
  for (const auto& [field, value] : dims) {
    if (value < 1) return error(Code::invalid_argument, "model config '{}': {} is {}; it must be at least 1", c.name, field, value);
    if (value > dimension_limit(field))
      return error(Code::invalid_argument, "model config '{}': {} is {}, above strata's limit of {}{}; pass a smaller {}",
                   c.name, field, value, dimension_limit(field),
                   std::string_view(field) == "vocab" ? " (token ids are int32)" : "", field);
  }
  if (c.vocab_tile < 0 || c.vocab_tile % kVocabTileBlock != 0) {
    return error(Code::invalid_argument,
                 "model config '{}': vocab_tile {} must be 0 (whole tables) or a positive multiple of {} rows", c.name,
                 c.vocab_tile, kVocabTileBlock);
  }
  if (c.mlp_tiles < 0 || c.mlp_tiles > std::min(c.ffn_hidden, c.dim)) {
    return error(Code::invalid_argument,
                 "model config '{}': mlp_tiles {} must be 0 (whole MLPs) or between 1 and min(ffn_hidden {}, dim {})",
                 c.name, c.mlp_tiles, c.ffn_hidden, c.dim);
  }
  if (c.dim % c.n_head != 0) {
    return error(Code::invalid_argument,
                 "model config '{}': dim {} is not a multiple of n_head {}; pick n_head dividing dim", c.name, c.dim,
                 c.n_head);
  }
  if (c.n_head % c.n_kv_head != 0) {
    return error(Code::invalid_argument,
                 "model config '{}': n_head {} is not a multiple of n_kv_head {}; each kv head serves a whole "
                 "group of query heads",
                 c.name, c.n_head, c.n_kv_head);
  }
  if (c.arch == Arch::gpt2 && c.n_kv_head != c.n_head) {
    return error(Code::invalid_argument,
                 "model config '{}': GPT-2 has no grouped-query attention but n_kv_head {} != n_head {}; set them "
                 "equal or use arch llama",
                 c.name, c.n_kv_head, c.n_head);
  }
  if (c.arch == Arch::llama && c.head_dim() % 2 != 0) {
    return error(Code::invalid_argument,
                 "model config '{}': head size {} (dim / n_head) is odd; RoPE rotates pairs of elements", c.name,
                 c.head_dim());
  }
  if (!(c.norm_eps > 0.f)) {
    return error(Code::invalid_argument, "model config '{}': norm_eps {} must be > 0", c.name, c.norm_eps);
  }
  if (c.arch == Arch::llama && !(c.rope_theta > 0.f)) {
    return error(Code::invalid_argument, "model config '{}': rope_theta {} must be > 0", c.name, c.rope_theta);
  }
  return Status::ok();
}

int64_t vocab_tiles(const ModelConfig& c) {
  return c.vocab_tile > 0 ? (c.vocab + c.vocab_tile - 1) / c.vocab_tile : 1;
}

int64_t mlp_tiles(const ModelConfig& c) { return std::max<int64_t>(c.mlp_tiles, 1); }

TileRows mlp_tile_rows(int64_t rows, int64_t tiles, int64_t k) { return {k * rows / tiles, (k + 1) * rows / tiles}; }

uint64_t parameter_count(const ModelConfig& c) {
  const uint64_t V = c.vocab, C = c.dim, H = c.ffn_hidden, QKV = c.qkv_rows(), FC = c.fc_rows();
  const uint64_t head = c.tied_head ? 0 : V * C;
  if (c.arch == Arch::gpt2) {
    const uint64_t layer = 2 * C + QKV * C + QKV + C * C + C + 2 * C + FC * C + FC + C * H + C;
    return V * C + uint64_t(c.max_seq) * C + uint64_t(c.n_layer) * layer + 2 * C + head;
  }
  const uint64_t layer = C + QKV * C + (c.qkv_bias ? QKV : 0) + C * C + C + FC * C + C * H;
  return V * C + uint64_t(c.n_layer) * layer + C + head;
}

}  // namespace strata::model
