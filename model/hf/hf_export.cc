// Writing Hugging Face model directories: config.json, safetensors shards and their index
// (hf_export.h).
#include "model/hf/hf_export.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kernels/cpu/half.h"
#include "model/ckpt/checkpoint.h"
#include "model/hf/hf_config.h"
#include "model/hf/hf_weights.h"

namespace strata::model {
namespace {

namespace fs = std::filesystem;

std::vector<uint64_t> hf_shape_u64(const ParamSpec& p) {
  std::vector<uint64_t> shape;
  for (int64_t d : p.hf_shape()) shape.push_back(uint64_t(d));
  return shape;
}

std::string shard_name(size_t i, size_t n) {
  return n == 1 ? std::string(kHfWeightsFile) : fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n);
}

// `values` at `dtype`, as the bytes of a safetensors tensor.
std::vector<std::byte> encode(const std::vector<float>& values, SafeDType dtype) {
  std::vector<std::byte> out(values.size() * safe_dtype_size(dtype));
  if (dtype == SafeDType::f32) {
    std::memcpy(out.data(), values.data(), out.size());
    return out;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t h = dtype == SafeDType::bf16 ? kernels::float_to_bf16(values[i]) : kernels::float_to_fp16(values[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

}  // namespace

std::vector<std::vector<size_t>> plan_hf_shards(const ParamLayout& layout, const HfExportOptions& options) {
  std::vector<std::vector<size_t>> shards(1);
  uint64_t filled = 0;
  for (size_t i = 0; i < layout.params.size(); ++i) {
    if (layout.params[i].row_begin > 0) continue;  // a later tile (vocabulary or MLP): its tensor is listed once
    const uint64_t bytes = layout.params[i].tensor_elements() * safe_dtype_size(options.dtype);
    if (!shards.back().empty() && filled + bytes > options.shard_bytes) {
      shards.emplace_back();
      filled = 0;
    }
    shards.back().push_back(i);
    filled += bytes;
  }
  return shards;
}

Status write_hf_model(const std::string& dir, const ModelConfig& config, const ParamLayout& layout,
                      const HfTensorSource& source, const HfExportOptions& options) {
  if (options.dtype != SafeDType::f32 && options.dtype != SafeDType::bf16 && options.dtype != SafeDType::f16)
    return error(Code::invalid_argument, "export dtype {} is not one transformers trains in; pass F32, BF16 or F16",
                 safe_dtype_name(options.dtype));
  if (options.shard_bytes == 0)
    return error(Code::invalid_argument, "shard size 0: pass a positive size (transformers' default is 5GB)");
  const std::vector<std::vector<size_t>> shards = plan_hf_shards(layout, options);
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t total = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = shard_name(s, shards.size());
    std::vector<SafetensorsSpec> specs;
    for (size_t i : shards[s]) {
      const ParamSpec& p = layout.params[i];
      specs.push_back({.name = p.name, .dtype = options.dtype, .shape = hf_shape_u64(p)});
      weight_map[p.name] = name;
      total += p.tensor_elements() * safe_dtype_size(options.dtype);
    }
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsWriter> writer,
                            SafetensorsWriter::create((fs::path(dir) / name).string(), specs, {{"format", "pt"}}));
    for (size_t k = 0; k < shards[s].size(); ++k) {
      const ParamSpec& p = layout.params[shards[s][k]];  // the tensor's first tile when tiled: the source
      STRATA_ASSIGN_OR_RETURN(std::vector<float> values, source(p));  // gives the whole tensor
      if (values.size() != p.tensor_elements())
        return error(Code::internal, "export of '{}': the source gave {} values, the tensor has {}", p.name,
                     values.size(), p.tensor_elements());
      const std::vector<std::byte> bytes = encode(values, options.dtype);
      STRATA_RETURN_IF_ERROR(writer->write(k, bytes));
    }
    STRATA_RETURN_IF_ERROR(writer->commit());
  }
  if (shards.size() > 1) {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = weight_map;
    STRATA_RETURN_IF_ERROR(write_text_atomically((fs::path(dir) / kHfIndexFile).string(), index.dump(2) + "\n"));
  }
  return write_hf_config((fs::path(dir) / kHfConfigFile).string(), config, options.dtype);
}

Status export_hf_checkpoint(const std::string& checkpoint_dir, const std::string& out, const HfExportOptions& options) {
  const fs::path ckpt(checkpoint_dir);
  std::error_code ec;
  ModelConfig config;
  if (fs::exists(ckpt / kHfConfigFile, ec)) {
    STRATA_ASSIGN_OR_RETURN(HfModelConfig hf, read_hf_config((ckpt / kHfConfigFile).string()));
    config = hf.config;
  }
  STRATA_ASSIGN_OR_RETURN(HfWeights weights, HfWeights::open(checkpoint_dir));  // one file or shards
  if (config.name.empty()) {
    // Checkpoints from before config.json was saved with them: the preset their metadata names.
    const auto& metadata = weights.files().front().metadata();
    const auto it = metadata.find("strata_preset");
    const std::string preset = it == metadata.end() ? "" : it->second;
    StatusOr<ModelConfig> c = model_preset(preset);
    if (!c.is_ok())
      return error(Code::invalid_argument,
                   "{} has no {} and its model '{}' is not a preset, so its dimensions are unknown; train on with "
                   "this strata (--resume) for a checkpoint that records them",
                   checkpoint_dir, kHfConfigFile, preset);
    config = *c;
  }
  STRATA_ASSIGN_OR_RETURN(ParamLayout layout, build_param_layout(config, 4));
  const HfTensorSource source = [&](const ParamSpec& p) -> StatusOr<std::vector<float>> {
    const HfTensorRef ref = weights.find(p.name);
    if (ref.tensor == nullptr)
      return error(Code::corruption, "{} has no tensor '{}' of model '{}'; the checkpoint is damaged", checkpoint_dir,
                   p.name, config.name);
    STRATA_ASSIGN_OR_RETURN(std::span<const std::byte> bytes, ref.file->data(p.name, SafeDType::f32, hf_shape_u64(p)));
    std::vector<float> values(p.tensor_elements());  // the whole tensor, whatever the layout's tiling
    std::memcpy(values.data(), bytes.data(), bytes.size());
    return values;
  };

  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec)))
    return error(Code::invalid_argument, "{} already exists and is not an empty directory; pass a new --hf directory",
                 out);
  const std::string temp = fmt::format("{}.tmp.{}", out, ::getpid());
  fs::remove_all(temp, ec);
  fs::create_directories(temp, ec);
  if (ec) return errno_status(ec.value(), fmt::format("creating {}", temp));
  Status s = write_hf_model(temp, config, layout, source, options);
  if (s.is_ok() && !options.tokenizer_from.empty()) {
    int copied = 0;
    for (std::string_view name : kHfTokenizerFiles) {
      const fs::path from = fs::path(options.tokenizer_from) / name;
      if (!fs::exists(from, ec)) continue;
      fs::copy_file(from, fs::path(temp) / name, fs::copy_options::overwrite_existing, ec);
      if (ec) {
        s = errno_status(ec.value(), fmt::format("copying {} into {}", from.string(), temp));
        break;
      }
      ++copied;
    }
    if (s.is_ok() && copied == 0)
      s = error(Code::not_found,
                "--tokenizer-from {} holds no tokenizer file (tokenizer.json, tokenizer.model, "
                "vocab.json, ...); pass the directory of the model you started from",
                options.tokenizer_from);
  }
  if (s.is_ok()) {
    fs::remove(out, ec);  // an empty directory, or nothing
    fs::rename(temp, out, ec);
    if (ec) s = errno_status(ec.value(), fmt::format("renaming {} to {}", temp, out));
  }
  if (!s.is_ok()) fs::remove_all(temp, ec);
  return s;
}

}  // namespace strata::model
