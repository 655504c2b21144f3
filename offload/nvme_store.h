// NvmeStore: named extents in swap files under one or more paths (one per SSD), each extent
// striped across all paths in stripe units so the drives' bandwidth adds up. Space is reserved up
// front (fallocate): too little space fails at start-up, naming the bytes needed and free per
// path. Every write records a CRC-32C per stripe segment; every read checks it, and a mismatch is
// a corruption status naming the extent, path and offset (the data must not be used). A segment
// whose transfer fails with an I/O error (EIO, a short transfer the engine could not finish) or
// whose read fails its CRC is tried again, io_attempts times in all, before the error is returned
// naming the path, offset, length and the number of attempts. Swap files
// live in a per-run directory (run_dir.h) removed when the store is destroyed.
// Not a cache or a tier policy (that is the tier manager): it moves whole extents on request.
// Thread-safety: all methods may be called concurrently; I/O on one extent must not overlap other
// I/O on the same extent (failed_precondition). Lifetime: the engine outlives the store.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "offload/io_engine.h"
#include "offload/run_dir.h"
#include "offload/stripe_layout.h"
#include "runtime/fs_probe.h"
#include "runtime/mutex.h"

namespace strata {

using ExtentId = uint32_t;

struct NvmeStoreOptions {
  std::vector<std::string> paths;     // existing directories, one per drive ideally
  uint64_t capacity = 0;              // bytes of (padded) extents the run will hold, all paths together
  uint64_t stripe_unit = 8ull << 20;  // a multiple of the alignment (default: see nvme_stripe_unit)
  bool direct = true;                 // O_DIRECT swap files
  bool remove_stale_runs = true;      // delete leftovers of crashed runs in `paths` at start-up
  // Tries per stripe segment on an I/O error or a CRC mismatch before the error is returned
  // (>= 1; 3: a transient error -- a bus reset, a timed-out command -- rarely lasts two retries,
  // and a failing drive fails all three quickly). no_space and invalid_argument are never retried.
  uint32_t io_attempts = 3;
  // How a path's free space and logical block size are learned; tests replace it.
  std::function<StatusOr<PathInfo>(const std::string&)> probe = probe_path;
};

class NvmeStore;

// One read or write of a whole extent in flight; NvmeStore::finish() it exactly once.
class ExtentIo {
 public:
  ExtentIo() = default;
  ExtentIo(ExtentIo&&) noexcept = default;
  ExtentIo& operator=(ExtentIo&&) noexcept = default;
  ExtentId extent() const { return extent_; }
  IoOp op() const { return op_; }

 private:
  friend class NvmeStore;
  ExtentId extent_ = 0;
  IoOp op_ = IoOp::read;
  std::byte* buffer = nullptr;
  std::vector<IoTicket> tickets;
  std::vector<StripeSegment> segments;
  std::vector<uint32_t> crcs;  // writes: the CRCs being written; reads: those to expect
  std::string what;            // "extent 'name' (size)", for errors
  bool pending = false;
};

class NvmeStore {
 public:
  static StatusOr<std::unique_ptr<NvmeStore>> create(IoEngine& engine, const NvmeStoreOptions& options);
  ~NvmeStore();  // closes and removes the swap files; waits for nothing (finish I/O first)

  uint32_t alignment() const { return alignment_; }  // buffers and sizes: multiples of this
  // Bytes a buffer for an extent of `bytes` must hold (bytes rounded up to the alignment).
  uint64_t padded_size(uint64_t bytes) const;
  uint64_t capacity() const;    // logical bytes for extents
  uint64_t free_bytes() const EXCLUDES(mu_);
  const std::vector<std::string>& swap_files() const { return swap_paths_; }
  const std::vector<std::unique_ptr<RunDir>>& run_dirs() const { return run_dirs_; }

  // A new extent of `bytes` (any length > 0). no_space when the reserved space cannot hold it.
  StatusOr<ExtentId> allocate(std::string name, uint64_t bytes) EXCLUDES(mu_);
  Status release(ExtentId extent) EXCLUDES(mu_);

  // Start moving a whole extent between `buffer` and its swap space. `buffer` must be aligned to
  // alignment() and hold padded_size(bytes); a write zeroes the padding bytes of the buffer.
  StatusOr<ExtentIo> begin_write(ExtentId extent, std::byte* buffer);
  StatusOr<ExtentIo> begin_read(ExtentId extent, std::byte* buffer);
  // Waits for the transfer; a read is then checked against the CRCs of the last good write
  // (corruption on mismatch). A failed write leaves the extent without valid data.
  Status finish(ExtentIo& io) EXCLUDES(mu_);
  // True when finish(io) would not wait: every request of the transfer has completed (or none is
  // pending). A failed request still makes finish retry it, which may wait. Never blocks.
  bool done(const ExtentIo& io) const;
  Status write(ExtentId extent, std::byte* buffer);  // begin_write + finish
  Status read(ExtentId extent, std::byte* buffer);   // begin_read + finish

 private:
  enum class State : uint8_t { empty, valid, failed };
  struct Extent {
    std::string name;
    uint64_t bytes = 0;
    uint64_t padded = 0;
    uint64_t start = 0;  // in the logical (striped) space
    State state = State::empty;
    bool busy = false;
    std::vector<uint32_t> crcs;  // one per segment of the last good write
  };
  NvmeStore(IoEngine& engine, StripeLayout layout, uint32_t alignment, uint64_t per_path);
  StatusOr<ExtentIo> begin(ExtentId extent, IoOp op, std::byte* buffer) EXCLUDES(mu_);
  // Waits for every ticket; then retries each failed (or, for reads, CRC-failing) segment up to
  // io_attempts_ tries in all. Returns the first segment's final error.
  Status wait_and_retry(ExtentIo& io);
  Status check_crc(const ExtentIo& io, size_t segment) const;
  std::string describe(const Extent& e) const;

  // Constant once create() has returned.
  IoEngine& engine_;
  const StripeLayout layout_;
  const uint32_t alignment_;
  const uint64_t per_path_bytes_;
  uint32_t io_attempts_ = 3;
  std::vector<std::unique_ptr<RunDir>> run_dirs_;
  std::vector<FileId> files_;
  std::vector<std::string> swap_paths_;

  // State below is protected by mu_ (an extent's bytes are not: its `busy` flag hands them to one
  // transfer at a time).
  mutable Mutex mu_;
  SpaceMap space_ GUARDED_BY(mu_);
  std::unordered_map<ExtentId, Extent> extents_ GUARDED_BY(mu_);
  ExtentId next_id_ GUARDED_BY(mu_) = 1;
};

}  // namespace strata
