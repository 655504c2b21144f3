// Checks `strata train` makes before it opens data, allocates memory or trains a step, so a bad
// path, a full disk or an absurd size is refused at once rather than after hours of training (or
// after eating the machine): the model's size against the machine in closed form
// (model/net/size_bounds.h), the checkpoint directory's writer lock (runtime/dir_lock.h: one run
// writes a directory, and a resume reads no directory a live run is rotating) and room for its
// rotation of checkpoints (estimated from the model), each --nvme-path is an existing writable
// directory that takes O_DIRECT, and the host has the memory the optimizer state needs and
// --cpu-mem promises. Not the checkpoint store itself (model/ckpt/checkpoint_store.h opens the
// directory and probes that it is writable).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/net/model_config.h"
#include "model/train/train_options.h"
#include "offload/cpu_adam.h"
#include "runtime/config.h"
#include "runtime/dir_lock.h"
#include "runtime/status.h"
#include "model/plan/plan_machine.h"

namespace strata::model {

// Bytes of one checkpoint of `config`: fp32 weights, the Adam moments (fp32: 8 bytes per
// parameter; 8-bit: 2 plus the block scales) and headroom for padding and headers.
uint64_t estimate_checkpoint_bytes(const model::ModelConfig& config, AdamStates states);

// The checkpoint rotation of --checkpoint-dir at its peak: `keep` checkpoints (--keep-checkpoints)
// plus the one being written, of `one` bytes each (estimate_checkpoint_bytes), `present` of them
// (this run's, when it resumes in its own directory) already on the disk.
struct CheckpointRotation {
  uint64_t one = 0;
  uint64_t keep = 2;
  uint64_t present = 0;
  uint64_t peak_new() const { return (keep + 1 - std::min(present, keep)) * one; }  // bytes still to be written
};
// no_space when the filesystem of `dir` (which exists) has less available than the rotation's
// peak_new(), saying the amounts, the count, the model and what to do (a smaller
// --keep-checkpoints when that fits).
Status check_checkpoint_room(const std::string& dir, const CheckpointRotation& rotation, const std::string& model_name);

// The writer lock of --checkpoint-dir `dir` (created when missing, its parent fsync'ed), held for
// the run's life; nullopt, with a warning, on a filesystem without flock. unavailable when another
// process holds it: the message names the holder's pid, command and start time and what to do.
StatusOr<std::optional<DirLock>> lock_checkpoint_dir(const std::string& dir);
// A shared lock on the run directory `resume` (as given to --resume) resolves into (`resolved`,
// its checkpoint): the directory itself, or the parent of a step-N/ when that parent is a run
// directory (it holds `latest` or a lock). Held while the checkpoint is read, so no live run's
// rotation removes it meanwhile. nullopt when the checkpoint is in no run directory, the
// directory is read-only with no lock file (then no run writes it) or its filesystem has no
// flock. unavailable naming the writer when a live run writes it.
StatusOr<std::optional<DirLock>> lock_resume_source(const std::string& resume, const std::string& resolved);

// The closed-form size check of a run of `model` (model/net/size_bounds.h) on the machine `config`
// describes for `purpose` (its budgets: plan_machine.h), before any layout is built: out_of_memory
// with the numbers when no placement could hold it and the planner's own sizing of it would be
// large (model::cheap_to_plan); a smaller model that does not fit is left to the planner, whose
// report says as fast what would fit. describe_budgets' errors.
Status check_size_fits_machine(const Config& config, const model::TrainOptions& o, const model::ModelConfig& model,
                               MachineFor purpose);

// Each path must be an existing directory this user can write, whose filesystem takes O_DIRECT
// (a file, /proc, a read-only or missing directory are refused naming the path and the reason).
Status check_nvme_paths(const std::vector<std::string>& paths);

// MemAvailable of /proc/meminfo in bytes, or nullopt where it cannot be read.
std::optional<uint64_t> mem_available();

// What the host has, as the host memory check reads it: MemAvailable (nullopt: unreadable, then
// nothing is checked) and RLIMIT_MEMLOCK (nullopt: unlimited or unreadable).
struct HostMemory {
  std::optional<uint64_t> available;
  std::optional<uint64_t> memlock;
};
// This machine's (/proc/meminfo, getrlimit).
HostMemory this_host_memory();

// The host memory check: the fp32 master weights and Adam moments of `config` (a lower bound of
// what the run allocates on the host; not counted when `optimizer_on_device`, which keeps them
// beside the weights, nor when `states_on_nvme`, which streams them through a few buffers) and an
// explicit `cpu_mem` budget (0: none) must fit in `host.available`; out_of_memory saying both
// amounts otherwise. A budget above the memlock limit is allowed (the pinned pool falls back to
// pageable memory) and returned as a warning to print.
StatusOr<std::vector<std::string>> check_host_memory(const model::ModelConfig& config, AdamStates states,
                                                     bool optimizer_on_device, bool states_on_nvme,
                                                     uint64_t cpu_mem, const HostMemory& host);
// The same against this_host_memory().
StatusOr<std::vector<std::string>> check_host_memory(const model::ModelConfig& config, AdamStates states,
                                                     bool optimizer_on_device, bool states_on_nvme,
                                                     uint64_t cpu_mem);

}  // namespace strata::model
