// UringEngine: the IoEngine for NVMe -- one io_uring, O_DIRECT files in its registered-file table,
// caller memory registered once (register_memory: the pinned pool's slabs) and used with fixed
// reads/writes, large requests split into block-sized pieces of which up to queue_depth are in
// flight, submitted in batches. Every completion's `res` is checked (io_piece.h): short
// transfers are resubmitted for the remainder, -EAGAIN resubmitted, errors returned as a status
// naming the path, offset, length and errno. Not a fallback: where io_uring cannot be set up,
// create() says why (unavailable) and make_io_engine picks the posix engine.
// Threads: submitters push pieces into the submission queue under one lock; a reaper thread
// waits for completions, resubmits and tops the queue back up. Contract: io_engine.h.
// The ring's own failures are a sticky error (STYLE.md, "For the offload layer"): io_uring_submit's
// count is checked and entries the kernel did not take are submitted again, a bounded number of
// stalls; a submit or wait that keeps failing stops the engine: every open request fails with
// that status, and so does every later submit. Requests the kernel had already taken are given
// kUringDrainTime to complete (their buffers may still be written until then) before they fail.
#pragma once

#include <liburing.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "offload/file_table.h"
#include "offload/io_engine.h"
#include "offload/io_piece.h"
#include "offload/io_tickets.h"
#include "runtime/mutex.h"

namespace strata {

// The two ring calls whose results the engine must act on, behind a seam so that tests can make
// them fail or fall short (tests/offload/uring_engine_test.cc). The default forwards to liburing.
// Implementations must be safe to call from the submitting threads and the reaper at once.
class UringCalls {
 public:
  virtual ~UringCalls() = default;
  // io_uring_submit: how many queued entries the kernel took (>= 0), or -errno. Entries it did not
  // take stay queued and go with the next call.
  virtual int submit(io_uring* ring) { return io_uring_submit(ring); }
  // io_uring_wait_cqe_timeout: 0 with *cqe set, -ETIME when `timeout` passed, or -errno.
  virtual int wait(io_uring* ring, io_uring_cqe** cqe, __kernel_timespec* timeout) {
    return io_uring_wait_cqe_timeout(ring, cqe, timeout);
  }
};

// Consecutive submits that take nothing (0, -EINTR, -EAGAIN, -EBUSY), 100 us apart, and
// consecutive -EINTR / -EAGAIN waits, before the ring counts as stuck and the engine stops.
inline constexpr uint32_t kUringMaxStalls = 1000;
// How long a stopped engine waits for the requests the kernel had taken before failing them.
inline constexpr std::chrono::milliseconds kUringDrainTime{1000};

struct UringEngineOptions {
  IoShape shape;
  std::shared_ptr<UringCalls> calls = nullptr;  // nullptr: liburing itself
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
  Status register_memory(std::span<std::byte> memory) override EXCLUDES(mu_);
  Status unregister_memory(std::span<std::byte> memory) override EXCLUDES(mu_);
  StatusOr<IoTicket> submit(const IoRequest& request) override;
  Status submit(const IoRequest& request, IoCallback done) override;
  Status wait(IoTicket ticket) override { return tickets_.wait(ticket); }
  bool done(IoTicket ticket) const override { return tickets_.complete(ticket); }

  UringFeatures features() const { return features_; }
  // Registered-buffer slots in use (each up to 1 GiB of registered memory).
  size_t registered_regions() EXCLUDES(mu_);

 private:
  explicit UringEngine(const UringEngineOptions& options);
  // Splits `request` into pending pieces and pumps. The stopped engine's error when it has stopped
  // (nothing was started; the caller forgets the ticket).
  Status enqueue(const IoRequest& request, IoTicket ticket) EXCLUDES(mu_);
  // Moves pending pieces into SQEs while a slot is free, then submits. Pieces that end here
  // (their request already failed, or the ring stopped) are appended to `ends`, to be reported
  // unlocked.
  void pump_locked(std::vector<IoPieceEnd>& ends) REQUIRES(mu_);
  void prep_locked(io_uring_sqe* sqe, uint32_t slot, const OpenFile& file) REQUIRES(mu_);
  // Submits every queued entry, again while the kernel takes some; stops the engine after
  // kUringMaxStalls stalls or on a hard error.
  void submit_locked(std::vector<IoPieceEnd>& ends) REQUIRES(mu_);
  // Records the sticky error and ends every piece the kernel has not taken.
  void stop_locked(Status status, std::vector<IoPieceEnd>& ends) REQUIRES(mu_);
  void release_slot_locked(uint32_t slot) REQUIRES(mu_);
  // One completion: `tag` from user_data, `res` the transfer's result.
  void complete_locked(uint64_t tag, int32_t res, std::vector<IoPieceEnd>& ends) REQUIRES(mu_);
  // The reaper thread: waits on the completion side of ring_ unlocked, handles what came under mu_.
  void reap() EXCLUDES(mu_);

  struct BufferSlot {
    std::byte* base = nullptr;
    uint64_t size = 0;
  };

  // Constant once create() has returned.
  const UringEngineOptions options_;
  const std::shared_ptr<UringCalls> calls_;
  UringFeatures features_;
  bool ring_ready_ = false;

  // Its submission side is used under mu_, its completion side by the reaper alone (unlocked):
  // one object with two owners, so no GUARDED_BY.
  io_uring ring_{};
  FileTable files_{/*buffered_fallback=*/false};  // locks itself
  IoTickets tickets_;                              // locks itself

  // State below is protected by mu_.
  Mutex mu_;
  std::deque<IoPiece> pending_ GUARDED_BY(mu_);
  // In-flight pieces, preallocated (queue_depth of them) and named by user_data = slot + 2.
  std::vector<IoPiece> slots_ GUARDED_BY(mu_);
  std::vector<uint32_t> free_slots_ GUARDED_BY(mu_);
  // Queued entries the kernel has not taken yet, oldest first: slot numbers, or kWakeSlot.
  std::deque<uint32_t> unsubmitted_ GUARDED_BY(mu_);
  uint32_t in_flight_ GUARDED_BY(mu_) = 0;  // slots in use
  bool stopping_ GUARDED_BY(mu_) = false;
  Status stopped_ GUARDED_BY(mu_);  // the sticky error once the ring cannot make progress
  std::vector<BufferSlot> buffer_slots_ GUARDED_BY(mu_);
  std::map<std::byte*, uint32_t> slot_by_base_ GUARDED_BY(mu_);

  std::thread reaper_;
};

}  // namespace strata
