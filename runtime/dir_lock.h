// DirLock: a lock file in a directory, held with flock(2) for as long as the DirLock lives, that
// says who holds it (pid, start time, command line), so a process refused the lock can name the
// holder. Exclusive for the one writer of a directory, shared for its readers; the last holder
// that can take the lock exclusively removes the file when it lets go, and a lock file left by a
// killed process (nobody holds its flock) is simply taken over. Used for `strata train`'s
// checkpoint directory. Not the swap directories' lock (offload/run_dir.h: a fresh directory per
// run that nobody else opens), and not a lock between threads of one process.
// Thread-safety: a DirLock has one owner; acquire and lock_holders are safe to call concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace strata {

enum class LockMode : uint8_t { exclusive, shared };

// One process holding a lock, as it wrote itself into the lock file.
struct LockHolder {
  int64_t pid = 0;
  int64_t started = 0;   // seconds since the epoch
  bool exclusive = true;
  std::string command;   // its command line, arguments joined by spaces
};

// "pid 1234 (strata train --checkpoint-dir runs/a ...), started 2026-11-24 10:31:07"
std::string describe_lock_holder(const LockHolder& holder);

class DirLock {
 public:
  // Takes the lock file `dir`/`name` (created when missing; `dir` must exist) in `mode`, without
  // waiting, and writes this process into it (a shared holder of a directory it cannot write
  // opens the file read-only and is not named in it). Errors: unavailable when another process holds it
  // in a conflicting mode, the message naming the file and each live holder
  // (describe_lock_holder); failed_precondition when the filesystem has no flock (some network
  // filesystems); the filesystem's (errno_status naming the path) otherwise.
  static StatusOr<DirLock> acquire(const std::string& dir, std::string_view name, LockMode mode);

  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&& other) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  // Lets go: an exclusive holder removes the file, a shared one when no other process holds it.
  ~DirLock();

  const std::string& path() const { return path_; }
  LockMode mode() const { return mode_; }

 private:
  DirLock(std::string path, int fd, LockMode mode) : path_(std::move(path)), fd_(fd), mode_(mode) {}
  void release();

  std::string path_;
  int fd_ = -1;
  LockMode mode_ = LockMode::exclusive;
};

// The live holders the lock file `path` names (each line one acquire; lines of processes that
// are gone are skipped). Empty when the file is missing or names nobody alive.
std::vector<LockHolder> lock_holders(const std::string& path);

}  // namespace strata
