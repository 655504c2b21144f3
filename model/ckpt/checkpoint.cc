// Training checkpoints: writing, verifying and reading model.safetensors and
// optimizer.safetensors (see checkpoint.h).
#include "model/ckpt/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kernels/cpu/crc32c.h"
#include "model/ckpt/optimizer_buffers.h"
#include "model/hf/hf_config.h"
#include "model/hf/hf_export.h"
#include "model/hf/hf_weights.h"
#include "model/hf/safetensors.h"

namespace strata::model {
namespace {

std::string path_in(const std::string& dir, std::string_view file) { return dir + "/" + std::string(file); }

std::span<const std::byte> bytes_of(std::span<const float> v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(float)};
}

constexpr const char* kMomentsDescription =
    "m.<chunk>, v.<chunk>: fp32 Adam moments of each fp32 layout chunk, padded bytes included; 8-bit states: "
    "m_code.<chunk> (I8), v_code.<chunk> (U8), one per fp32 element, and m_scale.<chunk>, v_scale.<chunk> (F32), "
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

std::string crc_hex(std::span<const std::byte> bytes) {
  return fmt::format("{:08x}", kernels::crc32c(0, bytes.data(), bytes.size()));
}

// Checks `f`'s recorded checksums (when it has them) and that its F32 tensors are finite; appends
// one CheckpointTensorInfo per tensor to `out`. Returns whether the file had checksums.
StatusOr<bool> verify_file(const SafetensorsFile& f, std::string_view file, std::vector<CheckpointTensorInfo>& out) {
  nlohmann::json crcs;
  const auto it = f.metadata().find(std::string(kCrcMetadataKey));
  if (it != f.metadata().end()) {
    crcs = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    if (!crcs.is_object())
      return error(Code::corruption, "{}: metadata '{}' is not a JSON object of checksums; the file is damaged",
                   f.path(), kCrcMetadataKey);
  }
  const bool checksummed = it != f.metadata().end();
  for (const SafetensorsTensor& t : f.tensors()) {
    const std::span<const std::byte> bytes = f.data(t);
    CheckpointTensorInfo info{.file = std::string(file), .name = t.name, .dtype = std::string(safe_dtype_name(t.dtype)),
                              .shape = t.shape, .bytes = t.bytes(), .crc32c = {}};
    if (checksummed) {
      const auto want = crcs.find(t.name);
      if (want == crcs.end() || !want->is_string())
        return error(Code::corruption, "{}: tensor '{}' has no checksum in '{}'; the file is damaged or was edited",
                     f.path(), t.name, kCrcMetadataKey);
      const std::string have = crc_hex(bytes);
      if (have != want->get<std::string>())
        return error(Code::corruption,
                     "{}: tensor '{}' ({} bytes) has CRC-32C {} but {} was recorded when it was saved: the file is "
                     "damaged (disk or copy error); resume from another checkpoint",
                     f.path(), t.name, t.bytes(), have, want->get<std::string>());
      info.crc32c = have;
    }
    if (t.dtype == SafeDType::f32) {
      for (uint64_t i = 0; i < t.elements(); ++i) {
        uint32_t u;
        std::memcpy(&u, bytes.data() + 4 * i, 4);
        if ((u & 0x7f800000u) == 0x7f800000u) {
          float v;
          std::memcpy(&v, &u, 4);
          return error(Code::corruption,
                       "{}: tensor '{}' element {} is {}: the run had diverged when this checkpoint was saved; "
                       "resume from an earlier checkpoint (with a lower --lr)",
                       f.path(), t.name, i, v);
        }
      }
    }
    out.push_back(std::move(info));
  }
  return checksummed;
}

// The checkpoint's config.json (from checkpoints of strata 0.2 on; older ones have none) parses,
// describes the model the weights are of (every tensor of its layout present with its shape) and
// names the model the optimizer file does: `strata export --hf` and a --resume that takes the
// model from it read it. corruption naming the file and what is wrong otherwise.
Status verify_config_json(const std::string& dir, const HfWeights& weights, const std::string& preset) {
  const std::string path = path_in(dir, kHfConfigFile);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::ok();
  const auto damaged = [&](const std::string& what) {
    return error(Code::corruption,
                 "{}: {}; the checkpoint's config.json is damaged (`strata export --hf` and --resume read it): "
                 "restore it from another checkpoint of the run (every one of a run has the same), or resume from "
                 "another checkpoint",
                 path, what);
  };
  StatusOr<HfModelConfig> hf = read_hf_config(path);
  if (!hf.is_ok()) return damaged(hf.status().message());
  if (!preset.empty() && hf->config.name != preset)
    return damaged(fmt::format("it describes model '{}' but the checkpoint is of '{}'", hf->config.name, preset));
  StatusOr<ParamLayout> layout = build_param_layout(hf->config, 4);
  if (!layout.is_ok()) return damaged(layout.status().message());
  if (Status s = weights.check_layout(*layout, hf->config.name); !s.is_ok())
    return damaged(fmt::format("it does not describe the checkpoint's weights: {}", s.message()));
  return Status::ok();
}

}  // namespace

