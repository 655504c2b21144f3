// Training checkpoints: writing and reading model.safetensors and optimizer.safetensors (see
// checkpoint.h).
#include "model/checkpoint.h"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "model/safetensors.h"

#include <spdlog/spdlog.h>

namespace strata::model {
namespace {

std::string path_in(const std::string& dir, std::string_view file) { return dir + "/" + std::string(file); }

std::span<const std::byte> bytes_of(const std::vector<float>& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(float)};
}

constexpr const char* kMomentsDescription =
    "m.<chunk>, v.<chunk>: fp32 Adam moments of each fp32 layout chunk, padded bytes included; 8-bit states: "
    "m_code.<chunk> (I8), v_code.<chunk> (U8), one per fp32 slot, and m_scale.<chunk>, v_scale.<chunk> (F32), "
    "the block scales of the chunk's tensors";

StatusOr<uint64_t> metadata_number(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata().find(key);
  uint64_t value = 0;
  if (it == f.metadata().end())
    return error(Code::corruption, "{} has no '{}' in its metadata; it is not a strata checkpoint", f.path(), key);
  const auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), value);
  if (ec != std::errc() || end != it->second.data() + it->second.size())
    return error(Code::corruption, "{}: metadata '{}' is '{}', not a number", f.path(), key, it->second);
  return value;
}

}  // namespace

Status save_checkpoint(const std::string& dir, const Transformer& model, Trainer& trainer,
                       const CheckpointState& state) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return errno_status(ec.value(), "creating checkpoint directory " + dir);
  const std::string step = std::to_string(trainer.steps_done());
  STRATA_RETURN_IF_ERROR(trainer.sync_host_state());

  // Weights: the trainer's fp32 masters (exact for every working precision), in HF layouts.
  const ParamLayout& layout = model.master_layout();
  std::vector<std::vector<float>> weights;
  weights.reserve(layout.params.size());
  std::vector<SafetensorsBlob> blobs;
  for (const ParamSpec& p : layout.params) {
    weights.push_back(to_hf_layout(p, trainer.master(p).data()));
    std::vector<uint64_t> shape;
    for (int64_t d : p.hf_shape()) shape.push_back(uint64_t(d));
    blobs.push_back({.spec = {.name = p.name, .dtype = SafeDType::f32, .shape = shape}, .bytes = bytes_of(weights.back())});
  }
  STRATA_RETURN_IF_ERROR(write_safetensors(path_in(dir, kCheckpointModelFile), blobs,
                                           {{"format", "pt"}, {"strata_step", step}, {"strata_preset", state.preset}}));

  blobs.clear();
  for (const OptimizerBuffer& b : trainer.optimizer_buffers()) {
    const uint64_t n = b.bytes.size() / safe_dtype_size(b.dtype);
    blobs.push_back({.spec = {.name = b.name, .dtype = b.dtype, .shape = {n}}, .bytes = b.bytes});
  }
  std::map<std::string, std::string> metadata = {
      {"strata_step", step},
      {"adam_updates", std::to_string(trainer.updates_done())},
      {"loader_epoch", std::to_string(state.loader.epoch)},
      {"loader_batch", std::to_string(state.loader.batch)},
      {"seed", std::to_string(state.seed)},
      {"strata_preset", state.preset},
      {"dtype", std::string(dtype_name(model.dtype()))},
      {"optimizer_states", std::string(adam_states_name(trainer.options().adam_states))},
      {"moments", kMomentsDescription},
  };
  if (const LossScaler* scaler = trainer.loss_scaler()) metadata["loss_scaler"] = scaler->serialize();
  return write_safetensors(path_in(dir, kCheckpointOptimizerFile), blobs, metadata);
}

