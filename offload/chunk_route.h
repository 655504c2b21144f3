// ChunkRoute: a model's chunks divided between two owners by a mask -- the resident and the paged
// weight sources of a partly resident run (split_weights.h), the device and the host gradient sinks
// of a split update (split_grads.h) -- each owner numbering its own chunks 0.. in the model's order
// (the i-th chunk the mask marks is the marked owner's chunk i).
// Thread-safety: immutable after construction. Value type.
#pragma once

#include <cstddef>
#include <vector>

namespace strata {

class ChunkRoute {
 public:
  ChunkRoute() = default;
  explicit ChunkRoute(const std::vector<bool>& marked) {
    for (bool m : marked) route_.push_back({.marked = m, .index = counts_[m]++});
  }
  size_t size() const { return route_.size(); }
  // Chunk c (< size()) belongs to the marked owner.
  bool marked(size_t c) const { return route_[c].marked; }
  // Chunk c's index among its owner's chunks.
  size_t index(size_t c) const { return route_[c].index; }
  // The chunks of the marked owner (true) or of the other (false).
  size_t count(bool marked) const { return counts_[marked]; }

 private:
  struct Route {
    bool marked = false;
    size_t index = 0;
  };
  std::vector<Route> route_;
  size_t counts_[2] = {0, 0};  // unmarked, marked
};

}  // namespace strata
