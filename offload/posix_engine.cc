// PosixEngine implementation (see posix_engine.h).
#include "offload/posix_engine.h"

#include <unistd.h>

#include <cerrno>

namespace strata {

Status check_request(const IoRequest& request) {
  if (request.length == 0)
    return error(Code::invalid_argument, "{} of 0 bytes at offset {}: a request must move at least one byte",
                 io_op_name(request.op), request.offset);
  if (request.buffer == nullptr)
    return error(Code::invalid_argument, "{} of {} bytes at offset {} has no buffer", io_op_name(request.op),
                 request.length, request.offset);
  return Status();
}

PosixEngine::PosixEngine(const IoShape& shape) : shape_(shape) {}

StatusOr<std::unique_ptr<PosixEngine>> PosixEngine::create(const IoShape& shape) {
  if (shape.block_bytes == 0 || shape.block_bytes > (1ull << 30) || shape.queue_depth == 0 || shape.queue_depth > 4096)
    return error(Code::invalid_argument,
                 "posix I/O engine needs a block size in [1 B, 1 GiB] and a queue depth in [1, 4096] (got {} and {})",
                 shape.block_bytes, shape.queue_depth);
  std::unique_ptr<PosixEngine> e(new PosixEngine(shape));
  for (uint32_t i = 0; i < shape.queue_depth; i++) e->threads_.emplace_back([p = e.get()] { p->worker(); });
  return e;
}

PosixEngine::~PosixEngine() {
  tickets_.wait_idle();
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

StatusOr<FileId> PosixEngine::open(const std::string& path, const OpenOptions& options) {
  return files_.open(path, options);
}

Status PosixEngine::enqueue(const IoRequest& request, IoTicket ticket) {
  {
    MutexLock lock(mu_);
    split_request(request, ticket, shape_.block_bytes, queue_);
  }
  cv_.notify_all();
  return Status();
}

StatusOr<IoTicket> PosixEngine::submit(const IoRequest& request) {
  STRATA_RETURN_IF_ERROR(check_request(request));
  STRATA_RETURN_IF_ERROR(files_.get(request.file).status());
  IoTicket t = tickets_.open(piece_count(request.length, shape_.block_bytes));
  STRATA_RETURN_IF_ERROR(enqueue(request, t));
  return t;
}

Status PosixEngine::submit(const IoRequest& request, IoCallback done) {
  STRATA_RETURN_IF_ERROR(check_request(request));
  STRATA_RETURN_IF_ERROR(files_.get(request.file).status());
  IoTicket t = tickets_.open(piece_count(request.length, shape_.block_bytes), std::move(done));
  return enqueue(request, t);
}

void PosixEngine::worker() {
  for (;;) {
    IoPiece piece;
    {
      MutexLock lock(mu_);
      while (!stopping_ && queue_.empty()) cv_.wait(mu_);
      if (queue_.empty()) return;  // stopping, and nothing left
      piece = queue_.front();
      queue_.pop_front();
    }
    serve(piece);
  }
}

void PosixEngine::serve(IoPiece piece) {
  if (tickets_.failed(piece.ticket)) {  // an earlier piece failed: the request's outcome is known
    tickets_.piece_done(piece.ticket, Status());
    return;
  }
  auto f = files_.get(piece.file);
  if (!f.is_ok()) {
    tickets_.piece_done(piece.ticket, f.status().with_context(fmt::format("{} at offset {}", io_op_name(piece.op), piece.offset)));
    return;
  }
  for (;;) {
    ssize_t res = piece.op == IoOp::read
                      ? ::pread(f->fd, piece.buffer, piece.length, static_cast<off_t>(piece.offset))
                      : ::pwrite(f->fd, piece.buffer, piece.length, static_cast<off_t>(piece.offset));
    PieceOutcome out = apply_transfer_result(piece, res < 0 ? -static_cast<int64_t>(errno) : res, f->path);
    if (out.next == PieceNext::resubmit) continue;
    tickets_.piece_done(piece.ticket, out.status);
    return;
  }
}

}  // namespace strata
