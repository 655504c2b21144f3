// StripeLayout: RAID-0 striping math for NvmeStore. The store's logical space is cut into stripe
// units dealt round-robin to the paths: unit k of the space lives on path k % n at file offset
// (k / n) * unit. map_range turns a logical range into the per-path file ranges to transfer.
// SpaceMap: first-fit allocation of that logical space, with coalescing on free.
// Pure arithmetic and bookkeeping; no I/O. Not thread-safe (the store holds its lock).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace strata {

struct StripeLayout {
  uint32_t paths = 1;
  uint64_t unit = 1ull << 20;  // bytes; a multiple of the store's alignment
};

struct StripeSegment {
  uint32_t path = 0;           // index into the store's paths
  uint64_t file_offset = 0;    // in that path's swap file
  uint64_t range_offset = 0;   // from the start of the mapped range (= offset into the buffer)
  uint64_t length = 0;
};

// The segments of [start, start + length), in range order. With one path the whole range is one
// segment; with n paths each segment lies within one stripe unit.
std::vector<StripeSegment> map_range(const StripeLayout& layout, uint64_t start, uint64_t length);

class SpaceMap {
 public:
  explicit SpaceMap(uint64_t capacity);
  // Start of a free range of `bytes` (first fit), or nullopt when no free range is big enough.
  std::optional<uint64_t> allocate(uint64_t bytes);
  // Returns [start, start + bytes) (must have come from allocate).
  void release(uint64_t start, uint64_t bytes);
  uint64_t capacity() const { return capacity_; }
  uint64_t free_bytes() const { return free_bytes_; }
  uint64_t largest_free() const;

 private:
  uint64_t capacity_;
  uint64_t free_bytes_;
  std::map<uint64_t, uint64_t> free_;  // start -> length, non-adjacent
};

}  // namespace strata
