// Checks `strata train` makes before it opens data, allocates memory or trains a step, so a bad
// path or a full disk is refused at once rather than after hours of training: the checkpoint
// directory has room for a checkpoint (estimated from the model), each --nvme-path is an
// existing writable directory that takes O_DIRECT, and the host has the memory the optimizer
// state needs and --cpu-mem promises. Not the checkpoint store itself
// (model/checkpoint_store.h opens the directory and probes that it is writable).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "offload/cpu_adam.h"
#include "runtime/status.h"

namespace strata::cli {

// Bytes of one checkpoint of `config`: fp32 weights, the Adam moments (fp32: 8 bytes per
// parameter; 8-bit: 2 plus the block scales) and headroom for padding and headers.
uint64_t estimate_checkpoint_bytes(const model::ModelConfig& config, AdamStates states);

// no_space when the filesystem of `dir` (which exists) has fewer than `needed` bytes available,
// saying both amounts, the model and what to do.
Status check_checkpoint_room(const std::string& dir, uint64_t needed, const std::string& model_name);

// Each path must be an existing directory this user can write, whose filesystem takes O_DIRECT
// (a file, /proc, a read-only or missing directory are refused naming the path and the reason).
Status check_nvme_paths(const std::vector<std::string>& paths);

// MemAvailable of /proc/meminfo in bytes, or nullopt where it cannot be read.
std::optional<uint64_t> mem_available();

// The host memory check: the fp32 master weights and Adam moments of `config` (a lower bound of
// what the run allocates on the host; not counted when `optimizer_on_device`, which keeps them
// beside the weights, nor when `states_on_nvme`, which streams them through a few buffers) and an explicit `cpu_mem` budget (0: none) must fit in
// MemAvailable (/proc/meminfo); out_of_memory saying both amounts otherwise. A budget above
// RLIMIT_MEMLOCK is allowed (the pinned pool falls back to pageable memory) and returned as a
// warning to print.
StatusOr<std::vector<std::string>> check_host_memory(const model::ModelConfig& config, AdamStates states,
                                                     bool optimizer_on_device, bool states_on_nvme,
                                                     uint64_t cpu_mem);

}  // namespace strata::cli
