// `strata ckpt verify PATH` and `strata ckpt inspect PATH [--json]`: checks and shows the
// checkpoints `strata train --checkpoint-dir` writes (model/ckpt/checkpoint_store.h). PATH is a run
// directory (verify: every complete step-N/ in it; inspect: the latest) or one checkpoint
// directory. verify exits 0 when every checkpoint verifies (structure, step, CRC-32C per tensor,
// finite fp32 values), 1 naming the first problem otherwise; inspect prints the step, model,
// options and each tensor's name, dtype, shape and checksum. Not a converter or an editor.
#include <filesystem>
#include <memory>
#include <string>

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "model/ckpt/checkpoint.h"
#include "model/ckpt/checkpoint_store.h"
#include "runtime/units.h"
#include "tools/strata/command.h"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

int exit_for(const Status& s) {
  return s.code() == Code::not_found || s.code() == Code::invalid_argument ? kExitUsage : kExitFailure;
}

std::string summary_line(const model::CheckpointReport& r) {
  return fmt::format("step {}, model {}, {} tensors, {}, {}", r.state.step, r.state.preset, r.tensors.size(),
                     format_size(r.bytes),
                     r.checksummed ? "every CRC-32C matches" : "no checksums recorded (an older strata wrote it)");
}

int verify(const std::string& path) {
  std::error_code ec;
  const bool single = fs::exists(fs::path(path) / model::kCheckpointOptimizerFile, ec);
  std::vector<std::string> dirs;
  std::string latest;
  if (single) {
    dirs.push_back(path);
  } else {
    StatusOr<std::string> resolved = model::resolve_checkpoint(path);
    if (!resolved.is_ok()) return report_error(resolved.status().message(), exit_for(resolved.status()));
    latest = *resolved;
    for (const auto& [step, dir] : model::list_checkpoints(path)) dirs.push_back(dir);
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
      const std::string name = e.path().filename().string();
      if (name.starts_with(".tmp-") || name.starts_with(".replaced-") || name.find(".tmp.") != std::string::npos)
        fmt::print("{}: left by a killed save or one in progress (the next run removes it)\n", e.path().string());
    }
  }
  int failed = 0;
  for (const std::string& dir : dirs) {
    StatusOr<model::CheckpointReport> r = model::verify_checkpoint(dir);
    if (!r.is_ok()) {
      fmt::print("{}: FAILED: {}\n", dir, r.status().message());
      ++failed;
      continue;
    }
    fmt::print("{}: ok: {}{}\n", dir, summary_line(*r), dir == latest ? " (latest)" : "");
  }
  if (failed > 0)
    return report_error(fmt::format("{} of {} checkpoint(s) in {} failed verification", failed, dirs.size(), path));
  return kExitOk;
}

int inspect(const std::string& path, bool json) {
  StatusOr<std::string> dir = model::resolve_checkpoint(path);
  if (!dir.is_ok()) return report_error(dir.status().message(), exit_for(dir.status()));
  StatusOr<model::CheckpointReport> r = model::verify_checkpoint(*dir);
  if (!r.is_ok()) return report_error(r.status().message(), exit_for(r.status()));
  const model::CheckpointState& s = r->state;
  Json doc;
  doc["dir"] = *dir;
  doc["step"] = s.step;
  doc["model"] = s.preset;
  doc["dtype"] = s.dtype;
  doc["micro_batch"] = s.micro_batch;
  doc["seq"] = s.seq;
  doc["grad_accum"] = s.grad_accum;
  doc["seed"] = s.seed;
  doc["loader"] = {{"epoch", s.loader.epoch}, {"batch", s.loader.batch}};
  doc["bytes"] = r->bytes;
  doc["checksummed"] = r->checksummed;
  Json meta = Json::object();
  for (const auto& [k, v] : r->optimizer_metadata)
    if (k != model::kCrcMetadataKey && k != "moments") meta[k] = v;
  doc["optimizer_metadata"] = meta;
  Json tensors = Json::array();
  for (const model::CheckpointTensorInfo& t : r->tensors)
    tensors.push_back({{"file", t.file}, {"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape},
                       {"bytes", t.bytes}, {"crc32c", t.crc32c}});
  doc["tensors"] = tensors;
  if (json) {
    fmt::print("{}\n", doc.dump(2));
    return kExitOk;
  }
  fmt::print("checkpoint {}\n", *dir);
  fmt::print("  step          {} (data: epoch {}, batch {}; seed {})\n", s.step, s.loader.epoch, s.loader.batch, s.seed);
  fmt::print("  model         {}\n", s.preset);
  fmt::print("  precision     {}, {} Adam moments\n", s.dtype.empty() ? "?" : s.dtype,
             r->optimizer_metadata.contains("optimizer_states") ? r->optimizer_metadata.at("optimizer_states") : "fp32");
  fmt::print("  batch shape   micro_batch {}, seq {}, grad_accum {}\n", s.micro_batch, s.seq, s.grad_accum);
  for (const auto& [k, v] : meta.items())
    if (k == "adam_updates" || k == "loss_scaler") fmt::print("  {:<13} {}\n", k, v.get<std::string>());
  fmt::print("  size          {}; {}\n", format_size(r->bytes), summary_line(*r));
  fmt::print("  {:<22} {:<44} {:<8} {:<16} {}\n", "file", "tensor", "dtype", "shape", "crc32c");
  for (const model::CheckpointTensorInfo& t : r->tensors)
    fmt::print("  {:<22} {:<44} {:<8} {:<16} {}\n", t.file, t.name, t.dtype, fmt::format("[{}]", fmt::join(t.shape, ", ")),
               t.crc32c.empty() ? "-" : t.crc32c);
  return kExitOk;
}

}  // namespace

void add_ckpt_command(CLI::App& root, CommandRegistry& registry) {
  CLI::App* ckpt = root.add_subcommand("ckpt", "Check and show the checkpoints of `strata train --checkpoint-dir`");
  ckpt->require_subcommand(1);
  auto path = std::make_shared<std::string>();
  CLI::App* v = ckpt->add_subcommand(
      "verify", "Verify every checkpoint of a run directory (or one checkpoint directory): structure, step, "
                "CRC-32C of each tensor, finite weights; exit 1 naming the first problem");
  v->add_option("PATH", *path, "a --checkpoint-dir or one of its step-N directories")->required();
  registry.add(v, [path]() { return verify(*path); });
  auto ipath = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  CLI::App* i = ckpt->add_subcommand(
      "inspect", "Show a checkpoint (a run directory's latest, or one checkpoint directory): step, model, options, "
                 "tensor names, shapes, dtypes and checksums");
  i->add_option("PATH", *ipath, "a --checkpoint-dir or one of its step-N directories")->required();
  i->add_flag("--json", *json, "Print one JSON document");
  registry.add(i, [ipath, json]() { return inspect(*ipath, *json); });
}

}  // namespace strata::cli