// Streams the checkpoint: every file's header is declared up front, then one walk through the
// trainer's optimizer state (a piece's image at a time, read from NVMe ahead of the visit when
// homed there) writes each piece's fp32 masters (in HF layouts) into its model shard and its
// moments into optimizer.safetensors, each at its offset in its chunk's tensors; the writers record
// each tensor's CRC-32C as its bytes go by. Memory: one tensor's HF-layout copy, never the model.
Status save_checkpoint(const std::string& dir, const Transformer& model, Trainer& trainer,
                       const CheckpointState& state, const CheckpointHook& hook, uint64_t shard_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return errno_status(ec.value(), "creating checkpoint directory " + dir);
  const std::string step = std::to_string(trainer.steps_done());
  STRATA_RETURN_IF_ERROR(trainer.sync_host_state());

  // Weights: the trainer's fp32 masters (exact for every working precision), in HF layouts. One
  // model.safetensors, or shards with an index above shard_bytes (Hugging Face's layout), each
  // shard carrying the step and the checksums of its own tensors.
  const ParamLayout& layout = model.master_layout();
  const std::vector<std::vector<size_t>> shards =
      plan_hf_shards(layout, {.dtype = SafeDType::f32, .shard_bytes = shard_bytes});
  std::vector<std::pair<size_t, size_t>> place(layout.params.size());  // param -> (shard, index in it)
  std::vector<std::unique_ptr<SafetensorsWriter>> model_files;
  std::vector<std::string> shard_names;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t total = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    shard_names.push_back(shards.size() == 1 ? std::string(kCheckpointModelFile)
                                             : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size()));
    std::vector<SafetensorsSpec> specs;
    for (size_t i : shards[s]) {  // tensors (their first tiles)
      const ParamSpec& p = layout.params[i];
      std::vector<uint64_t> shape;
      for (int64_t d : p.hf_shape()) shape.push_back(uint64_t(d));
      place[i] = {s, specs.size()};
      specs.push_back({.name = p.name, .dtype = SafeDType::f32, .shape = shape});
      weight_map[p.name] = shard_names.back();
      total += p.tensor_elements() * sizeof(float);
    }
    STRATA_ASSIGN_OR_RETURN(
        model_files.emplace_back(),
        SafetensorsWriter::create(path_in(dir, shard_names.back()), std::move(specs),
                                  {{"format", "pt"}, {"strata_step", step}, {"strata_preset", state.preset}},
                                  std::string(kCrcMetadataKey)));
  }

  std::vector<SafetensorsSpec> specs;
  std::vector<size_t> first_buffer;  // per chunk: index of its first optimizer tensor
  for (size_t c = 0; c < trainer.state_chunks(); ++c) {
    first_buffer.push_back(specs.size());
    for (const OptimizerBuffer& b : optimizer_buffers(c, trainer.state_layout(c)))
      specs.push_back({.name = b.name, .dtype = b.dtype, .shape = {b.bytes / safe_dtype_size(b.dtype)}});
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
      {"micro_batch", std::to_string(state.micro_batch)},
      {"seq", std::to_string(state.seq)},
      {"grad_accum", std::to_string(state.grad_accum)},
      {"vocab_tile", std::to_string(model.config().vocab_tile)},  // the moments are per chunk
      {"mlp_tiles", std::to_string(mlp_tiles(model.config()))},   // and so are the MLP tiles (1: whole)
  };
  if (const LossScaler* scaler = trainer.loss_scaler()) metadata["loss_scaler"] = scaler->serialize();
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsWriter> optimizer_file,
                          SafetensorsWriter::create(path_in(dir, kCheckpointOptimizerFile), std::move(specs),
                                                    std::move(metadata), std::string(kCrcMetadataKey)));

  // A tile (vocabulary or MLP) is written into its tensor, declared by the tensor's first tile.
  for (size_t i = 0; i < layout.params.size(); ++i)
    if (layout.params[i].row_begin > 0) place[i] = place[layout.find(layout.params[i].name) - layout.params.data()];
  std::vector<std::vector<size_t>> params_of(trainer.state_chunks());
  for (size_t i = 0; i < layout.params.size(); ++i) params_of[layout.params[i].chunk].push_back(i);
  // A transposed tensor cut into optimizer pieces, or into MLP tiles (whose rows are columns of
  // the file's tensor), is gathered whole in strata's layout and written once its last element has
  // gone by. Its tiles' chunks follow one another and are visited in order, so one tensor is
  // gathered at a time: keyed by ordinal all the same, so no visiting order can mix two.
  struct Gathered {
    std::vector<float> values;  // the whole tensor, strata's layout
    uint64_t received = 0;      // elements copied in so far
  };
  std::map<int, Gathered> gathering;
  const auto write_piece = [&](const StatePiece& piece, const OptimizerStateLayout& piece_layout,
                               ChunkState& state) -> Status {
    for (size_t i : params_of[piece.chunk]) {
      const ParamSpec& p = layout.params[i];
      const uint64_t slot = p.offset / sizeof(float);
      const uint64_t lo = std::max(slot, piece.element_begin), hi = std::min(slot + p.elements, piece.element_end);
      if (lo >= hi) continue;
      const float* values = state.master + (lo - piece.element_begin);
      SafetensorsWriter& file = *model_files[place[i].first];
      if (lo == slot && hi == slot + p.elements && p.whole()) {
        STRATA_RETURN_IF_ERROR(file.write(place[i].second, bytes_of(to_hf_layout(p, values))));
      } else if (!p.hf_transposed) {
        STRATA_RETURN_IF_ERROR(file.write(place[i].second, bytes_of(std::span(values, hi - lo)),
                                          (p.tensor_offset() + lo - slot) * sizeof(float)));
      } else {
        Gathered& g = gathering[p.tensor];
        if (g.values.empty()) g.values.resize(p.tensor_elements());
        std::copy(values, values + (hi - lo), g.values.begin() + int64_t(p.tensor_offset() + lo - slot));
        g.received += hi - lo;
        if (g.received == p.tensor_elements()) {
          ParamSpec whole = p;  // to_hf_layout converts p.elements: the whole tensor's
          whole.row_begin = 0;
          whole.elements = p.tensor_elements();
          STRATA_RETURN_IF_ERROR(file.write(place[i].second, bytes_of(to_hf_layout(whole, g.values.data()))));
          gathering.erase(p.tensor);
        }
      }
    }
    size_t at = first_buffer[piece.chunk];
    for (const OptimizerBuffer& b : optimizer_buffers(piece, piece_layout, state.image.data()))
      STRATA_RETURN_IF_ERROR(optimizer_file->write(at++, {b.data, b.bytes}, b.offset));
    return Status::ok();
  };
  STRATA_RETURN_IF_ERROR(trainer.visit_state(/*write_back=*/false, write_piece));
  if (!gathering.empty()) {
    const ParamSpec& p = *std::find_if(layout.params.begin(), layout.params.end(),
                                       [&](const ParamSpec& q) { return q.tensor == gathering.begin()->first; });
    return error(Code::internal, "checkpoint {}: tensor '{}' got {} of its {} elements from the optimizer state; "
                 "the layout's tiles do not cover it (a bug: report it)", dir, p.name,
                 gathering.begin()->second.received, p.tensor_elements());
  }

  for (std::unique_ptr<SafetensorsWriter>& f : model_files) STRATA_RETURN_IF_ERROR(f->commit());
  if (shards.size() > 1) {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = weight_map;
    STRATA_RETURN_IF_ERROR(write_text_atomically(path_in(dir, kHfIndexFile), index.dump(2) + "\n"));
  }
  // config.json beside the fp32 weights: transformers' from_pretrained(dir) loads the checkpoint.
  STRATA_RETURN_IF_ERROR(write_hf_config(path_in(dir, kHfConfigFile), model.config(), SafeDType::f32));
  if (hook) STRATA_RETURN_IF_ERROR(hook("model_written"));
  return optimizer_file->commit();
}

