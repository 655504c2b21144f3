// Helpers shared by the offload tests: a scratch directory on the build's disk (not /tmp, which
// may be tmpfs without O_DIRECT), aligned buffers, random bytes, and the engines under test by
// name. Test code only.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "offload/io_engine.h"
#include "runtime/fs_probe.h"
#include "offload/mem_engine.h"
#include "offload/posix_engine.h"
#include "offload/uring_engine.h"

namespace strata::test {

class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    path_ = std::string(STRATA_BINARY_DIR) + "/test-scratch/offload-" + std::to_string(::getpid()) + "-" +
            std::to_string(counter++);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<std::byte[], FreeDeleter>;

inline AlignedBuffer aligned_buffer(size_t bytes, size_t alignment = 4096) {
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  return AlignedBuffer(static_cast<std::byte*>(std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded)));
}

inline void fill_random(std::byte* p, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i++) p[i] = static_cast<std::byte>(rng() & 0xFF);
}

// An NvmeStore probe that reports plenty of space and O_DIRECT, without probing the disk.
inline StatusOr<PathInfo> roomy_probe(const std::string& path) {
  PathInfo info;
  info.path = path;
  info.free_bytes = 1ull << 40;
  info.o_direct = true;
  return info;
}

// The value of `v`, failing the test (and returning a default) when it holds an error.
template <typename T>
T value_of(StatusOr<T> v) {
  EXPECT_TRUE(v.is_ok()) << v.status().to_string();
  return std::move(v).value();
}

// "io_uring", "posix" or "mem"; io_uring skips the test (with the reason) where it cannot start.
inline std::unique_ptr<IoEngine> make_engine(const std::string& name, IoShape shape) {
  if (name == "mem") return std::make_unique<MemEngine>();
  if (name == "posix") {
    auto e = PosixEngine::create(shape);
    EXPECT_TRUE(e.is_ok()) << e.status().to_string();
    return e.is_ok() ? std::move(*e) : nullptr;
  }
  auto e = UringEngine::create(UringEngineOptions{.shape = shape});
  if (!e.is_ok()) return nullptr;
  return std::move(*e);
}

}  // namespace strata::test
