// SplitWeights: the WeightSource (offload/chunk_source.h) of a partly resident run. Some chunks
// stay on the device for the whole run (a ResidentWeights over them: no PCIe but their updates'
// upload), the others page through a TierManager; each call goes to the source that holds its
// chunk. This is how a paged run uses the device budget left after its working set
// (--resident-layers, model/plan/placement.h: resident_layer_mask).
//
// Chunk indices are the model's (ParamLayout::chunks); each inner source numbers its own chunks
// 0.. in the model's order (the i-th resident chunk is the resident source's chunk i).
// Ownership: the two sources are borrowed and must outlive this. Thread-safety: one driving thread
// (WeightSource's contract). Sequences go to both sources (a resident source ignores them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "offload/chunk_route.h"
#include "offload/chunk_source.h"
#include "runtime/status.h"

namespace strata {

class SplitWeights final : public WeightSource {
 public:
  // `resident[c]`: chunk c is `resident_source`'s, else `paged_source`'s. invalid_argument when a
  // source's chunk count is not the count of chunks routed to it.
  static StatusOr<std::unique_ptr<SplitWeights>> create(std::vector<bool> resident, WeightSource& resident_source,
                                                        WeightSource& paged_source);

  size_t chunk_count() const override { return route_.size(); }
  uint64_t chunk_bytes(size_t c) const override;
  Status begin_sequence(std::string_view name) override;
  Status end_sequence() override;
  StatusOr<std::byte*> acquire(size_t c) override;
  StatusOr<std::byte*> acquire_for(size_t c, Stream reader) override;
  Status release(size_t c) override;
  StatusOr<std::byte*> update_buffer(size_t c) override;
  Status commit_update(size_t c) override;
  Status flush() override;
  void expect_update(size_t c, bool expected) override;
  Status read(size_t c, std::byte* host) override;

  bool resident(size_t c) const { return c < route_.size() && route_.marked(c); }

 private:
  SplitWeights(ChunkRoute route, WeightSource& resident, WeightSource& paged)
      : route_(std::move(route)), resident_(resident), paged_(paged) {}
  // The source of chunk c and its index there; out_of_range for a chunk past the model's.
  StatusOr<std::pair<WeightSource*, size_t>> find(size_t c, const char* what) const;

  const ChunkRoute route_;  // marked: resident
  WeightSource& resident_;
  WeightSource& paged_;
};

}  // namespace strata