StatusOr<CheckpointReport> verify_checkpoint(const std::string& dir) {
  STRATA_ASSIGN_OR_RETURN(SafetensorsFile opt, SafetensorsFile::open(path_in(dir, kCheckpointOptimizerFile)));
  STRATA_ASSIGN_OR_RETURN(HfWeights model_files, HfWeights::open(dir));
  const SafetensorsFile& weights = model_files.files().front();
  CheckpointReport r;
  r.dir = dir;
  CheckpointState& s = r.state;
  STRATA_ASSIGN_OR_RETURN(s.step, metadata_number(opt, "strata_step"));
  STRATA_ASSIGN_OR_RETURN(s.loader.epoch, metadata_number(opt, "loader_epoch"));
  STRATA_ASSIGN_OR_RETURN(s.loader.batch, metadata_number(opt, "loader_batch"));
  STRATA_ASSIGN_OR_RETURN(s.seed, metadata_number(opt, "seed"));
  for (const SafetensorsFile& f : model_files.files()) {
    STRATA_ASSIGN_OR_RETURN(uint64_t weights_step, metadata_number(f, "strata_step"));
    if (weights_step != s.step)
      return error(Code::corruption,
                   "{} is from step {} but {} from step {}: the checkpoint was interrupted while saving; resume from "
                   "an older checkpoint",
                   f.path(), weights_step, opt.path(), s.step);
  }
  for (auto [key, value] : {std::pair{"vocab_tile", &s.vocab_tile}, {"mlp_tiles", &s.mlp_tiles}}) {
    if (!opt.metadata().contains(key)) continue;  // from before tiling: whole
    STRATA_ASSIGN_OR_RETURN(uint64_t v, metadata_number(opt, key));
    *value = int64_t(v);
  }
  for (const char* key : {"micro_batch", "seq", "grad_accum"}) {
    if (!opt.metadata().contains(key)) continue;  // from before they were recorded
    STRATA_ASSIGN_OR_RETURN(uint64_t v, metadata_number(opt, key));
    (std::string_view(key) == "micro_batch" ? s.micro_batch : std::string_view(key) == "seq" ? s.seq : s.grad_accum) = v;
  }
  const auto text = [&](const char* key) {
    const auto it = opt.metadata().find(key);
    return it == opt.metadata().end() ? std::string() : it->second;
  };
  s.preset = text("strata_preset");
  s.dtype = text("dtype");
  bool model_crc = true;
  for (const SafetensorsFile& f : model_files.files()) {
    STRATA_ASSIGN_OR_RETURN(bool crc, verify_file(f, std::filesystem::path(f.path()).filename().string(), r.tensors));
    model_crc = model_crc && crc;
    std::error_code ec;
    r.bytes += std::filesystem::file_size(f.path(), ec);
  }
  STRATA_ASSIGN_OR_RETURN(bool opt_crc, verify_file(opt, kCheckpointOptimizerFile, r.tensors));
  r.checksummed = model_crc && opt_crc;
  STRATA_RETURN_IF_ERROR(verify_config_json(dir, model_files, s.preset));
  r.model_metadata = weights.metadata();
  r.optimizer_metadata = opt.metadata();
  std::error_code ec;
  r.bytes += std::filesystem::file_size(path_in(dir, kCheckpointOptimizerFile), ec);
  return r;
}

