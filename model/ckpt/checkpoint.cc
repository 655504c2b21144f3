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
#include "model/ckpt/checkpoint_ranks.h"
#include "model/ckpt/optimizer_buffers.h"
#include "model/hf/hf_config.h"
#include "model/hf/hf_export.h"
#include "model/hf/hf_weights.h"
#include "model/hf/safetensors.h"
#include "runtime/units.h"

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

// The files of a checkpoint and where each tensor goes in them: the same on every rank, computed
// from the model and the trainer (and the shard size rank 0 uses).
struct CheckpointPlan {
  std::vector<std::string> files;                   // the model's shards, then kCheckpointOptimizerFile
  std::vector<std::vector<SafetensorsSpec>> specs;  // per file, in declaration order
  std::vector<std::pair<size_t, size_t>> place;     // master param -> (file, tensor); a tile -> its tensor's
  std::vector<size_t> first_buffer;                 // per chunk: its first optimizer tensor in the last file
  std::vector<std::vector<size_t>> params_of;       // per chunk: its params
  std::vector<bool> transposed_chunks;              // per chunk: holds a tensor the HF file stores transposed
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();  // the shards' index
  uint64_t total = 0;                               // the weights' bytes
  size_t optimizer_file() const { return files.size() - 1; }
};

CheckpointPlan plan_checkpoint(const Transformer& model, const Trainer& trainer, uint64_t shard_bytes) {
  CheckpointPlan plan;
  // Weights: the trainer's fp32 masters (exact for every working precision), in HF layouts. One
  // model.safetensors, or shards with an index above shard_bytes (Hugging Face's layout).
  const ParamLayout& layout = model.master_layout();
  const std::vector<std::vector<size_t>> shards =
      plan_hf_shards(layout, {.dtype = SafeDType::f32, .shard_bytes = shard_bytes});
  plan.place.resize(layout.params.size());
  for (size_t s = 0; s < shards.size(); ++s) {
    plan.files.push_back(shards.size() == 1 ? std::string(kCheckpointModelFile)
                                            : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size()));
    std::vector<SafetensorsSpec>& specs = plan.specs.emplace_back();
    for (size_t i : shards[s]) {  // tensors (their first tiles)
      const ParamSpec& p = layout.params[i];
      std::vector<uint64_t> shape;
      for (int64_t d : p.hf_shape()) shape.push_back(uint64_t(d));
      plan.place[i] = {s, specs.size()};
      specs.push_back({.name = p.name, .dtype = SafeDType::f32, .shape = shape});
      plan.weight_map[p.name] = plan.files.back();
      plan.total += p.tensor_elements() * sizeof(float);
    }
  }
  // A tile (vocabulary or MLP) is written into its tensor, declared by the tensor's first tile.
  for (size_t i = 0; i < layout.params.size(); ++i)
    if (layout.params[i].row_begin > 0)
      plan.place[i] = plan.place[size_t(layout.find(layout.params[i].name) - layout.params.data())];
  plan.params_of.resize(trainer.state_chunks());
  plan.transposed_chunks.assign(trainer.state_chunks(), false);
  for (size_t i = 0; i < layout.params.size(); ++i) {
    plan.params_of[size_t(layout.params[i].chunk)].push_back(i);
    if (layout.params[i].hf_transposed) plan.transposed_chunks[size_t(layout.params[i].chunk)] = true;
  }
  plan.files.emplace_back(kCheckpointOptimizerFile);
  std::vector<SafetensorsSpec>& specs = plan.specs.emplace_back();
  for (size_t c = 0; c < trainer.state_chunks(); ++c) {
    plan.first_buffer.push_back(specs.size());
    for (const OptimizerBuffer& b : optimizer_buffers(c, trainer.state_layout(c)))
      specs.push_back({.name = b.name, .dtype = b.dtype, .shape = {b.bytes / safe_dtype_size(b.dtype)}});
  }
  return plan;
}

// Bytes to a tensor of a file of the plan, wherever this rank writes them.
using PutBytes = std::function<Status(size_t file, size_t tensor, std::span<const std::byte> bytes, uint64_t offset)>;

// What a visit of the optimizer state writes: the masters of tensors stored as they are, of those
// the HF file stores transposed, and the moments.
struct WrittenParts {
  bool plain_masters = true;
  bool transposed_masters = true;
  bool moments = true;
};