StatusOr<CheckpointState> read_checkpoint_state(const std::string& dir, std::string_view preset) {
  STRATA_ASSIGN_OR_RETURN(SafetensorsFile opt, SafetensorsFile::open(path_in(dir, kCheckpointOptimizerFile)));
  STRATA_ASSIGN_OR_RETURN(SafetensorsFile weights, SafetensorsFile::open(path_in(dir, kCheckpointModelFile)));
  CheckpointState s;
  STRATA_ASSIGN_OR_RETURN(s.step, metadata_number(opt, "strata_step"));
  STRATA_ASSIGN_OR_RETURN(s.loader.epoch, metadata_number(opt, "loader_epoch"));
  STRATA_ASSIGN_OR_RETURN(s.loader.batch, metadata_number(opt, "loader_batch"));
  STRATA_ASSIGN_OR_RETURN(s.seed, metadata_number(opt, "seed"));
  STRATA_ASSIGN_OR_RETURN(uint64_t weights_step, metadata_number(weights, "strata_step"));
  if (weights_step != s.step)
    return error(Code::corruption,
                 "{} is from step {} but {} from step {}: the checkpoint was interrupted while saving; resume from "
                 "an older checkpoint",
                 weights.path(), weights_step, opt.path(), s.step);
  const auto it = opt.metadata().find("strata_preset");
  s.preset = it == opt.metadata().end() ? "" : it->second;
  if (s.preset != preset)
    return error(Code::invalid_argument,
                 "{} was trained as model '{}', not '{}'; pass the preset (and dimension flags) it was trained with",
                 dir, s.preset, preset);
  return s;
}

Status load_checkpoint_weights(const std::string& dir, Transformer& model) {
  return model.load_hf_safetensors(path_in(dir, kCheckpointModelFile));
}

Status load_checkpoint_optimizer(const std::string& dir, Trainer& trainer) {
  STRATA_ASSIGN_OR_RETURN(SafetensorsFile opt, SafetensorsFile::open(path_in(dir, kCheckpointOptimizerFile)));
  STRATA_ASSIGN_OR_RETURN(uint64_t step, metadata_number(opt, "strata_step"));
  uint64_t updates = step;  // checkpoints from before skipped steps were counted
  if (opt.metadata().contains("adam_updates")) {
    STRATA_ASSIGN_OR_RETURN(updates, metadata_number(opt, "adam_updates"));
  }
  const std::string_view want_states = adam_states_name(trainer.options().adam_states);
  const auto states = opt.metadata().find("optimizer_states");
  const std::string_view have_states = states == opt.metadata().end() ? "fp32" : std::string_view(states->second);
  if (have_states != want_states)
    return error(Code::invalid_argument,
                 "{} holds {} Adam moments but this run keeps {} moments; pass --optimizer-type {} to resume it",
                 opt.path(), have_states, want_states, have_states == "8bit" ? "adamw8bit" : "adamw");
  for (const OptimizerBuffer& b : trainer.optimizer_buffers()) {
    const SafetensorsTensor* t = opt.find(b.name);
    if (t == nullptr || t->dtype != b.dtype)
      return error(Code::corruption, "{}: optimizer tensor '{}' is missing or not {}", opt.path(), b.name,
                   safe_dtype_name(b.dtype));
    const auto bytes = opt.data(*t);
    if (bytes.size() != b.bytes.size())
      return error(Code::invalid_argument, "{}: optimizer tensor '{}' has {} bytes; this model's has {}", opt.path(),
                   b.name, bytes.size(), b.bytes.size());
    std::memcpy(b.bytes.data(), bytes.data(), bytes.size());  // the mapping may be unaligned for floats
  }
  const auto scaler = opt.metadata().find("loss_scaler");
  std::optional<std::string_view> scaler_json;
  if (scaler != opt.metadata().end() && scaler->second.starts_with("{")) scaler_json = scaler->second;
  if (trainer.loss_scaler() != nullptr && !scaler_json)
    spdlog::warn("{} has no fp16 loss scale (it was not an fp16 run): starting from the initial scale", opt.path());
  return trainer.restore_progress(step, updates, scaler_json);
}

}  // namespace strata::model
