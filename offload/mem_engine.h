// MemEngine: an IoEngine whose files live in memory, for tests and for runs that want the whole
// offload path without a disk. Requests complete inside submit (callbacks run there). Files keep
// their contents after close, until the engine dies, so a test can reopen, inspect or damage them.
// With `alignment` set it refuses misaligned direct requests exactly as O_DIRECT does (EINVAL),
// so callers' padding is checked. Not persistent. Thread-safety and contract: see io_engine.h.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "offload/io_engine.h"
#include "offload/io_tickets.h"
#include "runtime/mutex.h"

namespace strata {

struct MemEngineOptions {
  uint32_t alignment = 4096;  // for files opened `direct`; 0 = accept any offset and length
};

class MemEngine final : public IoEngine {
 public:
  explicit MemEngine(const MemEngineOptions& options = {}) : options_(options) {}

  std::string_view name() const override { return "mem"; }
  StatusOr<FileId> open(const std::string& path, const OpenOptions& options) override EXCLUDES(mu_);
  Status close(FileId file) override EXCLUDES(mu_);
  Status allocate(FileId file, uint64_t offset, uint64_t length) override EXCLUDES(mu_);
  StatusOr<uint64_t> file_size(FileId file) override EXCLUDES(mu_);
  bool is_direct(FileId file) const override EXCLUDES(mu_);
  std::string path(FileId file) const override EXCLUDES(mu_);
  Status register_memory(std::span<std::byte>) override { return Status(); }
  Status unregister_memory(std::span<std::byte>) override { return Status(); }
  StatusOr<IoTicket> submit(const IoRequest& request) override;
  Status submit(const IoRequest& request, IoCallback done) override;
  Status wait(IoTicket ticket) override { return tickets_.wait(ticket); }
  bool done(IoTicket ticket) const override { return tickets_.complete(ticket); }

  // The bytes of the file at `path` (open or closed), or nullptr. For tests that inspect or
  // corrupt a file; not synchronized with requests in flight (there are none: they are sync).
  std::vector<std::byte>* contents(const std::string& path) EXCLUDES(mu_);
  // Forgets a closed file (like unlink). not_found when there is none, failed_precondition when open.
  Status remove(const std::string& path) EXCLUDES(mu_);

 private:
  struct Open {
    std::shared_ptr<std::vector<std::byte>> bytes;
    std::string path;
    bool direct = false;
    bool writable = false;
  };
  Status check_submit(const IoRequest& request) const EXCLUDES(mu_);
  Status transfer(const IoRequest& request) EXCLUDES(mu_);
  const Open* find_locked(FileId file) const REQUIRES(mu_);

  const MemEngineOptions options_;
  IoTickets tickets_;  // locks itself

  // State below is protected by mu_ (the bytes of the files too).
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<std::vector<std::byte>>> files_ GUARDED_BY(mu_);  // the "filesystem"
  std::map<FileId, Open> open_ GUARDED_BY(mu_);
  FileId next_id_ GUARDED_BY(mu_) = 0;
};

}  // namespace strata
