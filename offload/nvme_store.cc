// NvmeStore implementation (see nvme_store.h).
#include "offload/nvme_store.h"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "kernels/cpu/crc32c.h"
#include "runtime/align.h"
#include "runtime/units.h"

namespace strata {
namespace {

// Errors a second try can cure: EIO and short transfers (io_error), EAGAIN past the engine's own
// retries (unavailable), a read that came back damaged (corruption).
bool worth_retrying(const Status& s) {
  return s.code() == Code::io_error || s.code() == Code::unavailable || s.code() == Code::corruption;
}

}  // namespace

NvmeStore::NvmeStore(IoEngine& engine, StripeLayout layout, uint32_t alignment, uint64_t per_path)
    : engine_(engine), layout_(layout), alignment_(alignment), per_path_bytes_(per_path),
      space_(per_path * layout.paths) {}

StatusOr<std::unique_ptr<NvmeStore>> NvmeStore::create(IoEngine& engine, const NvmeStoreOptions& o) {
  if (o.paths.empty())
    return Status(Code::invalid_argument, "the NVMe store needs at least one path (--nvme-path DIR[,DIR...])");
  if (o.io_attempts == 0 || o.io_attempts > 100)
    return error(Code::invalid_argument, "the NVMe store's io_attempts must be in [1, 100] (got {})", o.io_attempts);
  if (o.capacity == 0 || o.stripe_unit == 0)
    return error(Code::invalid_argument, "the NVMe store needs a capacity and a stripe unit > 0 (got {} and {})",
                 o.capacity, o.stripe_unit);
  if (o.remove_stale_runs)
    for (const std::string& p : o.paths)
      if (auto r = remove_stale_runs(p); !r.is_ok()) spdlog::warn("NVMe store: {}", r.status().message());

  std::vector<PathInfo> infos;
  uint32_t alignment = 4096;
  for (const std::string& p : o.paths) {
    StatusOr<PathInfo> info = o.probe(p);
    if (!info.is_ok()) return info.status().with_context("NVMe path " + p);
    alignment = std::max(alignment, info->logical_block_size);
    infos.push_back(std::move(*info));
  }
  if (o.stripe_unit % alignment != 0)
    return error(Code::invalid_argument, "nvme_stripe_unit {} is not a multiple of the paths' block size {}",
                 o.stripe_unit, alignment);
  const auto n = static_cast<uint32_t>(o.paths.size());
  const uint64_t per_path = round_up((o.capacity + n - 1) / n, o.stripe_unit);

  std::string shortfall;
  for (const PathInfo& info : infos)
    if (info.free_bytes < per_path)
      shortfall += fmt::format("{}{} has {} free", shortfall.empty() ? "" : "; ", info.path, format_size(info.free_bytes));
  if (!shortfall.empty())
    return error(Code::no_space,
                 "the NVMe store needs {} in each of its {} path(s) ({} in all) but {}; free space there, offload "
                 "less, or add a path on another drive with --nvme-path",
                 format_size(per_path), n, format_size(per_path * n), shortfall);

  std::unique_ptr<NvmeStore> store(new NvmeStore(engine, StripeLayout{n, o.stripe_unit}, alignment, per_path));
  store->io_attempts_ = o.io_attempts;
  for (const std::string& p : o.paths) {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<RunDir> dir, RunDir::create(p));
    std::string swap = dir->file("swap.bin");
    store->run_dirs_.push_back(std::move(dir));
    OpenOptions open{.create = true, .direct = o.direct, .writable = true};
    STRATA_ASSIGN_OR_RETURN(FileId f, engine.open(swap, open));
    store->files_.push_back(f);
    store->swap_paths_.push_back(swap);
    Status s = engine.allocate(f, 0, per_path);
    if (!s.is_ok())
      return s.with_context(fmt::format("the NVMe store could not reserve {} in {}; free space there or add a "
                                        "path on another drive with --nvme-path", format_size(per_path), p));
  }
  spdlog::info("NVMe store: {} reserved over {} path(s), stripe unit {}, alignment {} bytes, engine {}",
               format_size(per_path * n), n, format_size(o.stripe_unit), alignment, engine.name());
  return store;
}

