// Hugging Face config.json reading and writing (hf_config.h).
#include "model/hf/hf_config.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "runtime/json_duplicates.h"

namespace strata::model {
namespace {

using Json = nlohmann::json;

// Reads typed keys of one config.json, every error naming the file and the key.
class ConfigReader {
 public:
  ConfigReader(const Json& j, const std::string& origin) : j_(j), origin_(origin) {}

  bool has(std::string_view key) const { return j_.contains(key) && !j_.at(std::string(key)).is_null(); }

  StatusOr<int64_t> integer(std::string_view key, std::optional<int64_t> fallback = std::nullopt) {
    if (!has(key)) {
      if (fallback) return *fallback;
      return error(Code::invalid_argument, "{}: no '{}'; a model config needs it (a positive integer)", origin_, key);
    }
    const Json& v = j_.at(std::string(key));
    if (!v.is_number_integer() || v.get<int64_t>() < 1)
      return error(Code::invalid_argument, "{}: '{}' is {}, not a positive integer", origin_, key, v.dump());
    return v.get<int64_t>();
  }

  // A model dimension: integer()'s value, within ModelConfig `field`'s limit (kDimensionLimits).
  StatusOr<int64_t> dimension(std::string_view key, std::string_view field,
                              std::optional<int64_t> fallback = std::nullopt) {
    STRATA_ASSIGN_OR_RETURN(const int64_t v, integer(key, fallback));
    if (v > dimension_limit(field))
      return error(Code::invalid_argument,
                   "{}: '{}' is {}, above strata's limit of {} for the model's {}; this config.json does not "
                   "describe a model strata can train (is the file damaged?)",
                   origin_, key, v, dimension_limit(field), field);
    return v;
  }

  StatusOr<double> real(std::string_view key, double fallback) {
    if (!has(key)) return fallback;
    const Json& v = j_.at(std::string(key));
    if (!v.is_number()) return error(Code::invalid_argument, "{}: '{}' is {}, not a number", origin_, key, v.dump());
    return v.get<double>();
  }

  StatusOr<bool> boolean(std::string_view key, bool fallback) {
    if (!has(key)) return fallback;
    const Json& v = j_.at(std::string(key));
    if (!v.is_boolean())
      return error(Code::invalid_argument, "{}: '{}' is {}, not true or false", origin_, key, v.dump());
    return v.get<bool>();
  }

  std::string text(std::string_view key, std::string fallback = "") {
    if (!has(key) || !j_.at(std::string(key)).is_string()) return fallback;
    return j_.at(std::string(key)).get<std::string>();
  }

