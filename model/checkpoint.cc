// Training checkpoints: writing and reading model.safetensors and optimizer.safetensors (see
// checkpoint.h).
#include "model/checkpoint.h"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "model/safetensors.h"

namespace strata::model {
namespace {

std::string path_in(const std::string& dir, std::string_view file) { return dir + "/" + std::string(file); }

std::span<const std::byte> bytes_of(const std::vector<float>& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(float)};
}

std::string moment_name(char which, size_t chunk) { return std::string(1, which) + "." + std::to_string(chunk); }

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

Status save_checkpoint(const std::string& dir, Transformer& model, const Trainer& trainer,
                       const CheckpointState& state) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return errno_status(ec.value(), "creating checkpoint directory " + dir);
  const std::string step = std::to_string(trainer.steps_done());

  const ParamLayout& layout = model.layout();
  std::vector<std::vector<float>> weights;
  weights.reserve(layout.params.size());
  std::vector<SafetensorsBlob> blobs;
  for (const ParamSpec& p : layout.params) {
    STRATA_ASSIGN_OR_RETURN(weights.emplace_back(), model.copy_parameter_to_host(p.name, ParamState::weights));
    std::vector<uint64_t> shape;
    for (int64_t d : p.hf_shape()) shape.push_back(uint64_t(d));
    blobs.push_back({.spec = {.name = p.name, .dtype = SafeDType::f32, .shape = shape}, .bytes = bytes_of(weights.back())});
  }
  STRATA_RETURN_IF_ERROR(write_safetensors(path_in(dir, kCheckpointModelFile), blobs,
                                           {{"format", "pt"}, {"strata_step", step}, {"strata_preset", state.preset}}));

  blobs.clear();
  for (size_t c = 0; c < layout.chunks.size(); ++c) {
    const uint64_t n = layout.chunks[c].bytes / sizeof(float);
    blobs.push_back({.spec = {.name = moment_name('m', c), .dtype = SafeDType::f32, .shape = {n}},
                     .bytes = trainer.first_moment(c)});
    blobs.push_back({.spec = {.name = moment_name('v', c), .dtype = SafeDType::f32, .shape = {n}},
                     .bytes = trainer.second_moment(c)});
  }
  const std::map<std::string, std::string> metadata = {
      {"strata_step", step},
      {"loader_epoch", std::to_string(state.loader.epoch)},
      {"loader_batch", std::to_string(state.loader.batch)},
      {"seed", std::to_string(state.seed)},
      {"strata_preset", state.preset},
      {"dtype", "fp32"},
      {"loss_scaler", "none (fp32 training has no loss scale)"},
      {"moments", "m.<chunk>, v.<chunk>: fp32 Adam moments of each layout chunk, padded bytes included"},
  };
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
    return error(Code::invalid_argument, "{} was trained as preset '{}', not '{}'; pass --preset {}", dir, s.preset,
                 preset, s.preset);
  return s;
}

Status load_checkpoint_weights(const std::string& dir, Transformer& model) {
  return model.load_hf_safetensors(path_in(dir, kCheckpointModelFile));
}

Status load_checkpoint_optimizer(const std::string& dir, Trainer& trainer) {
  STRATA_ASSIGN_OR_RETURN(SafetensorsFile opt, SafetensorsFile::open(path_in(dir, kCheckpointOptimizerFile)));
  STRATA_ASSIGN_OR_RETURN(uint64_t step, metadata_number(opt, "strata_step"));
  std::vector<std::span<const std::byte>> m, v;
  for (size_t c = 0;; ++c) {
    const SafetensorsTensor* mt = opt.find(moment_name('m', c));
    const SafetensorsTensor* vt = opt.find(moment_name('v', c));
    if (mt == nullptr && vt == nullptr) break;
    if (mt == nullptr || vt == nullptr || mt->dtype != SafeDType::f32 || vt->dtype != SafeDType::f32)
      return error(Code::corruption, "{}: the moments of chunk {} are missing or not F32", opt.path(), c);
    m.push_back(opt.data(*mt));
    v.push_back(opt.data(*vt));
  }
  // The mapping's bytes may be unaligned for floats: restore_optimizer memcpy's them.
  return trainer.restore_optimizer(step, m, v);
}

}  // namespace strata::model
