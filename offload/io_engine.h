// IoEngine: asynchronous reads and writes of byte ranges of files, behind one interface with four
// implementations -- io_uring (uring_engine.h), a posix thread pool (posix_engine.h), in-memory
// files (mem_engine.h) and a fault injector wrapping another engine (fault_engine.h). The engine
// owns the files it opens. It is not a store: naming, striping, padding and checksums are
// NvmeStore's business (nvme_store.h).
//
// Contract of a request (every implementation):
//  - A request completes exactly once, as a whole: ok means all `length` bytes were transferred;
//    an error status says which operation, path, offset, length and errno failed. Short transfers
//    and -EAGAIN are retried inside the engine; end of file during a read is an io_error.
//  - After an error the contents of the buffer (read) or of the file range (write) are undefined.
//  - For files opened with `direct`, offset, length and buffer address must be multiples of the
//    file's logical block size (the kernel answers EINVAL otherwise -> invalid_argument).
//  - The buffer must stay valid and untouched until the request completes.
// Thread-safety: every method may be called concurrently from any thread. Completion callbacks
// run on an engine thread (or inside submit for synchronous engines); they must be short and
// must not call wait(). Lifetime: the destructor waits for requests in flight.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace strata {

enum class IoOp : uint8_t { read, write };
std::string_view io_op_name(IoOp op);  // "read", "write"

using FileId = uint32_t;    // a file opened by an engine
using IoTicket = uint64_t;  // a request submitted without a callback; wait() for it once

struct OpenOptions {
  bool create = false;     // O_CREAT | O_EXCL: the file must not exist yet (mode 0600)
  bool direct = true;      // O_DIRECT; see the engine for what happens where it is refused
  bool writable = true;    // O_RDWR, else O_RDONLY
  // Always O_NOFOLLOW | O_CLOEXEC: a symlink planted at a swap path is refused, never followed.
};

struct IoRequest {
  IoOp op = IoOp::read;
  FileId file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::byte* buffer = nullptr;  // `length` bytes; registered memory makes io_uring use fixed I/O
};

using IoCallback = std::function<void(const Status&)>;

class IoEngine {
 public:
  virtual ~IoEngine() = default;

  virtual std::string_view name() const = 0;  // "io_uring", "posix", "mem", "fault(io_uring)"

  // Opens `path` (see OpenOptions). Errors name the path (not_found, already_exists, ...).
  virtual StatusOr<FileId> open(const std::string& path, const OpenOptions& options) = 0;
  // Closes a file; requests on it must have completed. Unknown ids are invalid_argument.
  virtual Status close(FileId file) = 0;
  // Reserves [offset, offset + length) on disk (fallocate): ENOSPC here is no_space naming the
  // path and size, so a full disk shows at start-up, never mid-run.
  virtual Status allocate(FileId file, uint64_t offset, uint64_t length) = 0;
  virtual StatusOr<uint64_t> file_size(FileId file) = 0;
  // True when the file was opened with O_DIRECT (false where the engine fell back to buffered).
  virtual bool is_direct(FileId file) const = 0;
  virtual std::string path(FileId file) const = 0;

  // Declares memory that will be used as I/O buffers again and again (e.g. the pinned pool's
  // slabs). io_uring registers it (fixed reads/writes); other engines ignore it. Unregistered
  // memory still works. The memory must outlive the engine or be unregistered first.
  virtual Status register_memory(std::span<std::byte> memory) = 0;
  virtual Status unregister_memory(std::span<std::byte> memory) = 0;

  // Starts `request`; wait(ticket) exactly once to learn how it ended. An error here (unknown
  // file, zero length, engine shut down) means nothing was started.
  virtual StatusOr<IoTicket> submit(const IoRequest& request) = 0;
  // Starts `request`; `done` is called exactly once with its final status (not called when
  // this returns an error). There is no ticket to wait for.
  virtual Status submit(const IoRequest& request, IoCallback done) = 0;
  // Blocks until the ticket's request has completed and returns its status. A ticket unknown
  // or already waited for is invalid_argument.
  virtual Status wait(IoTicket ticket) = 0;
  // True once the ticket's request has completed, so wait(ticket) returns at once; false while it
  // runs, and for a ticket unknown or already waited for. Never blocks.
  virtual bool done(IoTicket ticket) const = 0;

  // Convenience: submit + wait.
  Status run(const IoRequest& request);
};

// How many bytes each engine splits a large request into, and how many pieces it keeps in
// flight. Shared by the engine options (aio_block_size, aio_queue_depth config keys).
struct IoShape {
  uint64_t block_bytes = 1ull << 20;
  uint32_t queue_depth = 32;
};

}  // namespace strata
