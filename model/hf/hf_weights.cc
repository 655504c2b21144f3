// HfWeights: finding a Hugging Face model's tensors in one or many safetensors files
// (hf_weights.h).
#include "model/hf/hf_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "kernels/cpu/half.h"
#include "model/hf/hf_config.h"

namespace strata::model {
namespace {

namespace fs = std::filesystem;

// The index's weight_map, refusing a tensor named twice (JSON parsers keep the last silently).
StatusOr<std::map<std::string, std::string>> read_index(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return errno_status(errno == 0 ? ENOENT : errno, fmt::format("reading {}", path));
  std::stringstream text;
  text << in.rdbuf();
  std::string top_key, duplicate;
  std::set<std::string> seen;
  const nlohmann::json::parser_callback_t watch = [&](int depth, nlohmann::json::parse_event_t event,
                                                      nlohmann::json& parsed) {
    if (event != nlohmann::json::parse_event_t::key || !parsed.is_string()) return true;
    if (depth == 1) top_key = parsed.get<std::string>();
    if (depth == 2 && top_key == "weight_map" && !seen.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  const nlohmann::json j = nlohmann::json::parse(text.str(), watch, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    return error(Code::invalid_argument,
                 "{} is not a safetensors index (a JSON object with \"weight_map\": {{tensor: shard file}}); "
                 "re-download it or pass one .safetensors file",
                 path);
  if (!duplicate.empty())
    return error(Code::invalid_argument, "{} names tensor '{}' twice in its weight_map; the index is damaged", path,
                 duplicate);
  std::map<std::string, std::string> map;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
      return error(Code::invalid_argument, "{}: tensor '{}' maps to {}, not a shard file name in this directory", path,
                   name, file.dump());
    map[name] = file.get<std::string>();
  }
  return map;
}

}  // namespace

StatusOr<HfWeights> HfWeights::open(const std::string& path) {
  HfWeights w;
  w.path_ = path;
  std::error_code ec;
  if (!fs::exists(path, ec))
    return error(Code::not_found,
                 "--init-from {} does not exist; pass a Hugging Face model directory or a "
                 ".safetensors file",
                 path);
  std::vector<std::string> files;
  std::map<std::string, std::string> index;
  std::string index_path;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / kHfConfigFile, ec)) w.config_path_ = (dir / kHfConfigFile).string();
    if (fs::exists(dir / kHfIndexFile, ec)) {
      index_path = (dir / kHfIndexFile).string();
      STRATA_ASSIGN_OR_RETURN(index, read_index(index_path));
      std::set<std::string> shards;
      for (const auto& [name, file] : index) shards.insert(file);
      for (const std::string& s : shards) {
        if (!fs::exists(dir / s, ec))
          return error(Code::not_found, "{} names shard {}, which is missing from {}; download it again", index_path, s,
                       path);
        files.push_back((dir / s).string());
      }
    } else if (fs::exists(dir / kHfWeightsFile, ec)) {
      files.push_back((dir / kHfWeightsFile).string());
    } else {
      return error(Code::not_found,
                   "{} holds neither {} nor {}; pass a Hugging Face model directory (safetensors "
                   "weights; convert .bin weights with transformers first) or a .safetensors file",
                   path, kHfWeightsFile, kHfIndexFile);
    }
  } else {
    const fs::path beside = fs::path(path).parent_path() / kHfConfigFile;
    if (fs::exists(beside, ec)) w.config_path_ = beside.string();
    files.push_back(path);
  }
  for (const std::string& f : files) {
    STRATA_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(f));
    const size_t at = w.files_.size();
    for (const SafetensorsTensor& t : file.tensors()) {
      const auto [it, fresh] = w.where_.emplace(t.name, at);
      if (!fresh)
        return error(Code::invalid_argument, "tensor '{}' is in both {} and {}; a model holds each tensor once", t.name,
                     w.files_[it->second].path(), f);
      if (!index.empty()) {
        const auto listed = index.find(t.name);
        if (listed == index.end() || fs::path(f).filename() != listed->second)
          return error(Code::invalid_argument, "{} holds tensor '{}' but {} {}; the index and the shards disagree", f,
                       t.name, index_path,
                       listed == index.end() ? std::string("does not list it") : "maps it to " + listed->second);
      }
    }
    w.files_.push_back(std::move(file));
  }
  for (const auto& [name, file] : index) {
    if (!w.where_.contains(name))
      return error(Code::invalid_argument,
                   "{} maps tensor '{}' to {}, which does not hold it; the shard is damaged "
                   "or from another model",
                   index_path, name, file);
  }
  return w;
}

