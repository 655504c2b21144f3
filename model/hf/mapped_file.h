// MappedFile: a whole file mapped read-only (mmap PROT_READ, MAP_PRIVATE) for the token data
// sets and safetensors checkpoints. Not a writer and not a cache: the bytes are the file's bytes
// as the page cache holds them. An empty file maps to an empty span (callers decide whether
// that is an error). Thread-safety: immutable after open, safe to read from any thread.
// Lifetime: the span is valid while the MappedFile lives (shared by its readers via shared_ptr).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "runtime/status.h"

namespace strata::model {

class MappedFile {
 public:
  // not_found / permission_denied / io_error (errno_status) naming the path; a directory is
  // invalid_argument.
  static StatusOr<std::shared_ptr<const MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  uint64_t size() const { return size_; }

 private:
  MappedFile(std::string path, const std::byte* data, uint64_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace strata::model
