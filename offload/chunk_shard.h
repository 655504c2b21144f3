// ChunkShard: which elements of a chunk a rank homes when a scale-out run partitions every chunk's
// gradient sum and optimizer state over its ranks (ZeRO). The one definition, shared by the
// gradient sink (offload/device_grads.h), the device optimizer and the planner, so they agree to
// the element.
// A chunk of n elements has B = ceil(n / 4096) blocks of kernels::kSumSquaresBlock; each rank gets
// `stride` = ceil(B / ranks) blocks' elements, rank r the elements [r * stride, (r + 1) * stride)
// cut to [0, n) -- so the last ranks' shards may be shorter or empty. Block-aligned, so each
// rank's blocked sums of squares are exactly the one-rank norm's blocks, and a shard of a padded
// exchange buffer is `stride` elements on every rank (collectives move equal blocks).
// Pure arithmetic: no allocation, no threads.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/grad_accumulate.h"

namespace strata {

struct ChunkShard {
  uint64_t begin = 0;   // first element this rank homes
  uint64_t end = 0;     // one past its last (== begin: it homes none of this chunk)
  uint64_t stride = 0;  // every rank's padded shard length, a multiple of kSumSquaresBlock
  uint64_t elements() const { return end - begin; }
};

// Rank `rank` of `ranks` (ranks >= 1, 0 <= rank < ranks) of a chunk of `elements` elements.
inline ChunkShard chunk_shard(uint64_t elements, int ranks, int rank) {
  const uint64_t block = kernels::kSumSquaresBlock;
  const uint64_t blocks = (elements + block - 1) / block;
  const uint64_t stride = (blocks + uint64_t(ranks) - 1) / uint64_t(ranks) * block;
  const uint64_t begin = std::min(elements, uint64_t(rank) * stride);
  return {.begin = begin, .end = std::min(elements, begin + stride), .stride = stride};
}

// The padded shard's bytes of a chunk of `chunk_bytes` bytes in elements of `element_bytes`: every
// rank's `stride` elements (what one rank's slot of an exchange or a gather holds).
inline uint64_t shard_stride_bytes(uint64_t chunk_bytes, uint64_t element_bytes, int ranks) {
  return chunk_shard(chunk_bytes / element_bytes, ranks, 0).stride * element_bytes;
}

}  // namespace strata
