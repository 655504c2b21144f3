// Loop helpers shared by the CPU ops (kernels/cpu/ops_*.cc): a oneTBB loop over index ranges and
// a column sum whose order per column is fixed. Internal to the kernels; not a scheduler (they run
// in whatever oneTBB arena the caller is in) and not a public op.
#pragma once

#include <cstdint>

#include "runtime/parallel_ranges.h"

namespace strata::kernels {

// Calls body(begin, end) over [0, n) in chunks of at least `grain` items, in parallel, and waits
// (runtime/parallel_ranges.h). Correct only for bodies whose results do not depend on how [0, n)
// is split.
template <typename Body>
void parallel_ranges(int64_t n, int64_t grain, const Body& body) {
  strata::parallel_ranges<int64_t>(n, grain, body);
}

// Channels per task when a reduction over rows is split by column: 64 floats is one 256-byte run
// per row, enough to stream well, small enough to spread C = 768 over a dozen tasks.
inline constexpr int64_t kColumnBlock = 64;

// dst (C) += sum over n of term(n, c), for every column c: each column summed in row order
// n = 0..N-1 into a local accumulator, then added to dst once, so a call adds exactly its own sum
// whatever dst held. term(n, c) must be a pure function.
template <typename Term>
void add_column_sums(float* dst, int64_t N, int64_t C, const Term& term) {
  parallel_ranges(C, kColumnBlock, [&](int64_t begin, int64_t end) {
    // A task's range may hold several blocks (the partitioner decides); one block at a time.
    for (int64_t c0 = begin; c0 < end; c0 += kColumnBlock) {
      const int64_t c1 = c0 + kColumnBlock < end ? c0 + kColumnBlock : end;
      float acc[kColumnBlock] = {};
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t c = c0; c < c1; ++c) acc[c - c0] += term(n, c);
      }
      for (int64_t c = c0; c < c1; ++c) dst[c] += acc[c - c0];
    }
  });
}

}  // namespace strata::kernels
