// PosixEngine: the fallback IoEngine -- pread/pwrite on a pool of its own threads, for machines
// where io_uring is unavailable (disabled by sysctl or seccomp, an old kernel) and filesystems
// without O_DIRECT (tmpfs: files there are opened buffered, with one warning). A request is split
// into block-sized pieces which the threads serve in parallel, so the queue depth is the number of
// threads. Not a general thread pool. Thread-safety and contract: see io_engine.h.
#pragma once

#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "offload/file_table.h"
#include "offload/io_engine.h"
#include "offload/io_piece.h"
#include "offload/io_tickets.h"
#include "runtime/mutex.h"

namespace strata {

class PosixEngine final : public IoEngine {
 public:
  // shape.queue_depth threads (at least 1), each serving one piece at a time.
  static StatusOr<std::unique_ptr<PosixEngine>> create(const IoShape& shape);
  ~PosixEngine() override;

  std::string_view name() const override { return "posix"; }
  StatusOr<FileId> open(const std::string& path, const OpenOptions& options) override;
  Status close(FileId file) override { return files_.close(file); }
  Status allocate(FileId file, uint64_t offset, uint64_t length) override {
    return files_.allocate(file, offset, length);
  }
  StatusOr<uint64_t> file_size(FileId file) override { return files_.size(file); }
  bool is_direct(FileId file) const override { return files_.is_direct(file); }
  std::string path(FileId file) const override { return files_.path(file); }
  Status register_memory(std::span<std::byte>) override { return Status(); }
  Status unregister_memory(std::span<std::byte>) override { return Status(); }
  StatusOr<IoTicket> submit(const IoRequest& request) override;
  Status submit(const IoRequest& request, IoCallback done) override;
  Status wait(IoTicket ticket) override { return tickets_.wait(ticket); }
  bool done(IoTicket ticket) const override { return tickets_.complete(ticket); }

 private:
  explicit PosixEngine(const IoShape& shape);
  Status enqueue(const IoRequest& request, IoTicket ticket) EXCLUDES(mu_);
  void worker() EXCLUDES(mu_);
  void serve(IoPiece piece);

  const IoShape shape_;
  FileTable files_{/*buffered_fallback=*/true};  // locks itself
  IoTickets tickets_;                             // locks itself

  // The piece queue, protected by mu_.
  Mutex mu_;
  CondVar cv_;  // queue_ non-empty, or stopping_
  std::deque<IoPiece> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;

  std::vector<std::thread> threads_;  // started by create(), joined by the destructor
};

// Checks a request against what every engine accepts (non-empty, a buffer). Shared by engines.
Status check_request(const IoRequest& request);

}  // namespace strata
