// Arena: a sub-allocator over one contiguous region of `capacity` bytes with a hard byte budget
// and a peak tracker. It hands out offsets; the owner (a Backend) adds its base pointer. Best-fit
// over a free list with coalescing; every block is `alignment`-aligned (256 B default, what cuBLAS
// and vector loads want). Not a general malloc: no growth, no per-thread caches.
// Thread-safety: all methods are safe to call concurrently (one mutex).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "runtime/mutex.h"
#include "runtime/status.h"

namespace strata {

struct ArenaStats {
  uint64_t capacity = 0;      // bytes the region holds (== budget)
  uint64_t in_use = 0;        // bytes handed out now, after alignment padding
  uint64_t peak = 0;          // highest in_use since creation or reset_peak()
  uint64_t largest_free = 0;  // the biggest request that would succeed now
  uint64_t allocations = 0;   // live blocks
};

class Arena {
 public:
  // `tier` names the memory in errors ("gpu", "cpu"). capacity > 0, alignment a power of two.
  Arena(std::string tier, uint64_t capacity, uint64_t alignment = 256);

  // Offset of a new block of at least `bytes` (rounded up to the alignment; 0 bytes gets one
  // aligned unit). Over budget or fragmented: out_of_memory naming the tier, the tag, the
  // request, the bytes in use, the budget and the largest free block. Never aborts.
  StatusOr<uint64_t> allocate(uint64_t bytes, std::string_view tag) EXCLUDES(mu_);

  // Returns a block by the offset allocate() gave. Unknown offsets are a bug: failed_precondition.
  Status release(uint64_t offset) EXCLUDES(mu_);

  // Size of the live block starting at `offset`, or 0 if there is none.
  uint64_t block_size(uint64_t offset) const EXCLUDES(mu_);
  // True if [offset, offset+bytes) lies inside one live block.
  bool contains(uint64_t offset, uint64_t bytes) const EXCLUDES(mu_);

  // For owners that map offsets to `base + offset` (the backends):
  // invalid_argument naming `what` unless [ptr, ptr+bytes) lies inside one live block.
  Status check_range(const void* base, const void* ptr, uint64_t bytes, std::string_view what) const;
  // allocate() as the pointer `base + offset`.
  StatusOr<void*> allocate_at(void* base, uint64_t bytes, std::string_view tag);
  // release() of the block at pointer `ptr`; failed_precondition if it is outside the region.
  Status release_at(const void* base, const void* ptr);

  ArenaStats stats() const EXCLUDES(mu_);
  void reset_peak() EXCLUDES(mu_);
  const std::string& tier() const { return tier_; }

 private:
  uint64_t largest_free_locked() const REQUIRES(mu_);

  // Constant after construction.
  const std::string tier_;
  const uint64_t capacity_;
  const uint64_t alignment_;

  // State below is protected by mu_.
  mutable Mutex mu_;
  std::map<uint64_t, uint64_t> free_ GUARDED_BY(mu_);  // offset -> size, coalesced
  std::map<uint64_t, uint64_t> live_ GUARDED_BY(mu_);  // offset -> size
  uint64_t in_use_ GUARDED_BY(mu_) = 0;
  uint64_t peak_ GUARDED_BY(mu_) = 0;
};

}  // namespace strata
