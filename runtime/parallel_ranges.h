// parallel_ranges: body(begin, end) over [0, n) in oneTBB ranges of at least `grain` items, run in
// whatever arena the caller is in (a ThreadPool's, or oneTBB's default), waiting for all of them.
// The hand-off of the ranges to oneTBB's workers and back is made visible to ThreadSanitizer
// (runtime/tsan_annotations.h), so a loop's writes and the caller's are ordered for it as they are
// for the hardware. Correct only for bodies whose results do not depend on how [0, n) is split.
// Not a scheduler; the one oneTBB loop of the CPU kernels, the widening of 16-bit arguments and
// the pinned pool's zero-fill.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "runtime/tsan_annotations.h"

namespace strata {

template <typename Index, typename Body>
void parallel_ranges(Index n, Index grain, const Body& body) {
  if (n <= 0) return;
  char handoff = 0;  // the address TSan orders the hand-offs through
  tsan_release(&handoff);
  tbb::parallel_for(tbb::blocked_range<Index>(0, n, grain > 0 ? grain : 1), [&](const tbb::blocked_range<Index>& r) {
    tsan_acquire(&handoff);
    body(r.begin(), r.end());
    tsan_release(&handoff);
  });
  tsan_acquire(&handoff);
}

}  // namespace strata
