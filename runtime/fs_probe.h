// What a directory is, as offload needs it: its filesystem and free space, whether files there
// accept O_DIRECT (probed by writing and reading one aligned block of a temporary file), and the
// block device behind it (name, logical block size, rotational, model) from sysfs.
// Not a benchmark (that is `strata bench io`). Thread-safe: no shared state.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/status.h"

namespace strata {

struct PathInfo {
  std::string path;              // as given
  std::string fs_type;           // "ext4", "xfs", "tmpfs", "overlay", ... or "0x<magic>"
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;       // available to this user
  bool o_direct = false;         // an O_DIRECT write+read of one block worked
  std::string o_direct_reason;   // why not, when !o_direct
  std::string block_device;      // "nvme0n1", "vda", "" when none (tmpfs, overlay without one)
  uint32_t logical_block_size = 4096;  // from sysfs / BLKSSZGET; 4096 when unknown
  bool rotational = false;
  std::string device_model;      // sysfs model string, may be empty
  int numa_node = -1;            // the NUMA node of the device's PCI function (its sysfs numa_node,
                                 // the nearest one up the device path); -1 unknown or none
};

// `dir` must be an existing, writable directory: not_found / invalid_argument /
// permission_denied otherwise, naming the path. The O_DIRECT probe leaves no file behind.
StatusOr<PathInfo> probe_path(const std::string& dir);

// The O_DIRECT part of probe_path alone: creates a temporary file in `dir` (O_EXCL, unlinked at
// once), writes and reads back one `block_size`-aligned block with O_DIRECT. `reason` says which
// step failed and the errno text ("open with O_DIRECT: Invalid argument (errno 22)").
struct ODirectProbe {
  bool works = false;
  std::string reason;  // empty when works
};
ODirectProbe probe_o_direct(const std::string& dir, uint32_t block_size = 4096);

// Filesystem name for a statfs f_type magic ("ext4", "xfs", "tmpfs", ...); "0x<hex>" if unknown.
std::string filesystem_name(uint64_t magic);

}  // namespace strata
