// UringEngine: the IoEngine for NVMe -- one io_uring, O_DIRECT files in its registered-file table,
// caller memory registered once (register_memory: the pinned pool's slabs) and used with fixed
// reads/writes, large requests split into block-sized pieces of which up to queue_depth are in
// flight, submitted in batches. Every completion's `res` is checked (io_piece.h): short
// transfers are resubmitted for the remainder, -EAGAIN resubmitted, errors returned as a status
// naming the path, offset, length and errno. Not a fallback: where io_uring cannot be set up,
// create() says why (unavailable) and make_io_engine picks the posix engine.
// Threads: submitters push pieces into the submission queue under one lock; a reaper thread
// waits for completions, resubmits and tops the queue back up. Contract: io_engine.h.
#pragma once

#include <liburing.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "offload/file_table.h"
#include "offload/io_engine.h"
#include "offload/io_piece.h"
#include "offload/io_tickets.h"

namespace strata {

struct UringEngineOptions {
  IoShape shape;
  uint32_t file_slots = 256;    // registered-file table size; files beyond it use plain fds
  uint32_t buffer_slots = 256;  // registered-buffer table size (each slot at most 1 GiB)
};

// What the engine ended up using, for logs and benches.
struct UringFeatures {
  bool fixed_files = false;    // sparse registered-file table (kernel >= 5.19 / liburing >= 2.2)
  bool fixed_buffers = false;  // sparse registered-buffer table with updates
  uint32_t sq_entries = 0;
};

class UringEngine final : public IoEngine {
 public:
  // unavailable (with the errno text) when the kernel refuses io_uring (sysctl
  // kernel.io_uring_disabled, seccomp, a kernel without it).
  static StatusOr<std::unique_ptr<UringEngine>> create(const UringEngineOptions& options);
  ~UringEngine() override;

  std::string_view name() const override { return "io_uring"; }
  StatusOr<FileId> open(const std::string& path, const OpenOptions& options) override;
  Status close(FileId file) override;
  Status allocate(FileId file, uint64_t offset, uint64_t length) override {
    return files_.allocate(file, offset, length);
  }
  StatusOr<uint64_t> file_size(FileId file) override { return files_.size(file); }
  bool is_direct(FileId file) const override { return files_.is_direct(file); }
  std::string path(FileId file) const override { return files_.path(file); }
  // Registers `memory` in slots of at most 1 GiB (the kernel's limit per buffer). Errors (no
  // free slot, RLIMIT_MEMLOCK) leave the memory unregistered: it still works, unfixed.
  Status register_memory(std::span<std::byte> memory) override;
  Status unregister_memory(std::span<std::byte> memory) override;
  StatusOr<IoTicket> submit(const IoRequest& request) override;
  Status submit(const IoRequest& request, IoCallback done) override;
  Status wait(IoTicket ticket) override { return tickets_.wait(ticket); }

  UringFeatures features() const { return features_; }
  // Registered-buffer slots in use (each up to 1 GiB of registered memory).
  size_t registered_regions();

 private:
  explicit UringEngine(const UringEngineOptions& options) : options_(options) {}
  Status enqueue(const IoRequest& request, IoTicket ticket);
  // Moves pending pieces into SQEs while fewer than queue_depth are in flight, then submits.
  // Pieces of requests that already failed are skipped and returned (to report unlocked).
  std::vector<IoPieceEnd> pump_locked();
  void prep_locked(io_uring_sqe* sqe, IoPiece* piece, const OpenFile& file);
  void submit_locked();
  void reap();

  struct BufferSlot {
    std::byte* base = nullptr;
    uint64_t size = 0;
  };

  const UringEngineOptions options_;
  UringFeatures features_;
  io_uring ring_{};
  bool ring_ready_ = false;
  FileTable files_{/*buffered_fallback=*/false};
  IoTickets tickets_;

  std::mutex mu_;  // guards everything below and the submission side of ring_
  std::deque<IoPiece> pending_;
  uint32_t in_flight_ = 0;
  bool stopping_ = false;
  std::vector<BufferSlot> buffer_slots_;
  std::map<std::byte*, uint32_t> slot_by_base_;

  std::thread reaper_;
};

}  // namespace strata
