// `strata train`'s preflight checks (see train_preflight.h): statvfs for room, fs_probe for the
// NVMe paths.
#include "tools/strata/train_preflight.h"

#include <sys/resource.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/core.h>

#include "runtime/fs_probe.h"
#include "runtime/units.h"

namespace strata::cli {

uint64_t estimate_checkpoint_bytes(const model::ModelConfig& config, AdamStates states) {
  const uint64_t params = model::parameter_count(config);
  const uint64_t moments = states == AdamStates::f32 ? 8 * params : 2 * params + params / 8;
  const uint64_t bytes = 4 * params + moments;
  return bytes + bytes / 16 + (1ull << 20);  // chunk padding, headers and checksums
}

Status check_checkpoint_room(const std::string& dir, uint64_t needed, const std::string& model_name) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return errno_status(errno, fmt::format("statvfs of --checkpoint-dir {}", dir));
  const uint64_t available = uint64_t(fs.f_bavail) * uint64_t(fs.f_frsize ? fs.f_frsize : fs.f_bsize);
  if (available < needed)
    return error(Code::no_space,
                 "--checkpoint-dir {} has {} available but a checkpoint of {} needs about {}: free space there "
                 "or pass a --checkpoint-dir on a larger disk",
                 dir, format_size(available), model_name, format_size(needed));
  return Status::ok();
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

StatusOr<std::vector<std::string>> check_host_memory(const model::ModelConfig& config, AdamStates states,
                                                     bool optimizer_on_device, bool states_on_nvme,
                                                     uint64_t cpu_mem) {
  std::vector<std::string> warnings;
  const std::optional<uint64_t> available = mem_available();
  if (!available) return warnings;
  const uint64_t params = model::parameter_count(config);
  const uint64_t state_bytes = optimizer_on_device || states_on_nvme ? 0 : params * (states == AdamStates::f32 ? 12 : 6);
  if (state_bytes > *available)
    return error(Code::out_of_memory,
                 "{} ({} parameters) needs at least {} of host memory for its fp32 master weights and Adam moments, "
                 "but {} is available: pass --offload-optimizer nvme --nvme-path DIR to stream them from NVMe, or "
                 "train a smaller --preset (or --n-layer / --dim), or free memory",
                 config.name, params, format_size(state_bytes), format_size(*available));
  if (cpu_mem > *available)
    return error(Code::out_of_memory,
                 "--cpu-mem {} is more than the {} of memory available on this machine; pass --cpu-mem {} or less "
                 "(or auto)",
                 format_size(cpu_mem), format_size(*available), format_size(*available));
  rlimit memlock{};
  if (cpu_mem > 0 && ::getrlimit(RLIMIT_MEMLOCK, &memlock) == 0 && memlock.rlim_cur != RLIM_INFINITY &&
      cpu_mem > memlock.rlim_cur)
    warnings.push_back(fmt::format("--cpu-mem {} is above the locked-memory limit of {} (ulimit -l): memory past it "
                                   "is pageable, not pinned; raise `ulimit -l` for full-speed copies",
                                   format_size(cpu_mem), format_size(memlock.rlim_cur)));
  return warnings;
}

}  // namespace strata::cli