// Writes visited pieces of the optimizer state into the checkpoint's files: each piece's fp32
// masters (in HF layouts) at their offsets in the model shards, its moments at theirs in the
// optimizer file. A transposed tensor cut into optimizer pieces, or into MLP tiles (whose rows are
// columns of the file's tensor), is gathered whole in strata's layout and written once its last
// element has gone by. Its tiles' chunks follow one another and are visited in order, so one
// tensor is gathered at a time: keyed by ordinal all the same, so no visiting order can mix two.
class PieceWriter {
 public:
  PieceWriter(const CheckpointPlan& plan, const ParamLayout& layout, PutBytes put)
      : plan_(plan), layout_(layout), put_(std::move(put)) {}

  Status write(const StatePiece& piece, const OptimizerStateLayout& piece_layout, ChunkState& state,
               WrittenParts parts) {
    for (size_t i : plan_.params_of[piece.chunk]) {
      const ParamSpec& p = layout_.params[i];
      if (!(p.hf_transposed ? parts.transposed_masters : parts.plain_masters)) continue;
      const uint64_t slot = p.offset / sizeof(float);
      const uint64_t lo = std::max(slot, piece.element_begin), hi = std::min(slot + p.elements, piece.element_end);
      if (lo >= hi) continue;
      const float* values = state.master + (lo - piece.element_begin);
      const auto [file, tensor] = plan_.place[i];
      if (lo == slot && hi == slot + p.elements && p.whole()) {
        STRATA_RETURN_IF_ERROR(put_(file, tensor, bytes_of(to_hf_layout(p, values)), 0));
      } else if (!p.hf_transposed) {
        STRATA_RETURN_IF_ERROR(
            put_(file, tensor, bytes_of(std::span(values, hi - lo)), (p.tensor_offset() + lo - slot) * sizeof(float)));
      } else {
        Gathered& g = gathering_[p.tensor];
        if (g.values.empty()) g.values.resize(p.tensor_elements());
        std::copy(values, values + (hi - lo), g.values.begin() + int64_t(p.tensor_offset() + lo - slot));
        g.received += hi - lo;
        if (g.received == p.tensor_elements()) {
          ParamSpec whole = p;  // to_hf_layout converts p.elements: the whole tensor's
          whole.row_begin = 0;
          whole.elements = p.tensor_elements();
          STRATA_RETURN_IF_ERROR(put_(file, tensor, bytes_of(to_hf_layout(whole, g.values.data())), 0));
          gathering_.erase(p.tensor);
        }
      }
    }
    if (!parts.moments) return Status::ok();
    size_t at = plan_.first_buffer[piece.chunk];
    for (const OptimizerBuffer& b : optimizer_buffers(piece, piece_layout, state.image.data()))
      STRATA_RETURN_IF_ERROR(put_(plan_.optimizer_file(), at++, {b.data, b.bytes}, b.offset));
    return Status::ok();
  }

  // internal when a transposed tensor was left partly gathered (the layout's tiles do not cover it).
  Status finish(const std::string& dir) const {
    if (gathering_.empty()) return Status::ok();
    const ParamSpec& p = *std::find_if(layout_.params.begin(), layout_.params.end(),
                                       [&](const ParamSpec& q) { return q.tensor == gathering_.begin()->first; });
    return error(Code::internal, "checkpoint {}: tensor '{}' got {} of its {} elements from the optimizer state; "
                 "the layout's tiles do not cover it (a bug: report it)", dir, p.name,
                 gathering_.begin()->second.received, p.tensor_elements());
  }

 private:
  struct Gathered {
    std::vector<float> values;  // the whole tensor, strata's layout
    uint64_t received = 0;      // elements copied in so far
  };
  const CheckpointPlan& plan_;
  const ParamLayout& layout_;
  PutBytes put_;
  std::map<int, Gathered> gathering_;
};

// ---- across ranks ------------------------------------------------------------------------------
// A partitioned state is written shard-wise: rank 0 creates the files and sends their list (the
// manifest); every rank opens them (SafetensorsPeerWriter) and they agree that all could; each
// writes the masters and moments of its own pieces at their offsets, and the masters of the chunks
// holding transposed tensors (whose file layout interleaves the ranks' shards) are gathered to
// rank 0, which writes them; every rank sends rank 0 its status and the fragments it wrote, whose
// CRCs rank 0 joins into each tensor's; rank 0 commits. Where a rank cannot open the files (the
// checkpoint directory is not shared with it), the whole state is gathered to rank 0 instead, as
// before shard-wise writes. Every step is a collective on every rank, whatever failed before it.

