// FileTable: the real files an OS-backed engine (io_uring, posix) has open -- descriptors, paths,
// whether O_DIRECT took -- plus the file operations that are plain syscalls (open, fallocate,
// size, close). FileIds are small slot numbers, reused after close, so io_uring can use them as
// its registered-file slots. Not an engine: it moves no bytes.
// Thread-safety: all methods are safe to call concurrently.
#pragma once

#include <string>
#include <vector>

#include "offload/io_engine.h"
#include "runtime/mutex.h"

namespace strata {

struct OpenFile {
  int fd = -1;
  std::string path;
  bool direct = false;
};

class FileTable {
 public:
  // `buffered_fallback`: where a filesystem refuses O_DIRECT (EINVAL, e.g. tmpfs), open the file
  // buffered with one warning instead of failing.
  explicit FileTable(bool buffered_fallback) : buffered_fallback_(buffered_fallback) {}
  ~FileTable();  // closes what is still open

  StatusOr<FileId> open(const std::string& path, const OpenOptions& options) EXCLUDES(mu_);
  // Removes the file from the table and returns its descriptor for the caller to close.
  StatusOr<int> take(FileId file) EXCLUDES(mu_);
  Status close(FileId file) EXCLUDES(mu_);
  StatusOr<OpenFile> get(FileId file) const EXCLUDES(mu_);
  Status allocate(FileId file, uint64_t offset, uint64_t length) const;
  StatusOr<uint64_t> size(FileId file) const;
  bool is_direct(FileId file) const;
  std::string path(FileId file) const;

 private:
  const bool buffered_fallback_;
  mutable Mutex mu_;
  std::vector<OpenFile> slots_ GUARDED_BY(mu_);  // fd == -1: free slot
};

}  // namespace strata
