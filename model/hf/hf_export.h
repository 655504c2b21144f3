// Writing a model as a Hugging Face directory that transformers' from_pretrained(DIR) loads:
// config.json (hf_config.h) and the weights under their HF names and layouts in safetensors,
// as F32, BF16 or F16, in one model.safetensors or, when the weights exceed the shard size,
// in model-0000i-of-0000n.safetensors shards with model.safetensors.index.json (HF's layout).
// Tensors are streamed: one tensor's values are in memory at a time. `strata export --hf` and
// the tests use it. Not the training checkpoint (checkpoint.h), which keeps fp32 masters and
// moments; its directory holds config.json too, so from_pretrained loads it as it is.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/net/model_config.h"
#include "model/net/param_layout.h"
#include "model/hf/safetensors.h"
#include "runtime/status.h"

namespace strata::model {

// transformers' save_pretrained default max_shard_size, "5GB" (decimal).
inline constexpr uint64_t kHfDefaultShardBytes = 5'000'000'000;

struct HfExportOptions {
  SafeDType dtype = SafeDType::f32;             // F32, BF16 or F16 (rounded to nearest even)
  uint64_t shard_bytes = kHfDefaultShardBytes;  // > 0; a tensor larger than this gets a shard alone
  // export_hf_checkpoint: a model directory whose tokenizer files (kHfTokenizerFiles, those it
  // has) are copied into the export; "" copies none.
  std::string tokenizer_from;
};

// The tokenizer and generation files transformers and vLLM read beside the weights.
inline constexpr std::string_view kHfTokenizerFiles[] = {"tokenizer.json",
                                                         "tokenizer_config.json",
                                                         "special_tokens_map.json",
                                                         "generation_config.json",
                                                         "tokenizer.model",
                                                         "vocab.json",
                                                         "merges.txt",
                                                         "added_tokens.json"};

// One tensor's values in the HF layout (hf_shape(), fp32) for `spec`.
using HfTensorSource = std::function<StatusOr<std::vector<float>>(const ParamSpec& spec)>;

// The shard file names of writing `layout` at `options`: {"model.safetensors"} when it fits in
// one, else model-00001-of-0000n.safetensors ... Tensors fill shards in layout order; a new
// shard starts when the next tensor would pass shard_bytes (transformers' rule). A tiled tensor
// is listed once, by its first tile's index.
std::vector<std::vector<size_t>> plan_hf_shards(const ParamLayout& layout, const HfExportOptions& options);

// Writes config.json and the weights of `config` into the existing directory `dir`, each file
// atomically (temporary file, fsync, rename). invalid_argument for a dtype other than F32, BF16,
// F16 or shard_bytes 0; the source's errors; errno errors naming the file.
Status write_hf_model(const std::string& dir, const ModelConfig& config, const ParamLayout& layout,
                      const HfTensorSource& source, const HfExportOptions& options);

// `strata export --hf OUT --from CHECKPOINT`: the checkpoint directory's model (its config.json;
// for checkpoints from before strata wrote one, the preset its metadata names) written to `out`,
// which must not exist or be an empty directory. Written into "<out>.tmp.<pid>" and renamed, so
// `out` appears complete or not at all. Errors: not_found / invalid_argument naming the path and
// what to pass instead; the checkpoint's corruption errors (SafetensorsFile::open); not_found when
// tokenizer_from is set but holds none of the tokenizer files.
Status export_hf_checkpoint(const std::string& checkpoint_dir, const std::string& out, const HfExportOptions& options);

}  // namespace strata::model
