// Arena: best-fit sub-allocation of offsets inside one fixed region, with coalescing of freed
// neighbours and a peak tracker (contract in arena.h). It never touches the memory itself and
// never asks the OS for anything; the owning Backend maps offsets to pointers.
#include "runtime/arena.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>

#include "runtime/units.h"

namespace strata {
namespace {

uint64_t round_down(uint64_t value, uint64_t alignment) { return value & ~(alignment - 1); }

// What the user can change when `tier` runs out.
std::string budget_hint(const std::string& tier) {
  if (tier == "gpu") return "raise --gpu-mem or lower the batch/model size";
  return fmt::format("raise the {} memory budget or lower the batch/model size", tier);
}

}  // namespace

Arena::Arena(std::string tier, uint64_t capacity, uint64_t alignment)
    : tier_(std::move(tier)), capacity_(capacity), alignment_(alignment == 0 ? 1 : alignment) {
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

StatusOr<uint64_t> Arena::allocate(uint64_t bytes, std::string_view tag) {
  MutexLock lock(mu_);
  // Requests above the capacity are refused before rounding, so rounding cannot overflow.
  const uint64_t need =
      bytes > capacity_ ? bytes : std::max<uint64_t>(alignment_, (bytes + alignment_ - 1) & ~(alignment_ - 1));
  auto best = free_.end();
  if (need <= capacity_) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= need && (best == free_.end() || it->second < best->second)) {
        best = it;
        if (it->second == need) break;
      }
    }
  }
  if (best == free_.end()) {
    const uint64_t largest = largest_free_locked();
    const bool fragmented = need <= capacity_ - in_use_;
    return error(Code::out_of_memory,
                 "{} memory budget exceeded: '{}' needs {} but {} of the {} budget is in use (largest free "
                 "block {}{}); {}",
                 tier_, tag, format_size(bytes), format_size(in_use_), format_size(capacity_), format_size(largest),
                 fragmented ? ", the free memory is fragmented" : "", budget_hint(tier_));
  }
  const uint64_t offset = best->first;
  const uint64_t remaining = best->second - need;
  free_.erase(best);
  if (remaining > 0) free_.emplace(offset + need, remaining);
  live_.emplace(offset, need);
  in_use_ += need;
  peak_ = std::max(peak_, in_use_);
  return offset;
}

Status Arena::release(uint64_t offset) {
  MutexLock lock(mu_);
  auto live = live_.find(offset);
  if (live == live_.end()) {
    return error(Code::failed_precondition,
                 "{} arena: release of offset {} which is not a live block (released twice, or not from "
                 "this arena's allocate)",
                 tier_, offset);
  }
  uint64_t start = offset;
  uint64_t size = live->second;
  live_.erase(live);
  in_use_ -= size;
  // Coalesce with the free neighbour after, then the one before.
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(start, size);
  return Status::ok();
}

uint64_t Arena::block_size(uint64_t offset) const {
  MutexLock lock(mu_);
  auto it = live_.find(offset);
  return it == live_.end() ? 0 : it->second;
}

bool Arena::contains(uint64_t offset, uint64_t bytes) const {
  MutexLock lock(mu_);
  auto it = live_.upper_bound(offset);
  if (it == live_.begin()) return false;
  --it;
  const uint64_t inside = offset - it->first;  // offset >= it->first here
  return inside < it->second && bytes <= it->second - inside;
}

Status Arena::check_range(const void* base, const void* ptr, uint64_t bytes, std::string_view what) const {
  const auto b = reinterpret_cast<uintptr_t>(base);
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  if (p >= b && p - b < capacity_ && contains(p - b, bytes)) return Status::ok();
  return error(Code::invalid_argument,
               "{}: {} range [{}, +{} bytes) is not inside one live block of this backend's memory; "
               "allocate it with Backend::allocate and stay within the block",
               what, tier_, ptr, bytes);
}

StatusOr<void*> Arena::allocate_at(void* base, uint64_t bytes, std::string_view tag) {
  STRATA_ASSIGN_OR_RETURN(uint64_t offset, allocate(bytes, tag));
  return static_cast<void*>(static_cast<std::byte*>(base) + offset);
}

Status Arena::release_at(const void* base, const void* ptr) {
  const auto b = reinterpret_cast<uintptr_t>(base);
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  if (p < b || p - b >= capacity_) {
    return error(Code::failed_precondition, "{} is not {} memory of this backend (outside its {} region)", ptr,
                 tier_, format_size(capacity_));
  }
  return release(p - b);
}

ArenaStats Arena::stats() const {
  MutexLock lock(mu_);
  ArenaStats s;
  s.capacity = capacity_;
  s.in_use = in_use_;
  s.peak = peak_;
  s.largest_free = largest_free_locked();
  s.allocations = live_.size();
  return s;
}

void Arena::reset_peak() {
  MutexLock lock(mu_);
  peak_ = in_use_;
}

uint64_t Arena::largest_free_locked() const {
  uint64_t largest = 0;
  for (const auto& [offset, size] : free_) largest = std::max(largest, size);
  // Free blocks start aligned; only the region's tail can end unaligned.
  return round_down(largest, alignment_);
}

}  // namespace strata
