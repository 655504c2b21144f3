// Prefetcher: records the chunk access order of each named sequence ("train", "eval") the first
// time it runs and replays it later, answering "which chunks come next, within this many bytes"
// (for prefetching) and "when is chunk c next used" (for eviction). A sequence that departs from
// its trace stops replaying and is recorded afresh; its order replaces the old trace at end().
// Pure bookkeeping: no backend, no memory, no I/O (the tier manager acts on its answers).
// Thread-safety: none; one thread (the one driving the model) calls it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace strata {

struct PrefetcherStats {
  uint64_t sequences_recorded = 0;  // sequences that ended recording a (new or changed) trace
  uint64_t sequences_replayed = 0;  // sequences that followed their trace from first to last access
  uint64_t mismatches = 0;          // replays that departed from their trace (early, late or a different chunk)
  uint64_t accesses = 0;            // on_access calls inside sequences
};

class Prefetcher {
 public:
  // next_use() of a chunk not used again in the trace, or when no trace is being replayed.
  static constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

  // Starts the sequence `name`: replays its trace if one was recorded, else records.
  // failed_precondition if a sequence is already open (sequences do not nest).
  Status begin(std::string_view name);
  // Ends the open sequence; a recorded (or changed) order becomes the name's trace.
  // failed_precondition if none is open.
  Status end();
  bool in_sequence() const { return open_; }

  // Chunk c is being accessed now. Outside a sequence: ignored.
  void on_access(size_t c);

  // True while the open sequence follows a recorded trace (every access so far matched it).
  bool replaying() const { return open_ && replaying_; }

  // The next distinct chunks of the trace after the current position, nearest first, excluding
  // the chunk of the current access: as many as fit in `window_bytes` together (at least one when
  // any remain, so a window smaller than one chunk still prefetches). `chunk_bytes[c]`: chunk c's
  // bytes. Empty unless replaying().
  std::vector<size_t> upcoming(uint64_t window_bytes, std::span<const uint64_t> chunk_bytes) const;

  // Accesses from now until chunk c is next used per the trace: 0 = it is the next access,
  // 1 = the one after, ...; kNever when it is not used again or nothing is being replayed.
  // The current access itself does not count (a chunk in use now has the distance of its next use).
  uint64_t next_use(size_t c) const;
  // next_use of every chunk 0..chunks-1 at once, into `out` (resized), in one pass over the trace
  // (next_use scans it for one chunk): for choosing among many chunks.
  void next_uses(size_t chunks, std::vector<uint64_t>& out) const;

  PrefetcherStats stats() const { return stats_; }
  // The recorded trace of `name` (chunk indices in access order), empty if none.
  const std::vector<size_t>& trace(std::string_view name) const;

 private:
  std::map<std::string, std::vector<size_t>, std::less<>> traces_;
  bool open_ = false;
  bool replaying_ = false;
  std::string name_;
  const std::vector<size_t>* replay_ = nullptr;  // the trace being replayed (in traces_)
  size_t pos_ = 0;                               // accesses matched so far (index of the next expected)
  std::vector<size_t> recording_;                // this sequence's order while recording
  PrefetcherStats stats_;
};

}  // namespace strata