// A fragment on the wire: which file, then the SafetensorsFragment.
struct WireFragment {
  uint32_t file = 0;
  uint32_t tensor = 0;
  uint32_t crc = 0;
  uint32_t unused = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

std::string encode_report(const Status& status, const std::vector<WireFragment>& fragments) {
  std::string out = CheckpointRanks::encode_status(status);
  const size_t at = out.size();
  out.resize(at + fragments.size() * sizeof(WireFragment));
  if (!fragments.empty()) std::memcpy(out.data() + at, fragments.data(), fragments.size() * sizeof(WireFragment));
  return out;
}

// Every rank's walk of a partitioned save, the same collectives on each. Shard-wise: its own
// pieces' plain masters and moments through `writer` (no collective), then the masters of the
// chunks holding transposed tensors gathered, which only rank 0 (`rank0`) writes. Otherwise the
// whole state is gathered and only rank 0 writes it. A write's error stops the writes, not the
// gathers (the gathers' own failure leaves the communicator broken: the exchanges after this
// then fail at once).
Status walk_partitioned_state(Trainer& trainer, const CheckpointPlan& plan, PieceWriter& writer, bool shard_wise,
                              bool rank0) {
  const auto writes = [&](WrittenParts parts) -> Trainer::PieceVisit {
    return [&writer, parts](const StatePiece& p, const OptimizerStateLayout& l, ChunkState& st) {
      return writer.write(p, l, st, parts);
    };
  };
  const Trainer::PieceVisit nothing = [](const StatePiece&, const OptimizerStateLayout&, ChunkState&) {
    return Status::ok();
  };
  if (!shard_wise) return trainer.visit_state(/*write_back=*/false, rank0 ? writes({}) : nothing);
  Status mine = trainer.visit_shards(writes({.plain_masters = true, .transposed_masters = false, .moments = true}));
  const Status gathered = trainer.visit_gathered_masters(
      plan.transposed_chunks,
      rank0 && mine.is_ok() ? writes({.plain_masters = false, .transposed_masters = true, .moments = false}) : nothing);
  return mine.is_ok() ? gathered : mine;
}

// Rank 0's side of a partitioned save, after the files are created: the list out (the manifest,
// {"shard_bytes": n, "files": [{"name", "temp", "data_start"}, ...]} in the plan's order, where
// "temp" is the absolute path of the file being written), the agreement, the writes, the reports
// in, the fragments accepted. Returns the first error of any rank (its files then uncommitted);
// every collective is run whatever failed.
Status write_across_ranks(const std::string& dir, const CheckpointPlan& plan, const ParamLayout& layout,
                          Trainer& trainer, CheckpointRanks& ranks,
                          std::vector<std::unique_ptr<SafetensorsWriter>>& files, uint64_t shard_bytes) {
  nlohmann::json manifest = {{"shard_bytes", shard_bytes}, {"files", nlohmann::json::array()}};
  for (size_t f = 0; f < files.size(); ++f)
    manifest["files"].push_back({{"name", plan.files[f]},
                                 {"temp", std::filesystem::absolute(files[f]->temp_path()).string()},
                                 {"data_start", files[f]->data_start()}});
  STRATA_RETURN_IF_ERROR(ranks.send_files(manifest.dump()).status());
  Status opened;
  STRATA_RETURN_IF_ERROR(ranks.agree(Status::ok(), opened));
  if (!opened.is_ok())
    spdlog::warn("checkpoint: {}; the whole state is gathered to rank 0, which writes it (give every rank the same "
                 "--checkpoint-dir on a shared filesystem to have each write its own shard)",
                 opened.message());
  const bool shard_wise = opened.is_ok();
  uint64_t own_bytes = 0;
  PieceWriter writer(plan, layout, [&](size_t file, size_t tensor, std::span<const std::byte> bytes, uint64_t offset) {
    own_bytes += bytes.size();
    return files[file]->write(tensor, bytes, offset);
  });
  Status mine = walk_partitioned_state(trainer, plan, writer, shard_wise, /*rank0=*/true);
  if (mine.is_ok()) mine = writer.finish(dir);
  // The reports: every rank's status and fragments.
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> reports, ranks.all_gather(encode_report(mine, {})));
  uint64_t peer_bytes = 0;
  for (size_t r = 1; r < reports.size() && mine.is_ok(); ++r) {
    size_t at = 0;
    Status theirs;
    STRATA_RETURN_IF_ERROR(CheckpointRanks::decode_status(reports[r], at, theirs));
    if (!theirs.is_ok()) {
      mine = Status(theirs.code(), fmt::format("rank {}: {}", r, theirs.message()), theirs.sys_errno());
      break;
    }
    if ((reports[r].size() - at) % sizeof(WireFragment) != 0)
      return error(Code::internal, "rank {}'s report of its checkpoint writes is {} bytes, not whole fragments", r,
                   reports[r].size() - at);
    for (; at < reports[r].size(); at += sizeof(WireFragment)) {
      WireFragment w;
      std::memcpy(&w, reports[r].data() + at, sizeof(w));
      if (w.file >= files.size())
        return error(Code::internal, "rank {} reports a write to file {} of {}", r, w.file, files.size());
      STRATA_RETURN_IF_ERROR(
          files[w.file]->accept({.tensor = w.tensor, .crc = w.crc, .offset = w.offset, .bytes = w.bytes}));
      peer_bytes += w.bytes;
    }
  }
  STRATA_RETURN_IF_ERROR(mine);
  if (shard_wise) {
    const auto transposed = std::count(plan.transposed_chunks.begin(), plan.transposed_chunks.end(), true);
    spdlog::info("checkpoint: the {} ranks wrote their own shards (rank 0 {}, the others {} in all){}", ranks.size(),
                 format_size(own_bytes), format_size(peer_bytes),
                 transposed == 0 ? std::string()
                                 : fmt::format("; the masters of the {} chunks holding tensors the file stores "
                                               "transposed were gathered to rank 0",
                                               transposed));
  }
  return Status::ok();
}

}  // namespace