 private:
  const Json& j_;
  const std::string& origin_;
};

Status refuse_flag(const std::string& origin, std::string_view key, std::string_view why) {
  return error(Code::invalid_argument, "{}: '{}' is true: {}; strata cannot train this model", origin, key, why);
}

StatusOr<HfModelConfig> parse_gpt2(ConfigReader& r, const std::string& origin) {
  HfModelConfig out;
  ModelConfig& c = out.config;
  c.arch = Arch::gpt2;
  STRATA_ASSIGN_OR_RETURN(c.vocab, r.dimension("vocab_size", "vocab"));
  STRATA_ASSIGN_OR_RETURN(int64_t n_ctx, r.integer("n_ctx", 0x7fffffff));
  STRATA_ASSIGN_OR_RETURN(
      c.max_seq, r.dimension("n_positions", "max_seq", r.has("n_ctx") ? std::optional<int64_t>(n_ctx) : std::nullopt));
  STRATA_ASSIGN_OR_RETURN(c.dim, r.dimension("n_embd", "dim"));
  STRATA_ASSIGN_OR_RETURN(c.n_layer, r.dimension("n_layer", "n_layer"));
  STRATA_ASSIGN_OR_RETURN(c.n_head, r.dimension("n_head", "n_head"));
  c.n_kv_head = c.n_head;
  STRATA_ASSIGN_OR_RETURN(c.ffn_hidden, r.dimension("n_inner", "ffn_hidden", 4 * c.dim));
  if (!r.has("n_inner")) out.notes.push_back(fmt::format("n_inner not set: 4 x n_embd = {}", c.ffn_hidden));
  STRATA_ASSIGN_OR_RETURN(double eps, r.real("layer_norm_epsilon", 1e-5));
  c.norm_eps = float(eps);
  STRATA_ASSIGN_OR_RETURN(c.tied_head, r.boolean("tie_word_embeddings", true));
  const std::string act = r.text("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    return error(Code::invalid_argument,
                 "{}: activation_function '{}' is not the tanh GELU strata computes (gelu_new or gelu_pytorch_tanh)",
                 origin, act);
  for (std::string_view key : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"}) {
    STRATA_ASSIGN_OR_RETURN(bool on, r.boolean(key, false));
    if (on) return refuse_flag(origin, key, "strata's attention scales by 1/sqrt(head size) only");
  }
  STRATA_ASSIGN_OR_RETURN(bool scaled, r.boolean("scale_attn_weights", true));
  if (!scaled) return refuse_flag(origin, "scale_attn_weights false", "strata always scales attention scores");
  return out;
}

StatusOr<HfModelConfig> parse_llama(const Json& j, ConfigReader& r, const std::string& origin,
                                    const std::string& model_type) {
  HfModelConfig out;
  ModelConfig& c = out.config;
  c.arch = Arch::llama;
  STRATA_ASSIGN_OR_RETURN(c.vocab, r.dimension("vocab_size", "vocab"));
  STRATA_ASSIGN_OR_RETURN(c.max_seq, r.dimension("max_position_embeddings", "max_seq"));
  STRATA_ASSIGN_OR_RETURN(c.dim, r.dimension("hidden_size", "dim"));
  STRATA_ASSIGN_OR_RETURN(c.n_layer, r.dimension("num_hidden_layers", "n_layer"));
  STRATA_ASSIGN_OR_RETURN(c.n_head, r.dimension("num_attention_heads", "n_head"));
  STRATA_ASSIGN_OR_RETURN(c.n_kv_head, r.dimension("num_key_value_heads", "n_kv_head", c.n_head));
  STRATA_ASSIGN_OR_RETURN(c.ffn_hidden, r.dimension("intermediate_size", "ffn_hidden"));
  STRATA_ASSIGN_OR_RETURN(double eps, r.real("rms_norm_eps", 1e-6));
  c.norm_eps = float(eps);
  // transformers 5 writes rope_parameters {"rope_theta", "rope_type"}; 4.x a top-level rope_theta
  // and rope_scaling.
  const Json* rope =
      r.has("rope_parameters") && j.at("rope_parameters").is_object() ? &j.at("rope_parameters") : nullptr;
  ConfigReader rope_reader(rope ? *rope : j, origin);
  ConfigReader& theta_from = rope && rope->contains("rope_theta") ? rope_reader : r;
  STRATA_ASSIGN_OR_RETURN(double theta, theta_from.real("rope_theta", 10000.0));
  c.rope_theta = float(theta);
  if (!theta_from.has("rope_theta")) out.notes.push_back("rope_theta not set: 10000");
  const std::string rope_type = rope ? rope_reader.text("rope_type", "default") : "default";
  STRATA_ASSIGN_OR_RETURN(c.tied_head, r.boolean("tie_word_embeddings", false));
  if (r.has("head_dim")) {
    STRATA_ASSIGN_OR_RETURN(int64_t head_dim, r.integer("head_dim"));
    if (head_dim * c.n_head != c.dim)
      return error(Code::invalid_argument,
                   "{}: head_dim {} is not hidden_size {} / num_attention_heads {}; strata's head size is always "
                   "hidden_size / num_attention_heads",
                   origin, head_dim, c.dim, c.n_head);
  }
  const std::string act = r.text("hidden_act", "silu");
  if (act != "silu")
    return error(Code::invalid_argument, "{}: hidden_act '{}' is not the SiLU (SwiGLU) strata computes", origin, act);
  if (model_type == "qwen2") {
    c.qkv_bias = true;
    STRATA_ASSIGN_OR_RETURN(bool sliding, r.boolean("use_sliding_window", false));
    if (sliding) return refuse_flag(origin, "use_sliding_window", "strata attends over the whole sequence");
  } else {
    STRATA_ASSIGN_OR_RETURN(bool attention_bias, r.boolean("attention_bias", false));
    if (attention_bias)
      return refuse_flag(origin, "attention_bias", "LLaMA's attention_bias adds an o_proj bias strata has no slot for");
  }
  STRATA_ASSIGN_OR_RETURN(bool mlp_bias, r.boolean("mlp_bias", false));
  if (mlp_bias) return refuse_flag(origin, "mlp_bias", "strata's SwiGLU MLP has no biases");
  if (model_type != "mistral" && r.has("layer_types") && j.at("layer_types").is_array()) {
    for (const Json& t : j.at("layer_types"))
      if (t != "full_attention")
        return error(Code::invalid_argument,
                     "{}: layer_types holds {} layers; strata attends over the whole sequence "
                     "in every layer (full_attention)",
                     origin, t.dump());
  }
  if (model_type == "mistral" && r.has("sliding_window")) {
    STRATA_ASSIGN_OR_RETURN(int64_t window, r.integer("sliding_window"));
    if (window < c.max_seq) {
      out.notes.push_back(
          fmt::format("sliding_window {}: max_seq lowered from {} to it (within the window "
                      "attention is plain causal attention)",
                      window, c.max_seq));
      c.max_seq = window;
    }
  }
  if (r.has("rope_scaling") || rope_type != "default")
    out.warnings.push_back(
        fmt::format("{}: RoPE scaling is set (rope_scaling, or rope_type '{}'); strata applies "
                    "plain RoPE (theta {}), so positions are encoded differently from "
                    "transformers' and losses will differ",
                    origin, rope_type, c.rope_theta));
  return out;
}

// The shortest decimal that reads back as `f` (1e-05, not 9.99999974737875e-06).
double short_decimal(float f) { return std::stod(fmt::format("{}", f)); }

std::string_view torch_dtype_name(SafeDType t) {
  switch (t) {
    case SafeDType::bf16:
      return "bfloat16";
    case SafeDType::f16:
      return "float16";
    default:
      return "float32";
  }
}

}  // namespace

std::vector<std::string_view> supported_hf_model_types() { return {"gpt2", "llama", "mistral", "qwen2"}; }

StatusOr<HfModelConfig> parse_hf_config(std::string_view json_text, const std::string& origin) {
  const Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object())
    return error(Code::invalid_argument, "{} is not a JSON object; a Hugging Face config.json is one", origin);
  if (const std::optional<std::string> twice = first_duplicate_json_key(json_text))
    return error(Code::invalid_argument, "{} sets '{}' twice in one object; keep one of them (JSON readers would "
                 "take the last one silently)", origin, *twice);
  ConfigReader r(j, origin);
  const std::string model_type = r.text("model_type");
  const auto supported = supported_hf_model_types();
  HfModelConfig out;
  if (model_type == "gpt2") {
    STRATA_ASSIGN_OR_RETURN(out, parse_gpt2(r, origin));
  } else if (model_type == "llama" || model_type == "mistral" || model_type == "qwen2") {
    STRATA_ASSIGN_OR_RETURN(out, parse_llama(j, r, origin, model_type));
  } else {
    return error(Code::invalid_argument, "{}: model_type '{}'{} is not supported; strata trains {}", origin,
                 model_type.empty() ? "(none)" : model_type,
                 j.contains("architectures") ? fmt::format(" ({})", j["architectures"].dump()) : "",
                 fmt::join(supported, ", "));
  }
  out.model_type = model_type;
  ModelConfig& c = out.config;
  c.name = r.text("strata_model_name");
  if (c.name.empty())
    c.name = fmt::format("hf-{}[L={},C={},NH={},NKV={},H={},V={}]", model_type, c.n_layer, c.dim, c.n_head, c.n_kv_head,
                         c.ffn_hidden, c.vocab);
  if (Status s = validate(c); !s.is_ok()) return Status(s.code(), fmt::format("{}: {}", origin, s.message()));
  return out;
}

