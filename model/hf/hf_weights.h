// HfWeights: the tensors of a Hugging Face model on disk, one file or many, found by name:
// a directory with model.safetensors, or with model.safetensors.index.json and the shards it
// names (model-00001-of-00004.safetensors ...), or one .safetensors file. Every shard is mapped
// and validated at open (SafetensorsFile), nothing is read into memory; the loader
// (Transformer::load_hf_weights) converts one tensor at a time. Not a config reader (hf_config.h)
// and not a writer (hf_export.h). Immutable after open: readable from any thread.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "model/net/param_layout.h"
#include "model/hf/safetensors.h"
#include "runtime/status.h"

namespace strata::model {

inline constexpr std::string_view kHfWeightsFile = "model.safetensors";
inline constexpr std::string_view kHfIndexFile = "model.safetensors.index.json";

// One tensor found by name: its file and its entry there.
struct HfTensorRef {
  const SafetensorsFile* file = nullptr;
  const SafetensorsTensor* tensor = nullptr;
};

// The tensors of a model's files that a layout does not load, by name in the files. `buffers`:
// transformers' non-parameter buffers, which strata computes instead (GPT-2's attn.bias and
// attn.masked_bias causal masks, rotary_emb.inv_freq); `tensors`: everything else (an lm_head
// beside a tied head, layers past the config's count, another model's tensors).
struct UnusedTensors {
  std::vector<std::string> buffers, tensors;
};

class HfWeights {
 public:
  // `path`: a directory (the index when it has one, else model.safetensors) or a .safetensors
  // file. Errors, each naming the path and what to do: not_found for a missing path, a directory
  // with neither file, or a shard the index names that is absent; invalid_argument for an index
  // that is not {"weight_map": {tensor: file}}, names a tensor twice, or maps a tensor to a shard
  // that does not hold it; a tensor held by two files; SafetensorsFile::open's corruption errors.
  static StatusOr<HfWeights> open(const std::string& path);

  const std::string& path() const { return path_; }
  // The directory's config.json when it has one (for a file: the one beside it), else "".
  const std::string& config_path() const { return config_path_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }
  size_t tensor_count() const { return where_.size(); }

  // The tensor `name`; a GPT-2 name "transformer.X" also finds "X" (OpenAI's own files lack the
  // prefix). Empty refs when absent.
  HfTensorRef find(std::string_view name) const;

  // Every tensor of `layout` is there with the HF shape (hf_shape()) and a dtype the loader reads
  // (F32, BF16, F16). Errors name the tensor, the file and both shapes / the dtype; a missing
  // lm_head.weight says the config declares an untied head (tie_word_embeddings false).
  Status check_layout(const ParamLayout& layout, std::string_view model_name) const;
  // The tensors no spec of `layout` reads (see UnusedTensors), each list in name order.
  UnusedTensors unused_tensors(const ParamLayout& layout) const;

 private:
  HfWeights() = default;
  std::string path_;
  std::string config_path_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t, std::less<>> where_;  // tensor name -> index into files_
};

// A tensor's elements as fp32 (F32 copied; BF16 and F16 widened exactly); invalid_argument
// naming the tensor and file for any other dtype.
StatusOr<std::vector<float>> hf_tensor_as_f32(const HfTensorRef& ref);
// Elements [begin, begin + count) of it (a vocabulary tile's rows); out_of_range past its end.
StatusOr<std::vector<float>> hf_tensor_as_f32(const HfTensorRef& ref, uint64_t begin, uint64_t count);

}  // namespace strata::model
