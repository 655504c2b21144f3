// ComputeWaitClock: how long Stream::compute stands waiting for data another stream delivers (a
// paged chunk's copy to the device, ZeRO-3's gather ahead), timed by the stream itself: two host
// callbacks around each wait stamp its start and end, so the figure is the compute's idle time,
// not the host's. The TierManager's and the ShardedWeights' waits both go through it.
// Thread-safety: the owner queues waits and reads the totals; the callbacks run on the compute
// stream's thread, in stream order (hence atomics). Lifetime: shared (shared_ptr) with the queued
// callbacks, which may run after the owner is gone.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "runtime/backend.h"
#include "runtime/status.h"

namespace strata {

// A compute wait longer than this is a late arrival (TierStats::late_arrivals, ShardedWeightsStats::
// late): well above the two host callbacks' own cost, well below a chunk's compute.
inline constexpr double kLateArrivalSeconds = 100e-6;

// Nanoseconds of the steady clock.
int64_t steady_ns();

struct ComputeWaitClock {
  std::atomic<int64_t> start_ns{0};  // written and read only by compute-stream callbacks, in order
  std::atomic<uint64_t> total_ns{0};
  std::atomic<uint64_t> waits{0};
  std::atomic<uint64_t> late{0};  // waits over kLateArrivalSeconds

  double seconds() const { return double(total_ns.load()) * 1e-9; }
  void reset() {
    total_ns.store(0);
    waits.store(0);
    late.store(0);
  }
};

// Makes Stream::compute wait for `ready` (the host does not block) and times the wait into
// `clock`; a wait over kLateArrivalSeconds counts late unless `counted_late` (the caller counted
// it already). Returns the wait's error: then nothing orders the compute after `ready`, and the
// caller must (synchronize on it). A callback that cannot be queued leaves the wait untimed.
Status timed_compute_wait(Backend& backend, const Event& ready, const std::shared_ptr<ComputeWaitClock>& clock,
                          bool counted_late = false);

}  // namespace strata
