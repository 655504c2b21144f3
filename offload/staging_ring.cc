// StagingRing (staging_ring.h): carving the pinned buffers and the one transfer each carries.
#include "offload/staging_ring.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "offload/trace.h"
#include "runtime/align.h"
#include "runtime/units.h"

namespace strata {
namespace {

// The pool's request for a buffer of `bytes` whose start is then aligned to `alignment`.
uint64_t pinned_request(uint64_t bytes, uint64_t alignment) {
  return round_up(bytes, kHostPage) + (alignment > kHostPage ? alignment : 0);
}

}  // namespace

uint64_t StagingRing::pinned_bytes(std::span<const uint64_t> sizes, uint64_t alignment) {
  uint64_t total = 0;
  for (uint64_t bytes : sizes) total += pinned_request(bytes, alignment);
  return total;
}

StagingRing::StagingRing(NvmeStore* store, TraceRecorder* trace, StagingRingOptions options)
    : store_(store), trace_(trace), options_(std::move(options)) {}

Status StagingRing::carve(PinnedPool& pool, std::span<const uint64_t> sizes) {
  const uint64_t a = std::max<uint64_t>(store_->alignment(), 1);
  buffers_.resize(sizes.size());
  for (size_t i = 0; i < sizes.size(); i++) {
    StatusOr<PinnedBuffer> m = pool.acquire(pinned_request(sizes[i], a));
    if (!m.is_ok()) {
      return m.status().with_context(fmt::format("{}: pinned {} {} of {} ({} in all)", options_.name, options_.what,
                                                 i + 1, sizes.size(), format_size(pinned_bytes(sizes, a))));
    }
    Buffer& b = buffers_[i];
    b.memory_ = std::move(*m);
    b.data = reinterpret_cast<std::byte*>(round_up(reinterpret_cast<uintptr_t>(b.memory_.data()), a));
    b.bytes = sizes[i];
  }
  return Status::ok();
}

uint64_t StagingRing::pinned_bytes() const {
  uint64_t total = 0;
  for (const Buffer& b : buffers_) total += b.memory_.size();
  return total;
}

std::string StagingRing::describe(IoOp op, size_t chunk) const {
  return fmt::format("{}: NVMe {} of {}", options_.name, op == IoOp::read ? "read" : "write",
                     options_.subject ? options_.subject(chunk) : fmt::format("chunk {}", chunk));
}

Status StagingRing::begin(size_t b, IoOp op, ExtentId extent, size_t chunk, uint64_t bytes) {
  Buffer& buf = buffers_[b];
  const double begin_us = trace_ != nullptr ? trace_->now_us() : 0.0;
  StatusOr<ExtentIo> io = op == IoOp::read ? store_->begin_read(extent, buf.data) : store_->begin_write(extent, buf.data);
  if (!io.is_ok()) return io.status().with_context(describe(op, chunk));
  buf.io_ = std::move(*io);
  buf.pending_ = true;
  buf.op_ = op;
  buf.chunk_ = chunk;
  buf.io_bytes_ = bytes;
  buf.begin_us_ = begin_us;
  return Status::ok();
}

Status StagingRing::finish(size_t b) {
  Buffer& buf = buffers_[b];
  if (!buf.pending_) return Status::ok();
  const bool read = buf.op_ == IoOp::read;
  const auto t0 = std::chrono::steady_clock::now();
  Status st = store_->finish(buf.io_);
  buf.pending_ = false;
  const auto waited = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  (read ? read_wait_ns_ : write_wait_ns_).fetch_add(waited, std::memory_order_relaxed);
  if (st.is_ok()) (read ? read_bytes_ : write_bytes_).fetch_add(buf.io_bytes_, std::memory_order_relaxed);
  if (trace_ != nullptr) {
    trace_->span(read ? options_.read_track : options_.write_track,
                 options_.span_name ? options_.span_name(buf.chunk_) : fmt::format("chunk {}", buf.chunk_),
                 buf.begin_us_, trace_->now_us(),
                 {{"chunk", static_cast<int64_t>(buf.chunk_)},
                  {"bytes", static_cast<int64_t>(buf.io_bytes_)},
                  {"ok", st.is_ok() ? 1 : 0}});
  }
  return st.with_context(describe(buf.op_, buf.chunk_));
}

bool StagingRing::done(size_t b) const {
  const Buffer& buf = buffers_[b];
  return !buf.pending_ || store_->done(buf.io_);
}

StagingRingStats StagingRing::stats() const {
  StagingRingStats s;
  s.read_bytes = read_bytes_.load(std::memory_order_relaxed);
  s.write_bytes = write_bytes_.load(std::memory_order_relaxed);
  s.read_wait_ns = read_wait_ns_.load(std::memory_order_relaxed);
  s.write_wait_ns = write_wait_ns_.load(std::memory_order_relaxed);
  return s;
}

void StagingRing::reset_stats() {
  read_bytes_.store(0);
  write_bytes_.store(0);
  read_wait_ns_.store(0);
  write_wait_ns_.store(0);
}

}  // namespace strata
