// IoTickets: the completion bookkeeping every IoEngine shares. A request is opened with the number
// of pieces it was split into; each piece reports its status; when the last one has reported, the
// request is complete: its callback runs, or its ticket becomes ready for wait(). The first error
// of a request is the one kept. Not an engine: it moves no bytes.
// Thread-safety: all methods are safe to call concurrently. Callbacks run on the thread that
// reports the last piece, outside the table's lock.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "offload/io_engine.h"
#include "runtime/mutex.h"

namespace strata {

class IoTickets {
 public:
  // A new request of `pieces` (>= 1) pieces. With a callback, the ticket is internal (reported
  // to, never waited for).
  IoTicket open(uint32_t pieces, IoCallback done = nullptr) EXCLUDES(mu_);
  // Drops a ticket whose request never started (its submit failed after open()).
  void forget(IoTicket ticket) EXCLUDES(mu_);
  // One piece of `ticket` ended with `status`.
  void piece_done(IoTicket ticket, const Status& status) EXCLUDES(mu_);
  // True when a piece of `ticket` has already failed (engines skip its pieces not yet started).
  bool failed(IoTicket ticket) const EXCLUDES(mu_);
  // Blocks until `ticket` completes; returns its status and forgets it.
  Status wait(IoTicket ticket) EXCLUDES(mu_);
  // True once `ticket` has completed (wait() then returns at once); false while pieces are left,
  // for a ticket with a callback, or one unknown. Never blocks.
  bool complete(IoTicket ticket) const EXCLUDES(mu_);
  // Blocks until no request is open (used by engine destructors).
  void wait_idle() EXCLUDES(mu_);
  size_t open_count() const EXCLUDES(mu_);

 private:
  struct Entry {
    uint32_t pieces_left = 0;
    bool complete = false;
    Status status;
    IoCallback done;
  };
  bool all_complete() const REQUIRES(mu_);

  mutable Mutex mu_;
  CondVar cv_;  // an entry completed or went
  IoTicket next_ GUARDED_BY(mu_) = 1;
  std::unordered_map<IoTicket, Entry> entries_ GUARDED_BY(mu_);
};

}  // namespace strata