HfTensorRef HfWeights::find(std::string_view name) const {
  auto it = where_.find(name);
  constexpr std::string_view kGpt2Prefix = "transformer.";
  if (it == where_.end() && name.starts_with(kGpt2Prefix)) it = where_.find(name.substr(kGpt2Prefix.size()));
  if (it == where_.end()) return {};
  const SafetensorsFile& f = files_[it->second];
  return {&f, f.find(it->first)};
}

Status HfWeights::check_layout(const ParamLayout& layout, std::string_view model_name) const {
  for (const ParamSpec& p : layout.params) {
    const HfTensorRef ref = find(p.name);
    if (ref.tensor == nullptr) {
      if (p.name == "lm_head.weight")
        return error(Code::invalid_argument,
                     "{} has no 'lm_head.weight', but model '{}' has an untied head (tie_word_embeddings false in "
                     "its config); set tie_word_embeddings true if the head is the token embedding",
                     path_, model_name);
      return error(Code::invalid_argument,
                   "{} has no tensor '{}', which model '{}' needs; is it a checkpoint of this "
                   "model (config.json and weights from the same download)?",
                   path_, p.name, model_name);
    }
    std::vector<uint64_t> want;
    for (int64_t d : p.hf_shape()) want.push_back(uint64_t(d));
    if (ref.tensor->shape != want)
      return error(Code::invalid_argument,
                   "{}: tensor '{}' has shape [{}] but model '{}' needs [{}]; the weights do "
                   "not match the config",
                   ref.file->path(), p.name, fmt::join(ref.tensor->shape, ", "), model_name, fmt::join(want, ", "));
    const SafeDType t = ref.tensor->dtype;
    if (t != SafeDType::f32 && t != SafeDType::bf16 && t != SafeDType::f16)
      return error(Code::invalid_argument,
                   "{}: tensor '{}' is {}; strata loads F32, BF16 or F16 weights (dequantize "
                   "the model first)",
                   ref.file->path(), p.name, safe_dtype_name(t));
  }
  return Status::ok();
}

UnusedTensors HfWeights::unused_tensors(const ParamLayout& layout) const {
  std::set<std::string_view> used;
  for (const ParamSpec& p : layout.params)
    if (const HfTensorRef ref = find(p.name); ref.tensor != nullptr) used.insert(ref.tensor->name);
  UnusedTensors out;
  for (const auto& [name, file] : where_) {
    if (used.contains(name)) continue;
    const bool buffer = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
                        name.ends_with("rotary_emb.inv_freq");
    (buffer ? out.buffers : out.tensors).push_back(name);
  }
  return out;
}

StatusOr<std::vector<float>> hf_tensor_as_f32(const HfTensorRef& ref) {
  return hf_tensor_as_f32(ref, 0, ref.tensor->elements());
}

StatusOr<std::vector<float>> hf_tensor_as_f32(const HfTensorRef& ref, uint64_t begin, uint64_t count) {
  const SafetensorsTensor& t = *ref.tensor;
  if (begin > t.elements() || count > t.elements() - begin)
    return error(Code::out_of_range, "{}: elements [{}, {}) of tensor '{}' are past its {}", ref.file->path(), begin,
                 begin + count, t.name, t.elements());
  const auto bytes = ref.file->data(t);
  std::vector<float> out(count);
  if (t.dtype == SafeDType::f32) {
    std::memcpy(out.data(), bytes.data() + begin * sizeof(float), count * sizeof(float));
  } else if (t.dtype == SafeDType::bf16 || t.dtype == SafeDType::f16) {
    const std::byte* from = bytes.data() + begin * 2;
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, from + 2 * i, 2);
      out[i] = t.dtype == SafeDType::bf16 ? kernels::bf16_to_float(h) : kernels::fp16_to_float(h);
    }
  } else {
    return error(Code::invalid_argument, "{}: tensor '{}' is {}; the model loads F32, BF16 or F16", ref.file->path(),
                 t.name, safe_dtype_name(t.dtype));
  }
  return out;
}

}  // namespace strata::model
