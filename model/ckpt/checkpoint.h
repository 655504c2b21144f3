// Training checkpoints of the trainer: a directory holding model.safetensors (the fp32
// master weights under their Hugging Face names and layouts -- GPT-2 Conv1D weights as (in, out) --
// so HF tools and load_hf_safetensors read it, whatever the working precision) and
// optimizer.safetensors (OptimizerBuffers, optimizer_buffers.h: fp32 or 8-bit Adam moments per chunk,
// with the step, the applied updates, the data loader position, the seed, the precision, the
// moment format, the batch shape and, for fp16, the loss scaler's state in the metadata). Each
// file records a CRC-32C per tensor in its metadata ("strata_crc32c") that verification checks.
// Beside them config.json (hf_config.h), so transformers' from_pretrained(dir) loads the weights.
// Each file is written atomically (temporary file, fsync, rename); the optimizer file is written
// last and both carry the step, so an interrupted save is detected on load. The run directory of
// rotated step-NNNNNN/ checkpoints is model/ckpt/checkpoint_store.h. Saves and loads stream: one walk
// through the trainer's optimizer state (pinned or NVMe-homed, a chunk at a time); a save holds
// one tensor's copy in memory, never the model's.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "model/ckpt/checkpoint_ranks.h"
#include "model/train/trainer.h"
#include "model/net/transformer.h"
#include "model/data/window_sampler.h"
#include "runtime/status.h"

