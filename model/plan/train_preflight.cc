// `strata train`'s preflight checks (see train_preflight.h): statvfs for room, fs_probe for the
// NVMe paths.
#include "model/plan/train_preflight.h"

#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include "model/ckpt/checkpoint_store.h"
#include "model/net/size_bounds.h"
#include "runtime/fs_probe.h"
#include "runtime/units.h"

namespace strata::model {

uint64_t estimate_checkpoint_bytes(const model::ModelConfig& config, AdamStates states) {
  const uint64_t params = model::parameter_count(config);
  const uint64_t moments = states == AdamStates::f32 ? 8 * params : 2 * params + params / 8;
  const uint64_t bytes = 4 * params + moments;
  return bytes + bytes / 16 + (1ull << 20);  // chunk padding, headers and checksums
}

Status check_checkpoint_room(const std::string& dir, const CheckpointRotation& r, const std::string& model_name) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return errno_status(errno, fmt::format("statvfs of --checkpoint-dir {}", dir));
  const uint64_t available = uint64_t(fs.f_bavail) * uint64_t(fs.f_frsize ? fs.f_frsize : fs.f_bsize);
  const uint64_t needed = r.peak_new();
  if (available >= needed) return Status::ok();
  const uint64_t here = std::min(r.present, r.keep);
  std::string fewer;
  for (uint64_t keep = r.keep - 1; keep >= 1 && fewer.empty(); --keep) {
    const CheckpointRotation less{.one = r.one, .keep = keep, .present = r.present};
    if (less.peak_new() <= available)
      fewer = fmt::format(", or pass --keep-checkpoints {} (then {})", keep, format_size(less.peak_new()));
  }
  return error(Code::no_space,
               "--checkpoint-dir {} has {} available, but its rotation needs about {} at its peak: "
               "--keep-checkpoints {} checkpoints of {} plus the one being written, about {} each{}: free space "
               "there or pass a --checkpoint-dir on a larger disk{}",
               dir, format_size(available), format_size(needed), r.keep, model_name, format_size(r.one),
               here > 0 ? fmt::format(" ({} of them here already)", here) : "", fewer);
}

StatusOr<std::optional<DirLock>> lock_checkpoint_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec)
      return error(code_from_errno(ec.value()), "--checkpoint-dir {} cannot be created ({}); pass a writable "
                   "--checkpoint-dir", dir, ec.message());
    // The new directory's entry must survive a power cut (CheckpointStore::open does not create it now).
    const fs::path parent = fs::absolute(dir, ec).parent_path();
    STRATA_RETURN_IF_ERROR(model::fsync_directory(parent.empty() ? std::string(".") : parent.string()));
  }
  if (!fs::is_directory(dir, ec))
    return error(Code::invalid_argument, "--checkpoint-dir {} is not a directory (a file of that name exists); pass "
                 "a writable --checkpoint-dir", dir);
  StatusOr<DirLock> lock = DirLock::acquire(dir, model::kCheckpointLockFile, LockMode::exclusive);
  if (lock.is_ok()) return std::optional<DirLock>(std::move(*lock));
  if (lock.status().code() == Code::failed_precondition) {
    spdlog::warn("--checkpoint-dir {}: {}: nothing keeps a second run from writing it while this one does",
                 dir, lock.status().message());
    return std::optional<DirLock>();
  }
  if (lock.status().code() != Code::unavailable) return lock.status();
  return error(Code::unavailable,
               "--checkpoint-dir {} is in use by another run: {}. Two runs writing one directory delete each "
               "other's checkpoints as they rotate them: wait for that run to end (or stop it), or pass another "
               "--checkpoint-dir",
               dir, lock.status().message());
}