StatusOr<CheckpointState> read_checkpoint_state(const std::string& dir, std::string_view preset) {
  STRATA_ASSIGN_OR_RETURN(CheckpointReport r, verify_checkpoint(dir));
  if (!r.checksummed)
    spdlog::warn("{} records no checksums (an older strata wrote it): its tensor bytes cannot be verified", dir);
  if (r.state.preset != preset)
    return error(Code::invalid_argument,
                 "{} was trained as model '{}', not '{}'; pass the preset (and dimension flags) it was trained with",
                 dir, r.state.preset, preset);
  return r.state;
}

StatusOr<std::vector<std::string>> check_resume_compatible(const CheckpointState& saved, const CheckpointState& run,
                                                           std::string_view checkpoint) {
  if ((saved.micro_batch != 0 && saved.micro_batch != run.micro_batch) || (saved.seq != 0 && saved.seq != run.seq))
    return error(Code::invalid_argument,
                 "{} was trained with --micro-batch {} --seq {}, this run has --micro-batch {} --seq {}: its data "
                 "position (epoch {}, batch {}) counts batches of the saved shape, so the data order cannot continue; "
                 "pass --micro-batch {} --seq {} to resume it (use --grad-accum to change tokens per step)",
                 checkpoint, saved.micro_batch, saved.seq, run.micro_batch, run.seq, saved.loader.epoch,
                 saved.loader.batch, saved.micro_batch, saved.seq);
  std::vector<std::string> warnings;
  if (saved.grad_accum != 0 && saved.grad_accum != run.grad_accum)
    warnings.push_back(fmt::format("{} was trained with --grad-accum {}, this run has {}: tokens per step change, so "
                                   "the run continues but not bit-identically to one that kept {}",
                                   checkpoint, saved.grad_accum, run.grad_accum, saved.grad_accum));
  if (!saved.dtype.empty() && saved.dtype != run.dtype)
    warnings.push_back(fmt::format("{} was trained in {}, this run computes in {}: the fp32 master weights and "
                                   "moments carry over, but the run does not continue bit-identically",
                                   checkpoint, saved.dtype, run.dtype));
  return warnings;
}

