// `strata export --hf OUT --from CHECKPOINT [--dtype bf16] [--shard-size 5GB] [--tokenizer-from DIR]`: writes a
// checkpoint of `strata train --checkpoint-dir` (a run directory: its latest; or one step-N/
// directory) as a Hugging Face model directory that transformers' from_pretrained(OUT) loads:
// config.json and the weights in F32, BF16 or F16 safetensors, sharded with an index above the
// shard size (model/hf/hf_export.h). Exit 0 when written, 2 for bad arguments or a missing or
// unreadable checkpoint, 1 when writing fails. --tokenizer-from DIR copies DIR's tokenizer files
// (strata has no tokenizer of its own). Not a converter to other formats (GGUF: llama.cpp's tools).
#include <fmt/core.h>

#include <memory>
#include <string>

#include "model/ckpt/checkpoint.h"
#include "model/ckpt/checkpoint_store.h"
#include "model/hf/hf_export.h"
#include "runtime/units.h"
#include "tools/strata/command.h"

namespace strata::cli {
namespace {

struct ExportArgs {
  std::string out;
  std::string from;
  std::string dtype = "f32";
  std::string shard_size = "5GB";
  std::string tokenizer_from;
};

// "5GB" is 5 * 10^9 bytes (transformers' meaning); "2GiB", "64MiB", "4096" as parse_size reads them.
StatusOr<uint64_t> parse_shard_size(const std::string& text) {
  for (const auto& [suffix, scale] :
       {std::pair<std::string_view, uint64_t>{"GB", 1'000'000'000}, {"MB", 1'000'000}, {"KB", 1'000}}) {
    if (text.size() > suffix.size() && text.ends_with(suffix)) {
      const std::string digits = text.substr(0, text.size() - suffix.size());
      if (digits.find_first_not_of("0123456789") == std::string::npos) return std::stoull(digits) * scale;
    }
  }
  StatusOr<uint64_t> bytes = parse_size(text);
  if (!bytes.is_ok() || *bytes == 0)
    return error(Code::invalid_argument, "--shard-size '{}' is not a positive size (e.g. 5GB, 2GiB, 500MB)", text);
  return bytes;
}

int run_export(const ExportArgs& a) {
  model::HfExportOptions options;
  if (a.dtype == "f32" || a.dtype == "fp32" || a.dtype == "float32") {
    options.dtype = model::SafeDType::f32;
  } else if (a.dtype == "bf16" || a.dtype == "bfloat16") {
    options.dtype = model::SafeDType::bf16;
  } else if (a.dtype == "f16" || a.dtype == "fp16" || a.dtype == "float16") {
    options.dtype = model::SafeDType::f16;
  } else {
    return report_error(fmt::format("--dtype '{}' is not f32, bf16 or f16", a.dtype), kExitUsage);
  }
  StatusOr<uint64_t> shard = parse_shard_size(a.shard_size);
  if (!shard.is_ok()) return report_error(shard.status().message(), kExitUsage);
  options.shard_bytes = *shard;
  options.tokenizer_from = a.tokenizer_from;
  StatusOr<std::string> dir = model::resolve_checkpoint(a.from);
  if (!dir.is_ok()) return report_error(dir.status().message(), kExitUsage);
  if (Status s = model::export_hf_checkpoint(*dir, a.out, options); !s.is_ok())
    return report_error(
        s.message(), s.code() == Code::invalid_argument || s.code() == Code::not_found || s.code() == Code::corruption
                         ? kExitUsage
                         : kExitFailure);
  fmt::print("exported {} to {} ({}; load it with transformers' from_pretrained(\"{}\"))\n", *dir, a.out,
             model::safe_dtype_name(options.dtype), a.out);
  return kExitOk;
}

}  // namespace

void add_export_command(CLI::App& root, CommandRegistry& registry) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* app = root.add_subcommand(
      "export", "Write a checkpoint as a Hugging Face model directory (config.json + safetensors) for transformers");
  app->add_option("--hf", args->out, "the directory to write (new, or empty)")->required();
  app->add_option("--from", args->from, "a --checkpoint-dir (its latest checkpoint) or one of its step-N directories")
      ->required();
  app->add_option("--dtype", args->dtype, "weights as f32 (default), bf16 or f16");
  app->add_option("--shard-size", args->shard_size,
                  "largest safetensors file before the weights are split into shards with an index (default 5GB)");
  app->add_option("--tokenizer-from", args->tokenizer_from,
                  "copy the tokenizer files (tokenizer.json, tokenizer_config.json, special_tokens_map.json, "
                  "generation_config.json, ...) of this model directory, e.g. the --init-from one");
  registry.add(app, [args]() { return run_export(*args); });
}

}  // namespace strata::cli