StatusOr<std::optional<DirLock>> lock_resume_source(const std::string& resume, const std::string& resolved) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string run_dir;
  if (!fs::equivalent(resume, resolved, ec)) {
    run_dir = resume;  // a run directory, resolved to its latest checkpoint
  } else {
    const fs::path parent = fs::absolute(resolved, ec).parent_path();
    if (fs::exists(parent / model::kLatestFile, ec) || fs::exists(parent / model::kCheckpointLockFile, ec))
      run_dir = parent.string();
  }
  if (run_dir.empty()) return std::optional<DirLock>();
  const bool writable = ::access(run_dir.c_str(), W_OK) == 0;
  if (!writable && !fs::exists(fs::path(run_dir) / model::kCheckpointLockFile, ec))
    return std::optional<DirLock>();  // read-only and unlocked: no run writes there
  StatusOr<DirLock> lock = DirLock::acquire(run_dir, model::kCheckpointLockFile, LockMode::shared);
  if (lock.is_ok()) return std::optional<DirLock>(std::move(*lock));
  if (lock.status().code() == Code::failed_precondition) return std::optional<DirLock>();
  if (lock.status().code() != Code::unavailable) return lock.status();
  return error(Code::unavailable,
               "--resume {}: {}. A live run is writing that directory, and its rotation may remove {} while this "
               "run reads it: wait for that run to end (its last checkpoint is then the one to resume), or resume "
               "from a copy of the checkpoint",
               resume, lock.status().message(), resolved);
}

Status check_size_fits_machine(const Config& config, const model::TrainOptions& o, const model::ModelConfig& model,
                               MachineFor purpose) {
  if (model::cheap_to_plan(model::size_floor(model, o), o)) return Status::ok();
  STRATA_ASSIGN_OR_RETURN(const Machine machine, describe_budgets(config, purpose));
  return model::check_size_floor(model, o, machine.hardware, {machine.gpu_from, machine.cpu_from, machine.nvme_from},
                                 machine.described ? "the machine described" : "this machine");
}

Status check_nvme_paths(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    StatusOr<PathInfo> info = probe_path(p);
    if (!info.is_ok())
      return Status(info.status().code(), fmt::format("--nvme-path {}: {}", p, info.status().message()));
    if (!info->o_direct)
      return error(Code::invalid_argument,
                   "--nvme-path {} ({}) does not take O_DIRECT ({}); pass a directory on a local disk "
                   "(ext4, xfs) for swap files",
                   p, info->fs_type, info->o_direct_reason);
  }
  return Status::ok();
}

std::optional<uint64_t> mem_available() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("MemAvailable:")) continue;
    std::istringstream fields(line.substr(13));
    uint64_t kib = 0;
    if (fields >> kib) return kib * 1024;
  }
  return std::nullopt;
}

HostMemory this_host_memory() {
  HostMemory host{.available = mem_available(), .memlock = std::nullopt};
  rlimit memlock{};
  if (::getrlimit(RLIMIT_MEMLOCK, &memlock) == 0 && memlock.rlim_cur != RLIM_INFINITY) host.memlock = memlock.rlim_cur;
  return host;
}

StatusOr<std::vector<std::string>> check_host_memory(const model::ModelConfig& config, AdamStates states,
                                                     bool optimizer_on_device, bool states_on_nvme,
                                                     uint64_t cpu_mem, const HostMemory& host) {
  std::vector<std::string> warnings;
  if (!host.available) return warnings;
  const uint64_t available = *host.available;
  const uint64_t params = model::parameter_count(config);
  const uint64_t state_bytes = optimizer_on_device || states_on_nvme ? 0 : params * (states == AdamStates::f32 ? 12 : 6);
  if (state_bytes > available)
    return error(Code::out_of_memory,
                 "{} ({} parameters) needs at least {} of host memory for its fp32 master weights and Adam moments, "
                 "but {} is available: pass --offload-optimizer nvme --nvme-path DIR to stream them from NVMe, or "
                 "train a smaller --preset (or --n-layer / --dim), or free memory",
                 config.name, params, format_size(state_bytes), format_size(available));
  if (cpu_mem > available)
    return error(Code::out_of_memory,
                 "--cpu-mem {} is more than the {} of memory available on this machine; pass --cpu-mem {} or less "
                 "(or auto)",
                 format_size(cpu_mem), format_size(available), format_size(available));
  if (cpu_mem > 0 && host.memlock && cpu_mem > *host.memlock)
    warnings.push_back(fmt::format("--cpu-mem {} is above the locked-memory limit of {} (ulimit -l): memory past it "
                                   "is pageable, not pinned; raise `ulimit -l` for full-speed copies",
                                   format_size(cpu_mem), format_size(*host.memlock)));
  return warnings;
}

StatusOr<std::vector<std::string>> check_host_memory(const model::ModelConfig& config, AdamStates states,
                                                     bool optimizer_on_device, bool states_on_nvme,
                                                     uint64_t cpu_mem) {
  return check_host_memory(config, states, optimizer_on_device, states_on_nvme, cpu_mem, this_host_memory());
}

}  // namespace strata::model
