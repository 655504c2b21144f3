// Striping math and first-fit space map (see stripe_layout.h).
#include "offload/stripe_layout.h"

#include <algorithm>

namespace strata {

std::vector<StripeSegment> map_range(const StripeLayout& layout, uint64_t start, uint64_t length) {
  std::vector<StripeSegment> out;
  if (length == 0) return out;
  if (layout.paths <= 1) {
    out.push_back(StripeSegment{0, start, 0, length});
    return out;
  }
  const uint64_t u = layout.unit, n = layout.paths;
  for (uint64_t done = 0; done < length;) {
    uint64_t logical = start + done;
    uint64_t k = logical / u, within = logical % u;
    uint64_t len = std::min(u - within, length - done);
    out.push_back(StripeSegment{static_cast<uint32_t>(k % n), (k / n) * u + within, done, len});
    done += len;
  }
  return out;
}

SpaceMap::SpaceMap(uint64_t capacity) : capacity_(capacity), free_bytes_(capacity) {
  if (capacity > 0) free_[0] = capacity;
}

std::optional<uint64_t> SpaceMap::allocate(uint64_t bytes) {
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    uint64_t start = it->first, len = it->second;
    free_.erase(it);
    if (len > bytes) free_[start + bytes] = len - bytes;
    free_bytes_ -= bytes;
    return start;
  }
  return std::nullopt;
}

void SpaceMap::release(uint64_t start, uint64_t bytes) {
  free_bytes_ += bytes;
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + bytes) {  // join the following free range
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {  // join the preceding free range
      prev->second += bytes;
      return;
    }
  }
  free_[start] = bytes;
}

uint64_t SpaceMap::largest_free() const {
  uint64_t best = 0;
  for (const auto& [s, l] : free_) best = std::max(best, l);
  return best;
}

}  // namespace strata
