// PinnedPool: page-locked host memory for fast, asynchronous device copies and io_uring fixed
// buffers. Memory comes from page-aligned mmap, locked by the CUDA driver (cudaHostRegister) when
// the CUDA backend is built and a device is visible, else by mlock, else (mlock refused) left
// pageable with one warning. It is reserved in slabs that are never returned to the OS before the
// pool dies, and freed blocks are reused by size, so a training step allocates nothing from the
// OS. A new slab's pages are faulted in by every core at once (oneTBB) before they are locked, and the pool
// knows which bytes are still as the OS gave them (zero), so a block asked for zeroed is written
// only when it was used before (PinnedFill::zero).
// Thread-safety: all methods are safe to call concurrently. Lifetime: blocks must be released (or
// their PinnedBuffer destroyed) before the pool is destroyed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/mutex.h"
#include "runtime/status.h"

namespace strata {

enum class PinnedKind : uint8_t { cuda_host, mlock, pageable };
std::string_view pinned_kind_name(PinnedKind kind);

struct PinnedPoolOptions {
  uint64_t capacity = 0;            // hard limit on reserved bytes; 0 = no limit
  uint64_t slab_bytes = 64ull << 20;  // granularity of reservations (a bigger request gets its own slab)
  bool allow_cuda = true;            // try the CUDA driver's registration first
  bool allow_mlock = true;           // then mmap + mlock; else pageable
  bool huge_pages = true;            // mmap'd slabs: 2 MiB-aligned and advised MADV_HUGEPAGE (fewer
                                     // segments per O_DIRECT transfer); false: plain 4 KiB pages
};

// What a block holds when acquire() returns it.
enum class PinnedFill : uint8_t {
  any,   // whatever was there (a reused block keeps its last user's bytes)
  zero,  // zeros: memory the OS gave zeroed and nobody used is not written again; a reused block
         // is zeroed on every core
};

struct PinnedPoolStats {
  PinnedKind kind = PinnedKind::pageable;
  uint64_t capacity = 0;   // 0 = unlimited
  uint64_t reserved = 0;   // bytes obtained from the OS (sum of slabs)
  uint64_t in_use = 0;
  uint64_t peak = 0;
  uint64_t acquires = 0;
  uint64_t reuses = 0;     // acquires served from a freed block of the same size
  size_t slabs = 0;
  double reserve_seconds = 0;  // in the OS and the driver reserving slabs (mapping, faulting in, locking)
  uint64_t zeroed_bytes = 0;   // written with zeros for PinnedFill::zero (the rest was zero already)
};

class PinnedPool;

// A move-only block of pinned memory that returns itself to its pool on destruction.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }  // the size asked for, rounded up to 4 KiB
  template <typename T>
  T* as() const { return reinterpret_cast<T*>(data_); }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  friend class PinnedPool;
  PinnedBuffer(PinnedPool* pool, std::byte* data, uint64_t size) : pool_(pool), data_(data), size_(size) {}
  PinnedPool* pool_ = nullptr;
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

class PinnedPool {
 public:
  static StatusOr<std::unique_ptr<PinnedPool>> create(const PinnedPoolOptions& options);
  ~PinnedPool();

  // A 4 KiB-aligned block of at least `bytes` (rounded up to 4 KiB), holding what `fill` says.
  // Over capacity: out_of_memory naming the request, the reserved bytes and the capacity.
  StatusOr<PinnedBuffer> acquire(uint64_t bytes, PinnedFill fill = PinnedFill::any) EXCLUDES(mu_);

  PinnedPoolStats stats() const EXCLUDES(mu_);
  // stats().reserved without the lock (which a slab's reservation holds for its whole time): for a
  // progress line on another thread.
  uint64_t reserved_bytes() const { return reserved_.load(std::memory_order_relaxed); }
  // The kind new slabs get: starts as the best kind allowed and available, and steps down
  // (cuda_host -> mlock -> pageable, with one warning) if the OS or driver refuses a slab.
  PinnedKind kind() const { return kind_.load(); }

  // The slabs reserved so far, in reservation order (stable addresses, for io_uring buffer
  // registration). `on_new_slab` (optional) is called, under the pool's lock, with the index and
  // span of every slab reserved from now on; it must not call back into the pool.
  std::vector<std::span<std::byte>> slabs() const EXCLUDES(mu_);
  void set_slab_listener(std::function<void(size_t index, std::span<std::byte> slab)> on_new_slab) EXCLUDES(mu_);
  // Index of the slab holding `p`, or -1.
  int slab_index(const void* p) const EXCLUDES(mu_);

 private:
  explicit PinnedPool(const PinnedPoolOptions& options, PinnedKind kind);
  friend class PinnedBuffer;
  void give_back(std::byte* data, uint64_t size) EXCLUDES(mu_);
  StatusOr<std::span<std::byte>> reserve_slab_locked(uint64_t bytes) REQUIRES(mu_);

  struct Slab {
    std::byte* base;
    uint64_t size;
    PinnedKind kind;
  };
  struct Tail {
    uint64_t size;
    bool zero;  // never handed out, and the OS gave it zeroed
  };
  // Constant after construction.
  const PinnedPoolOptions options_;

  std::atomic<PinnedKind> kind_;  // written under mu_, read without it
  std::atomic<uint64_t> reserved_{0};  // stats_.reserved, written under mu_, read without it

  // State below is protected by mu_.
  mutable Mutex mu_;
  std::vector<Slab> slabs_ GUARDED_BY(mu_);
  std::multimap<uint64_t, std::byte*> free_blocks_ GUARDED_BY(mu_);  // size -> block, exact-size reuse
  std::map<std::byte*, Tail> tail_free_ GUARDED_BY(mu_);              // unused tails of slabs: start -> tail
  std::function<void(size_t, std::span<std::byte>)> listener_ GUARDED_BY(mu_);
  PinnedPoolStats stats_ GUARDED_BY(mu_);
};

}  // namespace strata
