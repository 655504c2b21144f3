// CheckpointStore: the run directory of `strata train --checkpoint-dir`, one directory per
// checkpoint (step-000120/ holding the pair of model/ckpt/checkpoint.h), made atomic and rotated:
// each is written as .tmp-step-000120.<pid>/, every file and the directory fsync'ed, renamed
// into place, the run directory fsync'ed, then the `latest` file (the name of the newest
// complete checkpoint) replaced by rename; then checkpoints beyond the newest `keep` are
// removed. A process killed at any moment leaves the previous checkpoint intact and `latest`
// naming a complete one; its leftovers are removed when the next run opens the store. Nothing
// is ever overwritten in place. Not the checkpoint's contents (checkpoint.h) and not thread-safe:
// one training thread saves.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/ckpt/checkpoint.h"
#include "runtime/status.h"

namespace strata::model {

inline constexpr std::string_view kLatestFile = "latest";
// The run directory's lock file (runtime/dir_lock.h): `strata train` holds it exclusively while it
// writes the directory, a resume shared while it reads a checkpoint; the store itself never
// touches it.
inline constexpr std::string_view kCheckpointLockFile = "lock";

// "step-000120": the checkpoint directory name of `step` (at least 6 digits).
std::string checkpoint_dir_name(uint64_t step);

// The complete checkpoint directories (step-N/ holding the optimizer file) of `run_dir`, by
// ascending step, as (step, path). Empty when there are none or run_dir does not exist.
std::vector<std::pair<uint64_t, std::string>> list_checkpoints(const std::string& run_dir);

// What --resume and `strata ckpt` accept, resolved to one checkpoint directory: a directory
// holding optimizer.safetensors is itself; a run directory is the checkpoint its `latest` names
// when that one is complete, else (a `latest` lost or damaged) its newest complete step-N/.
// not_found naming the path and what it holds otherwise.
StatusOr<std::string> resolve_checkpoint(const std::string& path);

struct CheckpointStoreOptions {
  uint32_t keep = 2;     // checkpoints kept (>= 1): the newest `keep` by step
  CheckpointHook hook;   // tests: called at each named point of a save (see save())
  uint64_t shard_bytes = kCheckpointShardBytes;  // weights above this are sharded (save_checkpoint)
};

class CheckpointStore {
 public:
  // Creates `run_dir` when missing; checks it is a directory this process can create, fsync and
  // remove files in (a probe file); removes the leftovers of killed saves whose process is gone
  // (.tmp-step-* directories, latest.tmp.<pid>, *.tmp.<pid> files of the older single-directory
  // layout), listed in removed(). Errors: invalid_argument for keep 0; the filesystem's, naming
  // the path, with "pass a writable --checkpoint-dir".
  static StatusOr<CheckpointStore> open(const std::string& run_dir, CheckpointStoreOptions options);

  // Writes the checkpoint of trainer.steps_done() as described above and returns its directory.
  // A checkpoint of the same step already there is replaced only after the new one is complete.
  // The hook is called at "begin", "model_written" (between the two files), "files_written",
  // "dir_synced", "renamed", "latest_written" and "rotated"; an error it returns fails the save
  // there. On an error before "renamed" (ENOSPC is no_space) the temporary directory is removed
  // and the previous checkpoints and `latest` are untouched; after it, the new checkpoint is
  // complete and resolve_checkpoint() finds it even without `latest`. Across ranks (rank 0's
  // store; the others call save_checkpoint_shard meanwhile), `ranks` is save_checkpoint's.
  StatusOr<std::string> save(const Transformer& model, Trainer& trainer, const CheckpointState& state,
                             CheckpointRanks* ranks = nullptr);

  const std::string& run_dir() const { return run_dir_; }
  const std::vector<std::string>& removed() const { return removed_; }

 private:
  CheckpointStore() = default;
  Status write_latest(const std::string& name);
  Status rotate(uint64_t newest_step);
  Status at(std::string_view point) const { return options_.hook ? options_.hook(point) : Status::ok(); }

  std::string run_dir_;
  CheckpointStoreOptions options_;
  std::vector<std::string> removed_;
};

// fsync of the directory `dir` (after a rename or an unlink in it); errno_status naming it.
Status fsync_directory(const std::string& dir);

}  // namespace strata::model