Status load_checkpoint_weights(const std::string& dir, Transformer& model) {
  STRATA_ASSIGN_OR_RETURN(HfWeights weights, HfWeights::open(dir));
  return model.load_hf_weights(weights);
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
  if (opt.metadata().contains("vocab_tile")) {  // from before tiling: untiled
    STRATA_ASSIGN_OR_RETURN(uint64_t tile, metadata_number(opt, "vocab_tile"));
    const int64_t want = trainer.model().config().vocab_tile;
    if (int64_t(tile) != want)
      return error(Code::invalid_argument,
                   "{} was saved with --vocab-tile {} and this run tiles by {}: the Adam moments are stored per chunk "
                   "and the vocabulary tiles are chunks; pass --vocab-tile {} to resume it",
                   opt.path(), tile, want, tile);
  }
  {  // from before MLP tiling: whole MLPs
    uint64_t saved = 1;
    if (opt.metadata().contains("mlp_tiles")) {
      STRATA_ASSIGN_OR_RETURN(saved, metadata_number(opt, "mlp_tiles"));
    }
    const uint64_t want = uint64_t(mlp_tiles(trainer.model().config()));
    const auto tiling = [](uint64_t n) {
      return n > 1 ? fmt::format("{} MLP tiles per weight", n) : std::string("whole MLPs");
    };
    if (std::max<uint64_t>(saved, 1) != want)
      return error(Code::invalid_argument,
                   "{} was saved with {} but this run has {}: the Adam moments are stored per chunk and each MLP "
                   "tile is a chunk; pass --mlp-tiles {} to resume it",
                   opt.path(), tiling(saved), tiling(want), saved > 1 ? saved : 0);
  }
  // Every tensor is checked before any state changes; then one walk writes each chunk's image.
  for (size_t c = 0; c < trainer.state_chunks(); ++c) {
    for (const OptimizerBuffer& b : optimizer_buffers(c, trainer.state_layout(c))) {
      const SafetensorsTensor* t = opt.find(b.name);
      if (t == nullptr || t->dtype != b.dtype)
        return error(Code::corruption, "{}: optimizer tensor '{}' is missing or not {}", opt.path(), b.name,
                     safe_dtype_name(b.dtype));
      if (t->bytes() != b.bytes)
        return error(Code::invalid_argument, "{}: optimizer tensor '{}' has {} bytes; this model's has {}",
                     opt.path(), b.name, t->bytes(), b.bytes);
    }
  }
  const auto restore_piece = [&](const StatePiece& piece, const OptimizerStateLayout& piece_layout,
                                 ChunkState& state) {
    // The mapping may be unaligned for floats: memcpy.
    for (const OptimizerBuffer& b : optimizer_buffers(piece, piece_layout, state.image.data()))
      std::memcpy(b.data, opt.data(*opt.find(b.name)).data() + b.offset, b.bytes);
    return Status::ok();
  };
  STRATA_RETURN_IF_ERROR(trainer.visit_state(/*write_back=*/true, restore_piece));
  const auto scaler = opt.metadata().find("loss_scaler");
  std::optional<std::string_view> scaler_json;
  if (scaler != opt.metadata().end() && scaler->second.starts_with("{")) scaler_json = scaler->second;
  if (trainer.loss_scaler() != nullptr && !scaler_json)
    spdlog::warn("{} has no fp16 loss scale (it was not an fp16 run): starting from the initial scale", opt.path());
  return trainer.restore_progress(step, updates, scaler_json);
}

}  // namespace strata::model
