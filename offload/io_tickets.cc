// IoTickets implementation (see io_tickets.h).
#include "offload/io_tickets.h"

#include <utility>

namespace strata {

std::string_view io_op_name(IoOp op) { return op == IoOp::read ? "read" : "write"; }

Status IoEngine::run(const IoRequest& request) {
  STRATA_ASSIGN_OR_RETURN(IoTicket ticket, submit(request));
  return wait(ticket);
}

IoTicket IoTickets::open(uint32_t pieces, IoCallback done) {
  MutexLock lock(mu_);
  IoTicket t = next_++;
  Entry& e = entries_[t];
  e.pieces_left = pieces;
  e.done = std::move(done);
  return t;
}

void IoTickets::piece_done(IoTicket ticket, const Status& status) {
  IoCallback done;
  Status final_status;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(ticket);
    if (it == entries_.end()) return;  // cannot happen: engines report only open tickets
    Entry& e = it->second;
    if (!status.is_ok() && e.status.is_ok()) e.status = status;
    if (--e.pieces_left > 0) return;
    if (!e.done) {
      e.complete = true;
      cv_.notify_all();
      return;
    }
    done = std::move(e.done);
    final_status = e.status;
    entries_.erase(it);
  }
  done(final_status);
  MutexLock lock(mu_);
  cv_.notify_all();  // wait_idle() may be waiting for this entry to go
}

void IoTickets::forget(IoTicket ticket) {
  MutexLock lock(mu_);
  entries_.erase(ticket);
  cv_.notify_all();
}

bool IoTickets::failed(IoTicket ticket) const {
  MutexLock lock(mu_);
  auto it = entries_.find(ticket);
  return it != entries_.end() && !it->second.status.is_ok();
}

Status IoTickets::wait(IoTicket ticket) {
  MutexLock lock(mu_);
  auto it = entries_.find(ticket);
  if (it == entries_.end() || it->second.done)
    return error(Code::invalid_argument, "unknown I/O ticket {} (never submitted, or already waited for)", ticket);
  Entry& e = it->second;  // element references survive rehashing; iterators do not
  while (!e.complete) cv_.wait(mu_);
  Status s = e.status;
  entries_.erase(ticket);
  cv_.notify_all();
  return s;
}

void IoTickets::wait_idle() {
  MutexLock lock(mu_);
  while (!all_complete()) cv_.wait(mu_);
}

bool IoTickets::all_complete() const {
  for (const auto& [t, e] : entries_)
    if (!e.complete) return false;
  return true;
}

bool IoTickets::complete(IoTicket ticket) const {
  MutexLock lock(mu_);
  auto it = entries_.find(ticket);
  return it != entries_.end() && !it->second.done && it->second.complete;
}

size_t IoTickets::open_count() const {
  MutexLock lock(mu_);
  return entries_.size();
}

}  // namespace strata
