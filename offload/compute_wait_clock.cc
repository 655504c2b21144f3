// ComputeWaitClock: the compute stream's waits, timed by its own callbacks (see compute_wait_clock.h).
#include "offload/compute_wait_clock.h"

#include <algorithm>
#include <chrono>

namespace strata {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Status timed_compute_wait(Backend& backend, const Event& ready, const std::shared_ptr<ComputeWaitClock>& clock,
                          bool counted_late) {
  const bool timed = backend.host_callback(Stream::compute, [clock] { clock->start_ns.store(steady_ns()); }).is_ok();
  STRATA_RETURN_IF_ERROR(backend.wait(Stream::compute, ready));
  if (timed)
    (void)backend.host_callback(Stream::compute, [clock, counted_late] {
      const auto waited = static_cast<uint64_t>(std::max<int64_t>(0, steady_ns() - clock->start_ns.load()));
      clock->total_ns.fetch_add(waited);
      clock->waits.fetch_add(1);
      if (!counted_late && static_cast<double>(waited) * 1e-9 > kLateArrivalSeconds) clock->late.fetch_add(1);
    });
  return Status::ok();
}

}  // namespace strata
