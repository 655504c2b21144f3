// IoPiece: one block-sized part of a request, and the rule every engine applies to a transfer's
// result (bytes moved, or -errno): a short transfer leaves the remainder to be resubmitted,
// -EAGAIN / -EINTR resubmit the piece unchanged, end of file and errors end it with a status that
// names the operation, path, offset and length. Pure functions: no I/O here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <string_view>

#include "offload/io_engine.h"

namespace strata {

struct IoPiece {
  IoTicket ticket = 0;
  IoOp op = IoOp::read;
  FileId file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;  // bytes still to transfer
  std::byte* buffer = nullptr;
  uint32_t retries = 0;  // resubmissions after -EAGAIN / -EINTR
};

// How a piece ended, to be reported to IoTickets outside the engine's lock.
struct IoPieceEnd {
  IoTicket ticket = 0;
  Status status;
};

// Resubmissions after -EAGAIN / -EINTR before a piece fails as unavailable.
inline constexpr uint32_t kMaxIoRetries = 1000;

// Appends `request` to `out` as pieces of at most `block_bytes` (> 0), in file order; returns
// how many.
uint32_t split_request(const IoRequest& request, IoTicket ticket, uint64_t block_bytes, std::deque<IoPiece>& out);
// The number of pieces split_request makes.
uint32_t piece_count(uint64_t length, uint64_t block_bytes);

enum class PieceNext : uint8_t { done, resubmit, failed };
struct PieceOutcome {
  PieceNext next;
  Status status;  // the error when next == failed
};

// Applies one transfer result to `piece` (advancing it on a short transfer). `path` names the file
// in errors.
PieceOutcome apply_transfer_result(IoPiece& piece, int64_t res, std::string_view path);

}  // namespace strata
