// RunDir: this run's private directory under one NVMe path, "<path>/strata-run-<pid>-<n>"
// (mode 0700), holding a `lock` file locked (flock) for the life of the run and the run's swap
// files. Destruction removes the files it knows by name (lock, swap*.bin) and the directory. A
// crashed run leaves its directory behind with nobody holding the lock: find_stale_runs lists such
// directories and remove_stale_runs deletes them. Not a general temp-dir facility.
// Thread-safety: a RunDir is used by one owner; the free functions are safe to call concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace strata {

inline constexpr std::string_view kRunDirPrefix = "strata-run-";

class RunDir {
 public:
  // Creates and locks a new run directory under `parent` (which must exist).
  static StatusOr<std::unique_ptr<RunDir>> create(const std::string& parent);
  ~RunDir();

  const std::string& path() const { return path_; }
  // "<dir>/<name>"; names must match swap*.bin to be removed with the directory.
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  RunDir(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  std::string path_;
  int lock_fd_ = -1;
};

// What a run directory under an NVMe path is: live (a run holds its lock), starting (no lock
// file, or an empty one, and younger than a minute: a run is creating it) or stale (left by a run
// that died: removable).
enum class RunDirState : uint8_t { live, starting, stale };
RunDirState run_dir_state(const std::string& dir);

struct StaleRun {
  std::string path;
  uint64_t bytes = 0;  // allocated on disk by its files
};

// Run directories under `parent` that no live run holds: the lock file is not locked, or is
// missing in a directory older than a minute (a run that died while starting).
StatusOr<std::vector<StaleRun>> find_stale_runs(const std::string& parent);
// Deletes the stale run directories under `parent` (only files named lock or swap*.bin; a
// directory with anything else in it is left, with a warning). Returns what was removed.
StatusOr<std::vector<StaleRun>> remove_stale_runs(const std::string& parent);

}  // namespace strata
