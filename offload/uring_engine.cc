// UringEngine implementation (see uring_engine.h).
#include "offload/uring_engine.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>

#include "offload/posix_engine.h"
#include "runtime/log.h"

namespace strata {
namespace {

constexpr uint64_t kWakeTag = 1;       // user_data of the NOP that wakes the reaper
constexpr uint64_t kFirstSlotTag = 2;  // user_data of slot i is kFirstSlotTag + i
constexpr uint32_t kWakeSlot = UINT32_MAX;
constexpr uint64_t kMaxBufferSlotBytes = 1ull << 30;  // the kernel refuses larger registered buffers
constexpr auto kStallPause = std::chrono::microseconds(100);
constexpr long long kReapTimeoutNs = 100'000'000;  // the reaper looks at stopping_ at least this often

bool is_transient(int rc) { return rc == -EINTR || rc == -EAGAIN || rc == -EBUSY; }

}  // namespace

UringEngine::UringEngine(const UringEngineOptions& options)
    : options_(options), calls_(options.calls ? options.calls : std::make_shared<UringCalls>()) {
  slots_.resize(options.shape.queue_depth);
  for (uint32_t i = options.shape.queue_depth; i > 0; i--) free_slots_.push_back(i - 1);
}

StatusOr<std::unique_ptr<UringEngine>> UringEngine::create(const UringEngineOptions& options) {
  const IoShape& shape = options.shape;
  if (shape.block_bytes == 0 || shape.block_bytes > kMaxBufferSlotBytes || shape.queue_depth == 0 ||
      shape.queue_depth > 4096)
    return error(Code::invalid_argument,
                 "io_uring engine needs a block size in [1 B, 1 GiB] and a queue depth in [1, 4096] (got {} and {})",
                 shape.block_bytes, shape.queue_depth);
  std::unique_ptr<UringEngine> e(new UringEngine(options));
  unsigned entries = std::max<unsigned>(8, shape.queue_depth + 1);  // +1: the wake-up NOP
  int rc = io_uring_queue_init(entries, &e->ring_, 0);
  if (rc < 0) return errno_status(rc, "io_uring_queue_init").with_context("io_uring is unavailable");
  e->ring_ready_ = true;
  e->features_.sq_entries = e->ring_.sq.ring_entries;

  if (options.file_slots > 0 && io_uring_register_files_sparse(&e->ring_, options.file_slots) == 0)
    e->features_.fixed_files = true;
  if (options.buffer_slots > 0 && io_uring_register_buffers_sparse(&e->ring_, options.buffer_slots) == 0) {
    e->features_.fixed_buffers = true;
    MutexLock lock(e->mu_);  // no other thread yet; taken so the analysis sees buffer_slots_ guarded
    e->buffer_slots_.resize(options.buffer_slots);
  }
  spdlog::debug("io_uring engine: {} SQ entries, queue depth {}, block {} bytes, fixed files {}, fixed buffers {}",
                e->features_.sq_entries, shape.queue_depth, shape.block_bytes, e->features_.fixed_files,
                e->features_.fixed_buffers);
  e->reaper_ = std::thread([p = e.get()] { p->reap(); });
  return e;
}

UringEngine::~UringEngine() {
  if (!ring_ready_) return;
  tickets_.wait_idle();
  std::vector<IoPieceEnd> ends;  // stays empty: no request is open
  {
    MutexLock lock(mu_);
    stopping_ = true;
    // Wake the reaper now rather than at its next timeout; a stopped ring is not touched again.
    if (stopped_.is_ok()) {
      if (io_uring_sqe* sqe = io_uring_get_sqe(&ring_); sqe != nullptr) {
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data64(sqe, kWakeTag);
        unsubmitted_.push_back(kWakeSlot);
        submit_locked(ends);
      }
    }
  }
  if (reaper_.joinable()) reaper_.join();
  io_uring_queue_exit(&ring_);
}

StatusOr<FileId> UringEngine::open(const std::string& path, const OpenOptions& options) {
  STRATA_ASSIGN_OR_RETURN(FileId id, files_.open(path, options));
  if (features_.fixed_files && id < options_.file_slots) {
    STRATA_ASSIGN_OR_RETURN(OpenFile f, files_.get(id));
    int rc = io_uring_register_files_update(&ring_, id, &f.fd, 1);
    if (rc < 0) {
      Status s = errno_status(rc, "register " + path + " with io_uring");
      (void)files_.close(id);
      return s;
    }
  }
  return id;
}

Status UringEngine::close(FileId file) {
  std::string p = files_.path(file);
  STRATA_ASSIGN_OR_RETURN(int fd, files_.take(file));
  if (features_.fixed_files && file < options_.file_slots) {
    int none = -1;
    int rc = io_uring_register_files_update(&ring_, file, &none, 1);
    if (rc < 0) spdlog::warn("io_uring: could not drop {} from the registered files: {}", p, errno_status(rc, "update").message());
  }
  if (::close(fd) != 0) return errno_status(errno, "close " + p);
  return Status();
}

Status UringEngine::register_memory(std::span<std::byte> memory) {
  if (!features_.fixed_buffers || memory.empty()) return Status();
  MutexLock lock(mu_);
  for (uint64_t done = 0; done < memory.size(); done += kMaxBufferSlotBytes) {
    uint64_t len = std::min<uint64_t>(kMaxBufferSlotBytes, memory.size() - done);
    std::byte* base = memory.data() + done;
    if (auto it = slot_by_base_.find(base); it != slot_by_base_.end() && buffer_slots_[it->second].size == len)
      continue;  // registered already
    uint32_t slot = 0;
    while (slot < buffer_slots_.size() && buffer_slots_[slot].base != nullptr) slot++;
    if (slot == buffer_slots_.size())
      return error(Code::out_of_memory, "io_uring: all {} registered-buffer slots are in use; {} bytes at {} stay "
                   "unregistered (plain reads/writes)", buffer_slots_.size(), len, static_cast<void*>(base));
    iovec iov{base, len};
    __u64 tag = 0;
    int rc = io_uring_register_buffers_update_tag(&ring_, slot, &iov, &tag, 1);
    if (rc < 0)
      return errno_status(rc, fmt::format("io_uring: register {} bytes of buffer memory (raise `ulimit -l`?)", len));
    buffer_slots_[slot] = BufferSlot{base, len};
    slot_by_base_[base] = slot;
  }
  return Status();
}

size_t UringEngine::registered_regions() {
  MutexLock lock(mu_);
  return slot_by_base_.size();
}

Status UringEngine::unregister_memory(std::span<std::byte> memory) {
  if (!features_.fixed_buffers) return Status();
  MutexLock lock(mu_);
  std::byte* end = memory.data() + memory.size();
  for (auto it = slot_by_base_.lower_bound(memory.data()); it != slot_by_base_.end() && it->first < end;) {
    uint32_t slot = it->second;
    iovec iov{nullptr, 0};
    __u64 tag = 0;
    int rc = io_uring_register_buffers_update_tag(&ring_, slot, &iov, &tag, 1);
    if (rc < 0) return errno_status(rc, "io_uring: unregister buffer memory");
    buffer_slots_[slot] = BufferSlot{};
    it = slot_by_base_.erase(it);
  }
  return Status();
}

Status UringEngine::enqueue(const IoRequest& request, IoTicket ticket) {
  std::vector<IoPieceEnd> ends;
  {
    MutexLock lock(mu_);
    if (!stopped_.is_ok()) return stopped_;
    split_request(request, ticket, options_.shape.block_bytes, pending_);
    pump_locked(ends);
  }
  for (const IoPieceEnd& p : ends) tickets_.piece_done(p.ticket, p.status);
  return Status();
}

StatusOr<IoTicket> UringEngine::submit(const IoRequest& request) {
  STRATA_RETURN_IF_ERROR(check_request(request));
  STRATA_RETURN_IF_ERROR(files_.get(request.file).status());
  IoTicket t = tickets_.open(piece_count(request.length, options_.shape.block_bytes));
  if (Status s = enqueue(request, t); !s.is_ok()) {
    tickets_.forget(t);
    return s;
  }
  return t;
}

Status UringEngine::submit(const IoRequest& request, IoCallback done) {
  STRATA_RETURN_IF_ERROR(check_request(request));
  STRATA_RETURN_IF_ERROR(files_.get(request.file).status());
  IoTicket t = tickets_.open(piece_count(request.length, options_.shape.block_bytes), std::move(done));
  if (Status s = enqueue(request, t); !s.is_ok()) {
    tickets_.forget(t);  // `done` is not called: nothing was started
    return s;
  }
  return Status();
}

void UringEngine::prep_locked(io_uring_sqe* sqe, uint32_t slot, const OpenFile& file) {
  const IoPiece& piece = slots_[slot];
  bool fixed_file = features_.fixed_files && piece.file < options_.file_slots;
  int fd = fixed_file ? static_cast<int>(piece.file) : file.fd;
  int buf_index = -1;
  if (!slot_by_base_.empty()) {
    auto it = slot_by_base_.upper_bound(piece.buffer);
    if (it != slot_by_base_.begin()) {
      --it;
      const BufferSlot& s = buffer_slots_[it->second];
      if (piece.buffer + piece.length <= s.base + s.size) buf_index = static_cast<int>(it->second);
    }
  }
  auto len = static_cast<unsigned>(piece.length);
  if (piece.op == IoOp::read) {
    if (buf_index >= 0) io_uring_prep_read_fixed(sqe, fd, piece.buffer, len, piece.offset, buf_index);
    else io_uring_prep_read(sqe, fd, piece.buffer, len, piece.offset);
  } else {
    if (buf_index >= 0) io_uring_prep_write_fixed(sqe, fd, piece.buffer, len, piece.offset, buf_index);
    else io_uring_prep_write(sqe, fd, piece.buffer, len, piece.offset);
  }
  if (fixed_file) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data64(sqe, kFirstSlotTag + slot);
}

void UringEngine::pump_locked(std::vector<IoPieceEnd>& ends) {
  while (stopped_.is_ok() && !free_slots_.empty() && !pending_.empty()) {
    IoPiece& next = pending_.front();
    auto file = files_.get(next.file);
    if (tickets_.failed(next.ticket) || !file.is_ok()) {  // the request's outcome is known already
      ends.push_back({next.ticket, file.status()});
      pending_.pop_front();
      continue;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) break;  // every entry is taken until the kernel consumes them
    uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    slots_[slot] = next;
    prep_locked(sqe, slot, *file);
    unsubmitted_.push_back(slot);
    pending_.pop_front();
    in_flight_++;
  }
  if (!unsubmitted_.empty()) submit_locked(ends);
}

void UringEngine::submit_locked(std::vector<IoPieceEnd>& ends) {
  uint32_t stalls = 0;
  while (!unsubmitted_.empty() && stopped_.is_ok()) {
    const size_t queued = unsubmitted_.size();
    int rc = calls_->submit(&ring_);
    if (rc > 0) {  // the kernel takes entries in queue order; the rest go with the next call
      size_t taken = std::min<size_t>(static_cast<size_t>(rc), queued);
      unsubmitted_.erase(unsubmitted_.begin(), unsubmitted_.begin() + static_cast<std::ptrdiff_t>(taken));
      stalls = 0;
      continue;
    }
    if ((rc == 0 || is_transient(rc)) && ++stalls <= kUringMaxStalls) {
      std::this_thread::sleep_for(kStallPause);
      continue;
    }
    Status cause = rc < 0 ? errno_status(rc, "io_uring_submit")
                          : error(Code::io_error, "io_uring_submit took none of {} queued entries", queued);
    stop_locked(cause.with_context(fmt::format(
                    "the io_uring engine stopped: it could not submit {} queued I/O entries ({} tries); every "
                    "open request fails. Rerun with --io-engine posix if this repeats",
                    queued, stalls)),
                ends);
  }
}

void UringEngine::release_slot_locked(uint32_t slot) {
  free_slots_.push_back(slot);
  in_flight_--;
}

void UringEngine::stop_locked(Status status, std::vector<IoPieceEnd>& ends) {
  if (!stopped_.is_ok()) return;
  spdlog::error("{}", status.message());
  stopped_ = std::move(status);
  for (const IoPiece& p : pending_) ends.push_back({p.ticket, stopped_});
  pending_.clear();
  for (uint32_t slot : unsubmitted_) {  // the kernel never saw these: they end now
    if (slot == kWakeSlot) continue;
    ends.push_back({slots_[slot].ticket, stopped_});
    release_slot_locked(slot);
  }
  unsubmitted_.clear();
}

void UringEngine::complete_locked(uint64_t tag, int32_t res, std::vector<IoPieceEnd>& ends) {
  if (tag == kWakeTag || tag < kFirstSlotTag || tag - kFirstSlotTag >= slots_.size()) return;
  auto slot = static_cast<uint32_t>(tag - kFirstSlotTag);
  IoPiece& piece = slots_[slot];
  if (!stopped_.is_ok()) {
    ends.push_back({piece.ticket, stopped_});
  } else {
    PieceOutcome out = res == static_cast<int64_t>(piece.length)
                           ? PieceOutcome{PieceNext::done, Status()}
                           : apply_transfer_result(piece, res, files_.path(piece.file));
    if (out.next == PieceNext::resubmit) pending_.push_front(piece);
    else ends.push_back({piece.ticket, std::move(out.status)});
  }
  release_slot_locked(slot);
}

void UringEngine::reap() {
  struct Completion {
    uint64_t tag;
    int32_t res;
  };
  std::vector<Completion> done;
  std::vector<IoPieceEnd> ends;
  uint32_t wait_errors = 0;
  std::chrono::steady_clock::time_point drain_until{};
  for (;;) {
    bool stopped = false;
    {
      MutexLock lock(mu_);
      stopped = !stopped_.is_ok();
    }
    io_uring_cqe* cqe = nullptr;
    int rc = 0;
    if (!stopped) {
      __kernel_timespec timeout{0, kReapTimeoutNs};
      rc = calls_->wait(&ring_, &cqe, &timeout);
    } else {  // the ring call failed: look at the completion queue in memory, without a syscall
      rc = io_uring_peek_cqe(&ring_, &cqe);
      if (rc == -EAGAIN) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        rc = -ETIME;
      }
    }
    done.clear();
    ends.clear();
    Status wait_failure;
    if (rc == 0) {
      wait_errors = 0;
      unsigned head = 0, seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        seen++;
        done.push_back({io_uring_cqe_get_data64(cqe), cqe->res});
      }
      io_uring_cq_advance(&ring_, seen);
    } else if (rc != -ETIME && !stopped) {
      if (!((rc == -EINTR || rc == -EAGAIN) && ++wait_errors <= kUringMaxStalls)) {
        wait_failure = errno_status(rc, "io_uring_wait_cqe").with_context(fmt::format(
            "the io_uring engine stopped: waiting for completions failed ({} tries); every open request fails. "
            "Rerun with --io-engine posix if this repeats",
            wait_errors + 1));
      } else {
        std::this_thread::sleep_for(kStallPause);
      }
    }
    bool exit = false;
    {
      MutexLock lock(mu_);
      for (const Completion& c : done) complete_locked(c.tag, c.res, ends);
      if (!wait_failure.is_ok()) stop_locked(std::move(wait_failure), ends);
      if (stopped_.is_ok()) {
        pump_locked(ends);
      }
      if (!stopped_.is_ok()) {  // drain what the kernel took, for at most kUringDrainTime
        auto now = std::chrono::steady_clock::now();
        if (drain_until == std::chrono::steady_clock::time_point{}) drain_until = now + kUringDrainTime;
        if (in_flight_ > 0 && now >= drain_until) {
          spdlog::error("io_uring: {} request piece(s) the kernel took did not complete within {} ms; they fail, "
                        "and their buffers may still be written until the process exits",
                        in_flight_, kUringDrainTime.count());
          for (uint32_t slot = 0; slot < slots_.size(); slot++)
            if (std::find(free_slots_.begin(), free_slots_.end(), slot) == free_slots_.end())
              ends.push_back({slots_[slot].ticket, stopped_});
          free_slots_.clear();
          for (uint32_t i = static_cast<uint32_t>(slots_.size()); i > 0; i--) free_slots_.push_back(i - 1);
          in_flight_ = 0;
        }
        exit = in_flight_ == 0;  // nothing can be submitted any more
      } else {
        exit = stopping_ && in_flight_ == 0 && pending_.empty();
      }
    }
    for (const IoPieceEnd& r : ends) tickets_.piece_done(r.ticket, r.status);
    if (exit) return;
  }
}

}  // namespace strata