NvmeStore::~NvmeStore() {
  for (FileId f : files_)
    if (Status s = engine_.close(f); !s.is_ok()) spdlog::warn("NVMe store: {}", s.message());
}

uint64_t NvmeStore::padded_size(uint64_t bytes) const { return round_up(bytes, alignment_); }

uint64_t NvmeStore::capacity() const { return per_path_bytes_ * layout_.paths; }

uint64_t NvmeStore::free_bytes() const {
  MutexLock lock(mu_);
  return space_.free_bytes();
}

std::string NvmeStore::describe(const Extent& e) const {
  return fmt::format("extent '{}' ({})", e.name, format_size(e.bytes));
}

StatusOr<ExtentId> NvmeStore::allocate(std::string name, uint64_t bytes) {
  if (bytes == 0) return error(Code::invalid_argument, "extent '{}' has 0 bytes", name);
  uint64_t padded = padded_size(bytes);
  MutexLock lock(mu_);
  std::optional<uint64_t> start = space_.allocate(padded);
  if (!start)
    return error(Code::no_space,
                 "extent '{}' needs {} but the NVMe store has {} free of {} reserved (largest free range {}); "
                 "reserve more at start-up",
                 name, format_size(padded), format_size(space_.free_bytes()), format_size(space_.capacity()),
                 format_size(space_.largest_free()));
  ExtentId id = next_id_++;
  extents_[id] = Extent{std::move(name), bytes, padded, *start, State::empty, false, {}};
  return id;
}

Status NvmeStore::release(ExtentId extent) {
  MutexLock lock(mu_);
  auto it = extents_.find(extent);
  if (it == extents_.end()) return error(Code::invalid_argument, "unknown extent id {}", extent);
  if (it->second.busy) return error(Code::failed_precondition, "release {}: I/O on it is in flight", describe(it->second));
  space_.release(it->second.start, it->second.padded);
  extents_.erase(it);
  return Status();
}

StatusOr<ExtentIo> NvmeStore::begin(ExtentId extent, IoOp op, std::byte* buffer) {
  ExtentIo io;
  io.extent_ = extent;
  io.op_ = op;
  io.buffer = buffer;
  uint64_t bytes = 0, padded = 0;
  {
    MutexLock lock(mu_);
    auto it = extents_.find(extent);
    if (it == extents_.end()) return error(Code::invalid_argument, "unknown extent id {}", extent);
    Extent& e = it->second;
    if (buffer == nullptr || reinterpret_cast<uintptr_t>(buffer) % alignment_ != 0)
      return error(Code::invalid_argument, "{} {}: the buffer must be aligned to {} bytes", io_op_name(op), describe(e),
                   alignment_);
    if (e.busy) return error(Code::failed_precondition, "{} {}: other I/O on it is in flight", io_op_name(op), describe(e));
    if (op == IoOp::read && e.state != State::valid)
      return error(Code::failed_precondition, "read {}: it holds no valid data ({})", describe(e),
                   e.state == State::empty ? "never written" : "its last write failed");
    e.busy = true;
    io.what = describe(e);
    if (op == IoOp::read) io.crcs = e.crcs;
    bytes = e.bytes;
    padded = e.padded;
    io.segments = map_range(layout_, e.start, e.padded);
  }
  if (op == IoOp::write) {
    std::memset(buffer + bytes, 0, padded - bytes);
    for (const StripeSegment& s : io.segments) io.crcs.push_back(kernels::crc32c(0, buffer + s.range_offset, s.length));
  }
  io.pending = true;
  for (const StripeSegment& s : io.segments) {
    StatusOr<IoTicket> t = engine_.submit(IoRequest{op, files_[s.path], s.file_offset, s.length, buffer + s.range_offset});
    if (!t.is_ok()) {
      (void)finish(io);  // waits for what was started, releases the extent
      return t.status();
    }
    io.tickets.push_back(*t);
  }
  return io;
}