// Streams the checkpoint: every file's header is declared up front, then one walk through the
// trainer's optimizer state (a piece's image at a time, read from NVMe ahead of the visit when
// homed there) writes each piece's fp32 masters (in HF layouts) into its model shard and its
// moments into optimizer.safetensors, each at its offset in its chunk's tensors; the writers record
// each tensor's CRC-32C as its bytes go by. Memory: one tensor's HF-layout copy, never the model.
// Across ranks with a partitioned state, the walk is every rank's over its own shard
// (write_across_ranks).
Status save_checkpoint(const std::string& dir, const Transformer& model, Trainer& trainer,
                       const CheckpointState& state, const CheckpointHook& hook, uint64_t shard_bytes,
                       CheckpointRanks* ranks) {
  const bool across = ranks != nullptr && ranks->size() > 1 && trainer.state_partitioned();
  // Across ranks the others wait for the file list: a failure before it is sent to them.
  const auto failed = [&](const Status& s) -> Status {
    if (across && !ranks->files_sent()) {
      if (Status sent = ranks->send_failure(s); !sent.is_ok()) return sent;
    }
    return s;
  };
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return failed(errno_status(ec.value(), "creating checkpoint directory " + dir));
  const std::string step = std::to_string(trainer.steps_done());
  if (Status s = trainer.sync_host_state(); !s.is_ok()) return failed(s);

  const CheckpointPlan plan = plan_checkpoint(model, trainer, shard_bytes);
  const ParamLayout& layout = model.master_layout();
  std::vector<std::unique_ptr<SafetensorsWriter>> files;
  for (size_t f = 0; f + 1 < plan.files.size(); ++f) {
    // Each shard carries the step and the checksums of its own tensors.
    StatusOr<std::unique_ptr<SafetensorsWriter>> w =
        SafetensorsWriter::create(path_in(dir, plan.files[f]), plan.specs[f],
                                  {{"format", "pt"}, {"strata_step", step}, {"strata_preset", state.preset}},
                                  std::string(kCrcMetadataKey));
    if (!w.is_ok()) return failed(w.status());
    files.push_back(std::move(*w));
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
  {
    StatusOr<std::unique_ptr<SafetensorsWriter>> w =
        SafetensorsWriter::create(path_in(dir, kCheckpointOptimizerFile), plan.specs.back(), std::move(metadata),
                                  std::string(kCrcMetadataKey));
    if (!w.is_ok()) return failed(w.status());
    files.push_back(std::move(*w));
  }

  if (across) {
    STRATA_RETURN_IF_ERROR(write_across_ranks(dir, plan, layout, trainer, *ranks, files, shard_bytes));
  } else {
    PieceWriter writer(plan, layout, [&](size_t file, size_t tensor, std::span<const std::byte> bytes,
                                         uint64_t offset) { return files[file]->write(tensor, bytes, offset); });
    STRATA_RETURN_IF_ERROR(trainer.visit_state(
        /*write_back=*/false,
        [&](const StatePiece& p, const OptimizerStateLayout& l, ChunkState& st) { return writer.write(p, l, st, {}); }));
    STRATA_RETURN_IF_ERROR(writer.finish(dir));
  }

  for (size_t f = 0; f + 1 < files.size(); ++f) STRATA_RETURN_IF_ERROR(files[f]->commit());
  if (plan.files.size() > 2) {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", plan.total}};
    index["weight_map"] = plan.weight_map;
    STRATA_RETURN_IF_ERROR(write_text_atomically(path_in(dir, kHfIndexFile), index.dump(2) + "\n"));
  }
  // config.json beside the fp32 weights: transformers' from_pretrained(dir) loads the checkpoint.
  STRATA_RETURN_IF_ERROR(write_hf_config(path_in(dir, kHfConfigFile), model.config(), SafeDType::f32));
  if (hook) STRATA_RETURN_IF_ERROR(hook("model_written"));
  return files.back()->commit();
}

Status save_checkpoint_shard(const Transformer& model, Trainer& trainer, CheckpointRanks& ranks,
                             const CheckpointHook& hook) {
  if (ranks.size() <= 1 || !trainer.state_partitioned()) return Status::ok();  // rank 0 writes it all
  STRATA_RETURN_IF_ERROR(trainer.sync_host_state());
  STRATA_ASSIGN_OR_RETURN(std::string text, ranks.send_files(""));
  if (CheckpointRanks::failed_files(text)) return Status::ok();  // rank 0's save failed before it had files; it reports
  const nlohmann::json manifest = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  // The files rank 0 created, opened here; the ranks agree that every one could.
  const uint64_t shard_bytes = manifest.value("shard_bytes", uint64_t(0));
  const CheckpointPlan plan = plan_checkpoint(model, trainer, shard_bytes);
  std::vector<std::unique_ptr<SafetensorsPeerWriter>> files;
  Status opened = hook ? hook("shard_open") : Status::ok();
  const nlohmann::json& listed = manifest.value("files", nlohmann::json::array());
  if (opened.is_ok() && listed.size() != plan.files.size())
    opened = error(Code::internal, "rank 0 lists {} checkpoint files, this rank plans {}", listed.size(),
                   plan.files.size());
  for (size_t f = 0; opened.is_ok() && f < plan.files.size(); ++f) {
    const nlohmann::json& entry = listed[f];
    if (entry.value("name", std::string()) != plan.files[f]) {
      opened = error(Code::internal, "rank 0's checkpoint file {} is '{}', this rank plans '{}'", f,
                     entry.value("name", std::string()), plan.files[f]);
      break;
    }
    StatusOr<std::unique_ptr<SafetensorsPeerWriter>> w = SafetensorsPeerWriter::open(
        entry.value("temp", std::string()), plan.specs[f], entry.value("data_start", uint64_t(0)), /*checksummed=*/true);
    if (!w.is_ok()) opened = w.status();
    else files.push_back(std::move(*w));
  }
  Status agreed;
  STRATA_RETURN_IF_ERROR(ranks.agree(opened, agreed));
  // Where some rank cannot open them, rank 0 gathers the whole state and writes it.
  if (!agreed.is_ok()) files.clear();
  PieceWriter writer(plan, model.master_layout(),
                     [&](size_t file, size_t tensor, std::span<const std::byte> bytes, uint64_t offset) {
                       return files[file]->write(tensor, bytes, offset);
                     });
  Status mine = walk_partitioned_state(trainer, plan, writer, /*shard_wise=*/agreed.is_ok(), /*rank0=*/false);
  if (mine.is_ok() && agreed.is_ok() && hook) mine = hook("shard_written");
  std::vector<WireFragment> fragments;
  for (size_t f = 0; f < files.size(); ++f) {
    if (Status s = files[f]->finish(); mine.is_ok()) mine = s;
    for (const SafetensorsFragment& x : files[f]->fragments())
      fragments.push_back({.file = uint32_t(f), .tensor = x.tensor, .crc = x.crc, .offset = x.offset, .bytes = x.bytes});
  }
  if (!mine.is_ok()) fragments.clear();
  STRATA_RETURN_IF_ERROR(ranks.all_gather(encode_report(mine, fragments)).status());
  return mine;
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
        return error(Code::invalid_argument, "{}: optimizer tensor '{}' has {} bytes; this model's has {}: the state "
                     "was saved with another chunk layout (strata before 2026-11-28 put a chunk's fields 256 bytes "
                     "apart, now 256 elements, which moves them for a model whose widths are not multiples of 256); "
                     "resume it with the strata that wrote it, or start from its weights with --init-from {} (the "
                     "optimizer state then starts anew)",
                     opt.path(), b.name, t->bytes(), b.bytes, std::filesystem::path(opt.path()).parent_path().string());
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
