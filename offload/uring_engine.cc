// UringEngine implementation (see uring_engine.h).
#include "offload/uring_engine.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "offload/posix_engine.h"
#include "runtime/log.h"

namespace strata {
namespace {

constexpr uint64_t kWakeTag = 1;  // user_data of the NOP that wakes the reaper (pointers are even)
constexpr uint64_t kMaxBufferSlotBytes = 1ull << 30;  // the kernel refuses larger registered buffers

}  // namespace

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
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {  // the queue is full of unsubmitted entries: flush them, then retry
      submit_locked();
      sqe = io_uring_get_sqe(&ring_);
    }
    if (sqe != nullptr) {
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data64(sqe, kWakeTag);
      submit_locked();
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
  std::lock_guard lock(mu_);
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
  std::lock_guard lock(mu_);
  return slot_by_base_.size();
}

Status UringEngine::unregister_memory(std::span<std::byte> memory) {
  if (!features_.fixed_buffers) return Status();
  std::lock_guard lock(mu_);
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
  std::vector<IoPieceEnd> skipped;
  {
    std::lock_guard lock(mu_);
    split_request(request, ticket, options_.shape.block_bytes, pending_);
    skipped = pump_locked();
  }
  for (const IoPieceEnd& p : skipped) tickets_.piece_done(p.ticket, p.status);
  return Status();
}

StatusOr<IoTicket> UringEngine::submit(const IoRequest& request) {
  STRATA_RETURN_IF_ERROR(check_request(request));
  STRATA_RETURN_IF_ERROR(files_.get(request.file).status());
  IoTicket t = tickets_.open(piece_count(request.length, options_.shape.block_bytes));
  STRATA_RETURN_IF_ERROR(enqueue(request, t));
  return t;
}

Status UringEngine::submit(const IoRequest& request, IoCallback done) {
  STRATA_RETURN_IF_ERROR(check_request(request));
  STRATA_RETURN_IF_ERROR(files_.get(request.file).status());
  IoTicket t = tickets_.open(piece_count(request.length, options_.shape.block_bytes), std::move(done));
  return enqueue(request, t);
}

void UringEngine::prep_locked(io_uring_sqe* sqe, IoPiece* piece, const OpenFile& file) {
  bool fixed_file = features_.fixed_files && piece->file < options_.file_slots;
  int fd = fixed_file ? static_cast<int>(piece->file) : file.fd;
  int buf_index = -1;
  if (!slot_by_base_.empty()) {
    auto it = slot_by_base_.upper_bound(piece->buffer);
    if (it != slot_by_base_.begin()) {
      --it;
      const BufferSlot& s = buffer_slots_[it->second];
      if (piece->buffer + piece->length <= s.base + s.size) buf_index = static_cast<int>(it->second);
    }
  }
  auto len = static_cast<unsigned>(piece->length);
  if (piece->op == IoOp::read) {
    if (buf_index >= 0) io_uring_prep_read_fixed(sqe, fd, piece->buffer, len, piece->offset, buf_index);
    else io_uring_prep_read(sqe, fd, piece->buffer, len, piece->offset);
  } else {
    if (buf_index >= 0) io_uring_prep_write_fixed(sqe, fd, piece->buffer, len, piece->offset, buf_index);
    else io_uring_prep_write(sqe, fd, piece->buffer, len, piece->offset);
  }
  if (fixed_file) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data(sqe, piece);
}

std::vector<IoPieceEnd> UringEngine::pump_locked() {
  std::vector<IoPieceEnd> skipped;
  bool prepared = false;
  while (in_flight_ < options_.shape.queue_depth && !pending_.empty()) {
    IoPiece& next = pending_.front();
    auto file = files_.get(next.file);
    if (tickets_.failed(next.ticket) || !file.is_ok()) {  // the request's outcome is known already
      skipped.push_back({next.ticket, file.status()});
      pending_.pop_front();
      continue;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) break;  // every entry is taken until the kernel consumes them
    prep_locked(sqe, new IoPiece(next), *file);
    pending_.pop_front();
    in_flight_++;
    prepared = true;
  }
  if (prepared) submit_locked();
  return skipped;
}

void UringEngine::submit_locked() {
  for (int attempt = 0;; attempt++) {
    int rc = io_uring_submit(&ring_);
    if (rc >= 0) return;
    if ((rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) && attempt < 1000) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      continue;
    }
    // The entries stay in the queue and go with the next submission.
    spdlog::error("io_uring: {}", errno_status(rc, "io_uring_submit").message());
    return;
  }
}

void UringEngine::reap() {
  std::vector<IoPieceEnd> reports;
  std::vector<IoPiece> again;
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_wait_cqe(&ring_, &cqe);
    if (rc < 0) {
      if (rc != -EINTR && rc != -EAGAIN) spdlog::error("io_uring: {}", errno_status(rc, "io_uring_wait_cqe").message());
      continue;
    }
    reports.clear();
    again.clear();
    uint32_t finished = 0;
    unsigned head = 0, seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      seen++;
      uint64_t tag = io_uring_cqe_get_data64(cqe);
      if (tag == kWakeTag) continue;
      auto* piece = reinterpret_cast<IoPiece*>(tag);
      finished++;
      int64_t res = cqe->res;
      PieceOutcome out = res == static_cast<int64_t>(piece->length)
                             ? PieceOutcome{PieceNext::done, Status()}
                             : apply_transfer_result(*piece, res, files_.path(piece->file));
      if (out.next == PieceNext::resubmit) again.push_back(*piece);
      else reports.push_back({piece->ticket, std::move(out.status)});
      delete piece;
    }
    io_uring_cq_advance(&ring_, seen);
    std::vector<IoPieceEnd> skipped;
    bool exit = false;
    {
      std::lock_guard lock(mu_);
      in_flight_ -= finished;
      for (auto it = again.rbegin(); it != again.rend(); ++it) pending_.push_front(*it);
      skipped = pump_locked();
      exit = stopping_ && in_flight_ == 0 && pending_.empty();
    }
    for (const IoPieceEnd& r : reports) tickets_.piece_done(r.ticket, r.status);
    for (const IoPieceEnd& p : skipped) tickets_.piece_done(p.ticket, p.status);
    if (exit) return;
  }
}

}  // namespace strata