StatusOr<HfModelConfig> read_hf_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return errno_status(errno == 0 ? ENOENT : errno, fmt::format("reading {}", path));
  std::stringstream text;
  text << in.rdbuf();
  return parse_hf_config(text.str(), path);
}

std::string hf_config_json(const ModelConfig& c, SafeDType dtype) {
  nlohmann::ordered_json j;
  if (c.arch == Arch::gpt2) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["vocab_size"] = c.vocab;
    j["n_positions"] = c.max_seq;
    j["n_ctx"] = c.max_seq;
    j["n_embd"] = c.dim;
    j["n_layer"] = c.n_layer;
    j["n_head"] = c.n_head;
    j["n_inner"] = c.ffn_hidden;
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = short_decimal(c.norm_eps);
    j["resid_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
    j["attn_pdrop"] = 0.0;
  } else {
    j["architectures"] = {c.qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
    j["model_type"] = c.qkv_bias ? "qwen2" : "llama";
    j["vocab_size"] = c.vocab;
    j["max_position_embeddings"] = c.max_seq;
    j["hidden_size"] = c.dim;
    j["intermediate_size"] = c.ffn_hidden;
    j["num_hidden_layers"] = c.n_layer;
    j["num_attention_heads"] = c.n_head;
    j["num_key_value_heads"] = c.n_kv_head;
    j["head_dim"] = c.head_dim();
    j["hidden_act"] = "silu";
    j["rms_norm_eps"] = short_decimal(c.norm_eps);
    j["rope_theta"] = short_decimal(c.rope_theta);
    j["rope_scaling"] = nullptr;
    j["attention_dropout"] = 0.0;
    if (c.qkv_bias) {
      j["use_sliding_window"] = false;
    } else {
      j["attention_bias"] = false;
      j["mlp_bias"] = false;
    }
  }
  // GPT-2's config class defaults both to 50256, outside a smaller vocabulary: say "none" then.
  const bool gpt2_ids = c.arch == Arch::gpt2 && c.vocab > 50256;
  j["bos_token_id"] = gpt2_ids ? nlohmann::ordered_json(50256) : nlohmann::ordered_json(nullptr);
  j["eos_token_id"] = gpt2_ids ? nlohmann::ordered_json(50256) : nlohmann::ordered_json(nullptr);
  j["tie_word_embeddings"] = c.tied_head;
  j["torch_dtype"] = torch_dtype_name(dtype);
  j["strata_model_name"] = c.name;
  return j.dump(2) + "\n";
}

Status write_hf_config(const std::string& path, const ModelConfig& config, SafeDType dtype) {
  return write_text_atomically(path, hf_config_json(config, dtype));
}

Status write_text_atomically(const std::string& path, std::string_view text) {
  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(errno, fmt::format("creating {}", temp));
  Status s;
  if (::write(fd, text.data(), text.size()) != ssize_t(text.size()))
    s = errno_status(errno == 0 ? EIO : errno, fmt::format("writing {}", temp));
  else if (::fsync(fd) != 0)
    s = errno_status(errno, fmt::format("fsync of {}", temp));
  ::close(fd);
  if (s.is_ok() && ::rename(temp.c_str(), path.c_str()) != 0)
    s = errno_status(errno, fmt::format("renaming {} to {}", temp, path));
  if (!s.is_ok()) ::unlink(temp.c_str());
  return s;
}

StatusOr<ModelConfig> apply_overrides_to_hf(const HfModelConfig& hf, const ModelOverrides& given,
                                            const std::string& origin, std::vector<std::string>& notes) {
  ModelConfig c = hf.config;
  const bool gpt2 = c.arch == Arch::gpt2;
  if (given.arch && *given.arch != c.arch)
    return error(Code::invalid_argument, "--arch {} contradicts {}'s model_type '{}' ({}); drop --arch",
                 arch_name(*given.arch), origin, hf.model_type, arch_name(c.arch));
  struct Field {
    const char* flag;
    const char* gpt2_key;
    const char* llama_key;
    int64_t given;
    int64_t* have;
  };
  const Field fields[] = {
      {"--vocab", "vocab_size", "vocab_size", given.vocab, &c.vocab},
      {"--max-seq", "n_positions", "max_position_embeddings", given.max_seq, &c.max_seq},
      {"--dim", "n_embd", "hidden_size", given.dim, &c.dim},
      {"--n-layer", "n_layer", "num_hidden_layers", given.n_layer, &c.n_layer},
      {"--n-head", "n_head", "num_attention_heads", given.n_head, &c.n_head},
      {"--n-kv-head", "n_head", "num_key_value_heads", given.n_kv_head, &c.n_kv_head},
      {"--ffn-hidden", "n_inner", "intermediate_size", given.ffn_hidden, &c.ffn_hidden},
  };
  for (const Field& f : fields) {
    if (f.given <= 0) continue;
    const char* key = gpt2 ? f.gpt2_key : f.llama_key;
    if (f.given == *f.have) {
      notes.push_back(fmt::format("{} {} agrees with {}'s {}", f.flag, f.given, origin, key));
      continue;
    }
    if (!gpt2 && f.have == &c.max_seq && f.given < c.max_seq) {
      notes.push_back(fmt::format("{} {} lowers {}'s {} {}", f.flag, f.given, origin, key, c.max_seq));
      c.max_seq = f.given;
      continue;
    }
    return error(Code::invalid_argument,
                 "{} {} contradicts {}'s {} {}; the model's dimensions come from --init-from: drop {}", f.flag, f.given,
                 origin, key, *f.have, f.flag);
  }
  return c;
}

}  // namespace strata::model
