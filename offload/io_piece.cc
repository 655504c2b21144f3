// Request splitting and the transfer-result rule (see io_piece.h).
#include "offload/io_piece.h"

#include <cerrno>

namespace strata {

uint32_t piece_count(uint64_t length, uint64_t block_bytes) {
  return static_cast<uint32_t>((length + block_bytes - 1) / block_bytes);
}

uint32_t split_request(const IoRequest& request, IoTicket ticket, uint64_t block_bytes, std::deque<IoPiece>& out) {
  uint32_t n = 0;
  for (uint64_t done = 0; done < request.length; done += block_bytes, n++) {
    uint64_t len = std::min<uint64_t>(block_bytes, request.length - done);
    out.push_back(IoPiece{ticket, request.op, request.file, request.offset + done, len, request.buffer + done, 0});
  }
  return n;
}

PieceOutcome apply_transfer_result(IoPiece& piece, int64_t res, std::string_view path) {
  auto where = [&] {
    return fmt::format("{} {} at offset {} ({} bytes)", io_op_name(piece.op), path, piece.offset, piece.length);
  };
  if (res == -EAGAIN || res == -EINTR) {
    if (++piece.retries > kMaxIoRetries)
      return {PieceNext::failed, errno_status(static_cast<int>(res), where() + fmt::format(" still failing after {} retries", kMaxIoRetries))};
    return {PieceNext::resubmit, Status()};
  }
  if (res < 0) return {PieceNext::failed, errno_status(static_cast<int>(res), where())};
  if (res == 0) {
    if (piece.op == IoOp::read)
      return {PieceNext::failed, Status(Code::io_error, where() + ": end of file (the file is shorter than the request)")};
    return {PieceNext::failed, Status(Code::io_error, where() + ": the device accepted 0 bytes")};
  }
  uint64_t moved = static_cast<uint64_t>(res);
  if (moved > piece.length)
    return {PieceNext::failed, error(Code::internal, "{}: the kernel reported {} bytes moved", where(), moved)};
  if (moved == piece.length) return {PieceNext::done, Status()};
  piece.offset += moved;
  piece.buffer += moved;
  piece.length -= moved;
  return {PieceNext::resubmit, Status()};
}

}  // namespace strata