namespace strata::model {

inline constexpr std::string_view kCheckpointModelFile = "model.safetensors";
inline constexpr std::string_view kCheckpointOptimizerFile = "optimizer.safetensors";
inline constexpr uint64_t kCheckpointShardBytes = 5'000'000'000;  // transformers' "5GB"

// What a run needs besides weights and moments to continue bit-identically. The data order is a
// pure function of (seed, loader position) and the LR schedule of the step, so this is all the
// random state there is.
struct CheckpointState {
  uint64_t step = 0;        // optimizer steps done
  LoaderPosition loader;    // the batch the next step reads first
  uint64_t seed = 0;
  std::string preset;       // the model preset, checked on load
  // The batch shape and precision the run trained with (0 / "" in checkpoints from before they
  // were recorded); a resume compares them with its own (check_resume_compatible).
  uint64_t micro_batch = 0;
  uint64_t seq = 0;
  uint64_t grad_accum = 0;
  std::string dtype;        // "fp32", "bf16", "fp16"
  // The chunking the moments were stored in (ModelConfig::vocab_tile, mlp_tiles; 0 whole, also
  // in checkpoints from before tiling): a resume must use the same.
  int64_t vocab_tile = 0;
  int64_t mlp_tiles = 0;
};

// Metadata key of the per-tensor checksums: a JSON object {"tensor name": "8 hex digits"}.
inline constexpr std::string_view kCrcMetadataKey = "strata_crc32c";

// Called with the name of each point of a save it reaches ("model_written"): the fault seam of
// the tests, which kill the process there or return an error (an injected ENOSPC) that the save
// then fails with as if the filesystem had. Empty: nothing is called.
using CheckpointHook = std::function<Status(std::string_view point)>;

// Writes `dir` (created if missing) from the trainer's masters and moments. The step
// stored is trainer.steps_done() (state.step is not read); loader, seed, preset and the batch
// shape come from `state`. Errors: the filesystem's (errno_status naming the path: no_space for
// ENOSPC, with the temporary file removed).
// The weights go to model.safetensors, or, above `shard_bytes`, to model-0000i-of-0000n.safetensors
// shards with model.safetensors.index.json (Hugging Face's layout and default size).
//
// Across ranks (`ranks` of more than one, on rank 0) with a partitioned optimizer state (each rank
// homing its shard of every chunk's masters and moments), the ranks write the files together:
// rank 0 creates them and sends their list; every other rank, in save_checkpoint_shard, writes
// its own shard's bytes at their offsets in them; the masters of the chunks that hold a tensor
// the HF file stores transposed (GPT-2's Conv1D weights: a shard is scattered columns there) are
// gathered to rank 0, which writes them; every rank reports the pieces it wrote with their
// CRC-32Cs, which rank 0 joins into each tensor's (kernels::crc32c_combine), and rank 0 commits.
// So no rank holds or receives the whole state (LLaMA: no rank gathers anything), and the files
// are byte for byte those one rank writes. Every rank must see the directory at the same path (a
// shared filesystem across nodes, as --resume across ranks needs too); where some rank cannot open
// the files, the save says so and gathers the whole state to rank 0 instead. An error on any rank
// fails the save on rank 0 (its temporary files removed), naming that rank; every exchange runs
// whatever failed before it, so no rank is left waiting. Without a partitioned state rank 0 writes
// everything and the others take no part.
Status save_checkpoint(const std::string& dir, const Transformer& model, Trainer& trainer,
                       const CheckpointState& state, const CheckpointHook& hook = {},
                       uint64_t shard_bytes = kCheckpointShardBytes, CheckpointRanks* ranks = nullptr);

// The other ranks' side of save_checkpoint across ranks: called by every rank but 0 while rank 0
// saves (with the same trainer configuration). Writes this rank's shard into rank 0's files as
// described above and returns this rank's error (rank 0 reports every rank's). `hook`, the tests'
// fault seam, is called at "shard_open" (an error there counts as the files not being visible)
// and "shard_written". A no-op returning ok without a partitioned state or across one rank.
Status save_checkpoint_shard(const Transformer& model, Trainer& trainer, CheckpointRanks& ranks,
                             const CheckpointHook& hook = {});

// What verify_checkpoint found: the state, the two files' metadata and, per tensor, its
// name, dtype, shape and checksum (as recorded; verified when `checksummed`).
struct CheckpointTensorInfo {
  std::string file;  // kCheckpointModelFile (or a model-0000i-of-0000n shard) or kCheckpointOptimizerFile
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  uint64_t bytes = 0;
  std::string crc32c;  // 8 hex digits; "" when the file records none
};
struct CheckpointReport {
  std::string dir;
  CheckpointState state;
  std::map<std::string, std::string> model_metadata, optimizer_metadata;
  std::vector<CheckpointTensorInfo> tensors;
  uint64_t bytes = 0;         // both files' sizes
  bool checksummed = false;   // both files record a CRC-32C per tensor (strata from 0.2 on)
};

// Everything a resume relies on, without a model: both files parse (SafetensorsFile::open's
// checks), carry strata metadata from the same step, every tensor's CRC-32C matches the recorded
// one, and every F32 tensor (weights, fp32 moments, 8-bit block scales) is finite.
// Errors: not_found naming a missing file; corruption naming the file, the tensor and what was
// wrong (checksum mismatch with both values, the first non-finite element's index, a step
// mismatch from an interrupted save), each ending with what to do. Files without checksums
// (older checkpoints) verify everything else; `checksummed` is then false.
StatusOr<CheckpointReport> verify_checkpoint(const std::string& dir);

// verify_checkpoint, then the state; invalid_argument when the preset is not `preset`.
StatusOr<CheckpointState> read_checkpoint_state(const std::string& dir, std::string_view preset);

// How a resume with `run` (this run's batch shape and precision) relates to the checkpoint's
// `saved`: invalid_argument (refused) for a different micro_batch or seq -- the saved data
// position counts batches of the saved shape, so the data order cannot carry over -- saying which
// flags to pass; otherwise the warnings to print (a different grad_accum or dtype: the run
// continues, but not bit-identically), empty when nothing differs. Unknown saved values (0, "")
// are not compared.
StatusOr<std::vector<std::string>> check_resume_compatible(const CheckpointState& saved, const CheckpointState& run,
                                                           std::string_view checkpoint);

// Loads the weights into `model` (before Trainer::create, which reads them as masters). Like
// load_checkpoint_optimizer it does not verify checksums again: call read_checkpoint_state (or
// verify_checkpoint) first, as `strata train --resume` does.
Status load_checkpoint_weights(const std::string& dir, Transformer& model);

// Restores the moments, the step and the loss scale into `trainer` (created on the checkpoint's
// weights). invalid_argument when the checkpoint's moment format (fp32 / 8-bit) is not the
// trainer's or a tensor's size differs; corruption when a moment tensor is missing.
Status load_checkpoint_optimizer(const std::string& dir, Trainer& trainer);

}  // namespace strata::model