StatusOr<ExtentIo> NvmeStore::begin_write(ExtentId extent, std::byte* buffer) { return begin(extent, IoOp::write, buffer); }
StatusOr<ExtentIo> NvmeStore::begin_read(ExtentId extent, std::byte* buffer) { return begin(extent, IoOp::read, buffer); }

Status NvmeStore::check_crc(const ExtentIo& io, size_t segment) const {
  const StripeSegment& seg = io.segments[segment];
  uint32_t got = kernels::crc32c(0, io.buffer + seg.range_offset, seg.length);
  if (got == io.crcs[segment]) return Status();
  return error(Code::corruption,
               "{} failed its crc32c check: bytes [{}, {}) read from {} at offset {} ({} bytes) have crc 0x{:08x}, "
               "0x{:08x} was written; the data is not used. The drive or the swap file is damaged: check the "
               "drive (smartctl, dmesg) and rerun",
               io.what, seg.range_offset, seg.range_offset + seg.length, swap_paths_[seg.path], seg.file_offset,
               seg.length, got, io.crcs[segment]);
}

Status NvmeStore::wait_and_retry(ExtentIo& io) {
  std::vector<Status> statuses;
  statuses.reserve(io.tickets.size());
  for (IoTicket t : io.tickets) statuses.push_back(engine_.wait(t));
  io.tickets.clear();
  Status first;
  for (size_t i = 0; i < statuses.size(); i++) {
    const StripeSegment& seg = io.segments[i];
    Status s = std::move(statuses[i]);
    if (s.is_ok() && io.op() == IoOp::read) s = check_crc(io, i);
    for (uint32_t attempt = 1; !s.is_ok() && worth_retrying(s); attempt++) {
      if (attempt >= io_attempts_) {
        if (io_attempts_ > 1)
          s = s.with_context(fmt::format("{} {} bytes at offset {} of {} failed {} times", io_op_name(io.op()),
                                         seg.length, seg.file_offset, swap_paths_[seg.path], io_attempts_));
        break;
      }
      spdlog::warn("NVMe store: {} (try {} of {}); trying again", s.message(), attempt, io_attempts_);
      s = engine_.run(IoRequest{io.op(), files_[seg.path], seg.file_offset, seg.length, io.buffer + seg.range_offset});
      if (s.is_ok() && io.op() == IoOp::read) s = check_crc(io, i);
    }
    if (first.is_ok() && !s.is_ok()) first = std::move(s);
  }
  return first;
}

Status NvmeStore::finish(ExtentIo& io) {
  if (!io.pending) return Status(Code::failed_precondition, "finish: this extent transfer was already finished");
  const bool complete = io.tickets.size() == io.segments.size();  // false: a submit failed midway
  Status s = wait_and_retry(io);
  io.pending = false;
  if (s.is_ok() && !complete) s = Status(Code::io_error, "the transfer could not be started in full");
  MutexLock lock(mu_);
  auto it = extents_.find(io.extent());
  if (it == extents_.end()) return error(Code::internal, "extent id {} vanished during I/O", io.extent());
  Extent& e = it->second;
  e.busy = false;
  if (io.op() == IoOp::write) {
    if (!s.is_ok()) {
      e.state = State::failed;
      e.crcs.clear();
      return s.with_context("write " + describe(e));
    }
    e.state = State::valid;
    e.crcs = std::move(io.crcs);
    return Status();
  }
  if (s.code() == Code::corruption) return s;
  if (!s.is_ok()) return s.with_context("read " + describe(e) + " (its data must not be used)");
  return Status();
}

bool NvmeStore::done(const ExtentIo& io) const {
  if (!io.pending) return true;
  for (IoTicket t : io.tickets)
    if (!engine_.done(t)) return false;
  return true;
}

Status NvmeStore::write(ExtentId extent, std::byte* buffer) {
  STRATA_ASSIGN_OR_RETURN(ExtentIo io, begin_write(extent, buffer));
  return finish(io);
}

Status NvmeStore::read(ExtentId extent, std::byte* buffer) {
  STRATA_ASSIGN_OR_RETURN(ExtentIo io, begin_read(extent, buffer));
  return finish(io);
}

}  // namespace strata
