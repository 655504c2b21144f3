// TraceRecorder: a timeline of what ran when, written as Chrome trace-event JSON (open it in
// https://ui.perfetto.dev or chrome://tracing). Each span is a complete ("X") event on a named
// track (compute, H2D, D2H, NVMe read, host accumulate, CPU Adam...); tracks become threads of one
// process "strata", numbered in first-use order. stream_span() brackets work queued on a backend
// stream with two host callbacks, so a span shows when the stream really ran it, not when it was
// queued. Not a profiler: spans are recorded only where strata asks, and kept in memory until
// write().
// Thread-safety: every method is safe to call concurrently (one mutex). Lifetime: the recorder
// must outlive every stream_span whose callbacks are still queued (synchronize the stream first).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/backend.h"
#include "runtime/mutex.h"
#include "runtime/status.h"

namespace strata {

// A small integer argument shown with a span ("bytes", "chunk", "step").
struct TraceArg {
  std::string key;
  int64_t value = 0;
};
using TraceArgs = std::vector<TraceArg>;

class TraceRecorder {
 public:
  TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // Microseconds since construction (steady clock): the time base of every span.
  double now_us() const;

  // Records a complete event [begin_us, end_us] named `name` on `track` (end before begin is
  // recorded as a zero-length span at begin). Names and keys may hold any characters: the JSON
  // writer escapes them.
  void span(std::string_view track, std::string_view name, double begin_us, double end_us,
            TraceArgs args = {}) EXCLUDES(mu_);

  // Queues on `stream` a host callback that stamps the begin, calls enqueue() (which must queue
  // the work to time on that same stream), then queues a host callback that stamps the end and
  // records the span. Returns enqueue()'s error (no span is recorded then) or a host_callback
  // error. The recorder must outlive the queued callbacks.
  Status stream_span(Backend& backend, Stream stream, std::string_view track, std::string_view name,
                     const std::function<Status()>& enqueue, TraceArgs args = {});

  // {"traceEvents":[...],"displayTimeUnit":"ms"}: process/thread name metadata first, then every
  // span in record order. Written to a temporary file beside `path`, then renamed over it, so a
  // reader never sees a partial file. Errors name the path.
  Status write(const std::string& path) const EXCLUDES(mu_);

  size_t span_count() const EXCLUDES(mu_);
  // [begin_us, end_us] of every span recorded so far on `track`, sorted by begin (none for a
  // track never used). Safe from any thread.
  std::vector<std::pair<double, double>> spans_on(std::string_view track) const EXCLUDES(mu_);
  // Track names in first-use order (tid = index + 1).
  std::vector<std::string> tracks() const EXCLUDES(mu_);

 private:
  struct Span {
    int tid;
    std::string name;
    double begin_us;
    double dur_us;
    TraceArgs args;
  };
  int tid_locked(std::string_view track) REQUIRES(mu_);

  const std::chrono::steady_clock::time_point start_;

  // State below is protected by mu_.
  mutable Mutex mu_;
  std::vector<std::string> tracks_ GUARDED_BY(mu_);  // index = tid - 1
  std::map<std::string, int, std::less<>> tids_ GUARDED_BY(mu_);
  std::vector<Span> spans_ GUARDED_BY(mu_);
};

}  // namespace strata
