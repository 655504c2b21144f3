// PinnedPool: slabs of page-locked host memory (mmap + cudaHostRegister, else mmap + mlock, else pageable
// mmap with one warning), carved from their tails and reused by exact size (contract in
// pinned_pool.h). Nothing is returned to the OS before the pool dies. Not a general allocator:
// freed blocks are not split or merged.
#include "runtime/pinned_pool.h"

#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>


#include "runtime/backend.h"
#include "runtime/log.h"
#include "runtime/parallel_ranges.h"
#include "runtime/units.h"

#ifdef STRATA_HAVE_CUDA
#include "runtime/cuda/cuda_host_memory.h"
#endif

namespace strata {
namespace {

constexpr uint64_t kPinnedAlignment = 4096;

// `bytes` rounded up to whole pages (0 gets one page). Precondition: bytes <= 2^63.
uint64_t round_up_pages(uint64_t bytes) {
  return bytes == 0 ? kPinnedAlignment : (bytes + kPinnedAlignment - 1) & ~(kPinnedAlignment - 1);
}

constexpr uint64_t kHugePage = 2ull << 20;

// `bytes` of anonymous memory; with `huge_pages`, starting on a 2 MiB boundary and advised to use
// transparent huge pages:
// a 1 MiB O_DIRECT transfer from 4 KiB pages is 256 segments, more than many block devices take in
// one request (virtio: 254), so reads get split; from huge pages it is one or two. Without THP
// (or with it off) the advice is ignored and the memory still works. munmap(result, bytes) frees it.
StatusOr<std::byte*> map_pages(uint64_t bytes, bool huge_pages) {
  const uint64_t padded = bytes + (huge_pages ? kHugePage : 0);
  void* p = mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return errno_status(errno, fmt::format("mapping a {} pinned-pool slab", format_size(bytes)));
  auto* raw = static_cast<std::byte*>(p);
  if (!huge_pages) return raw;
  auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(raw) + kHugePage - 1) & ~(kHugePage - 1));
  const uint64_t head = static_cast<uint64_t>(base - raw);
  if (head > 0) munmap(raw, head);
  const uint64_t tail = padded - head - bytes;
  if (tail > 0) munmap(base + bytes, tail);
  if (madvise(base, bytes, MADV_HUGEPAGE) != 0)
    spdlog::debug("pinned pool: transparent huge pages not available ({}); using 4 KiB pages", std::strerror(errno));
  return base;
}

// Faulting in (the kernel zeroes each new page) and zeroing run on every core in ranges of a huge
// page: one core writes about 2-4 GB/s of new pages, the memory bus takes several times that.
constexpr uint64_t kParallelRange = kHugePage;

// Faults in every page of fresh anonymous memory [base, base + bytes) on every core, writing the
// zero each already holds, so a following mlock finds them present instead of faulting them in
// one by one on the calling thread.
void fault_in(std::byte* base, uint64_t bytes) {
  parallel_ranges<uint64_t>(bytes, kParallelRange, [&](uint64_t begin, uint64_t end) {
    for (uint64_t o = begin; o < end; o += kPinnedAlignment) reinterpret_cast<volatile unsigned char*>(base)[o] = 0;
  });
}

void zero_on_every_core(std::byte* data, uint64_t bytes) {
  parallel_ranges<uint64_t>(bytes, kParallelRange,
                            [&](uint64_t begin, uint64_t end) { std::memset(data + begin, 0, end - begin); });
}

// True when this process may lock one page (RLIMIT_MEMLOCK / CAP_IPC_LOCK allow it).
Status probe_mlock() {
  StatusOr<std::byte*> page = map_pages(kPinnedAlignment, false);
  if (!page.is_ok()) return page.status();
  Status s;
  if (mlock(*page, kPinnedAlignment) != 0) {
    s = errno_status(errno, "mlock");
  } else {
    munlock(*page, kPinnedAlignment);
  }
  munmap(*page, kPinnedAlignment);
  return s;
}

void warn_pageable(const Status& why) {
  warn_once("pinned-pool-pageable",
            fmt::format("pinned host memory unavailable ({}); falling back to pageable memory: device copies "
                        "will be slower and not fully asynchronous (raise `ulimit -l` or grant CAP_IPC_LOCK)",
                        why.message()));
}

void free_slab_memory(std::byte* base, uint64_t size, PinnedKind kind) {
  switch (kind) {
    case PinnedKind::cuda_host: {
#ifdef STRATA_HAVE_CUDA
      Status s = cuda_host_unregister(base);
      if (!s.is_ok()) spdlog::warn("unregistering a pinned-pool slab: {}", s.message());
#endif
      munmap(base, size);
      return;
    }
    case PinnedKind::mlock:
      munlock(base, size);
      munmap(base, size);
      return;
    case PinnedKind::pageable:
      munmap(base, size);
      return;
  }
}

}  // namespace

std::string_view pinned_kind_name(PinnedKind kind) {
  switch (kind) {
    case PinnedKind::cuda_host:
      return "cuda_host";
    case PinnedKind::mlock:
      return "mlock";
    case PinnedKind::pageable:
      return "pageable";
  }
  return "unknown";
}

// ---- PinnedBuffer --------------------------------------------------------------------------------

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (pool_ != nullptr && data_ != nullptr) pool_->give_back(data_, size_);
    pool_ = std::exchange(other.pool_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  if (pool_ != nullptr && data_ != nullptr) pool_->give_back(data_, size_);
}

// ---- PinnedPool ----------------------------------------------------------------------------------

StatusOr<std::unique_ptr<PinnedPool>> PinnedPool::create(const PinnedPoolOptions& options) {
  if (options.slab_bytes == 0 || options.slab_bytes > (1ull << 62)) {
    return error(Code::invalid_argument, "pinned pool slab size {} is out of range (1 byte .. 4 EiB)", options.slab_bytes);
  }
  PinnedKind kind = PinnedKind::pageable;
  std::string no_cuda = "not allowed by the options";
  if (options.allow_cuda && cuda_available(&no_cuda)) {
    kind = PinnedKind::cuda_host;
  } else if (options.allow_mlock) {
    Status lockable = probe_mlock();
    if (lockable.is_ok()) {
      kind = PinnedKind::mlock;
    } else {
      warn_pageable(lockable);
    }
  }
  spdlog::debug("pinned pool: {} memory (CUDA host allocation: {})", pinned_kind_name(kind),
                kind == PinnedKind::cuda_host ? "yes" : no_cuda);
  return std::unique_ptr<PinnedPool>(new PinnedPool(options, kind));
}

PinnedPool::PinnedPool(const PinnedPoolOptions& options, PinnedKind kind) : options_(options), kind_(kind) {
  stats_.kind = kind;
  stats_.capacity = options.capacity;
}

PinnedPool::~PinnedPool() {
  if (stats_.in_use > 0) {
    spdlog::error("pinned pool destroyed with {} still in use: buffers outlive their pool (a bug)",
                  format_size(stats_.in_use));
  }
  for (const Slab& slab : slabs_) free_slab_memory(slab.base, slab.size, slab.kind);
}

StatusOr<PinnedBuffer> PinnedPool::acquire(uint64_t bytes, PinnedFill fill) {
  if (bytes > (1ull << 62)) {
    return error(Code::out_of_memory, "pinned memory request of {} bytes is larger than any host", bytes);
  }
  const uint64_t size = round_up_pages(bytes);
  std::byte* data = nullptr;
  bool zero = false;  // the block reads as zeros already
  {
    MutexLock lock(mu_);
    if (auto reused = free_blocks_.find(size); reused != free_blocks_.end()) {
      data = reused->second;
      free_blocks_.erase(reused);
      stats_.reuses++;
    } else {
      // Best fit among the slabs' unused tails, else a new slab.
      auto tail = tail_free_.end();
      for (auto it = tail_free_.begin(); it != tail_free_.end(); ++it) {
        if (it->second.size >= size && (tail == tail_free_.end() || it->second.size < tail->second.size)) tail = it;
      }
      if (tail == tail_free_.end()) {
        STRATA_ASSIGN_OR_RETURN(std::span<std::byte> slab, reserve_slab_locked(size));
        tail = tail_free_.emplace(slab.data(), Tail{slab.size(), /*zero=*/true}).first;  // fresh pages: zero
      }
      data = tail->first;
      zero = tail->second.zero;
      const Tail left{tail->second.size - size, tail->second.zero};
      tail_free_.erase(tail);
      if (left.size > 0) tail_free_.emplace(data + size, left);
    }
    stats_.acquires++;
    stats_.in_use += size;
    stats_.peak = std::max(stats_.peak, stats_.in_use);
    if (fill == PinnedFill::zero && !zero) stats_.zeroed_bytes += size;
  }
  // The block is the caller's now: zeroed outside the lock.
  if (fill == PinnedFill::zero && !zero) zero_on_every_core(data, size);
  return PinnedBuffer(this, data, size);
}

StatusOr<std::span<std::byte>> PinnedPool::reserve_slab_locked(uint64_t bytes) {
  uint64_t slab_bytes = std::max(bytes, round_up_pages(options_.slab_bytes));
  if (options_.capacity > 0) {
    const uint64_t left = options_.capacity > stats_.reserved ? options_.capacity - stats_.reserved : 0;
    if (bytes > left) {
      uint64_t idle = 0;
      for (const auto& [size, block] : free_blocks_) idle += size;
      return error(Code::out_of_memory,
                   "pinned memory capacity exceeded: a request of {} needs a new slab but {} of the {} capacity is "
                   "reserved ({} in use, {} in freed blocks of other sizes); raise the pinned memory capacity or "
                   "lower the prefetch window",
                   format_size(bytes), format_size(stats_.reserved), format_size(options_.capacity),
                   format_size(stats_.in_use), format_size(idle));
    }
    slab_bytes = std::min(slab_bytes, left / kPinnedAlignment * kPinnedAlignment);
  }
  const auto start = std::chrono::steady_clock::now();
  PinnedKind kind = kind_.load();
  // Mapped here and faulted in on every core (every page of the slab is used: pay for them now),
  // then locked: by the CUDA driver's registration, else by mlock. cudaHostAlloc would fault in
  // and pin every page on this one thread.
  STRATA_ASSIGN_OR_RETURN(std::byte* base, map_pages(slab_bytes, options_.huge_pages));
  fault_in(base, slab_bytes);
#ifdef STRATA_HAVE_CUDA
  if (kind == PinnedKind::cuda_host) {
    if (Status registered = cuda_host_register(base, slab_bytes); !registered.is_ok()) {
      warn_once("pinned-pool-cuda", fmt::format("{}; falling back to mlock'd host memory", registered.message()));
      kind = PinnedKind::mlock;
    }
  }
#endif
  if (kind == PinnedKind::mlock && mlock(base, slab_bytes) != 0) {
    warn_pageable(errno_status(errno, fmt::format("mlock of a {} slab", format_size(slab_bytes))));
    kind = PinnedKind::pageable;
  }
  kind_.store(kind);
  stats_.kind = kind;
  slabs_.push_back(Slab{base, slab_bytes, kind});
  stats_.reserved += slab_bytes;
  reserved_.store(stats_.reserved, std::memory_order_relaxed);
  stats_.slabs = slabs_.size();
  stats_.reserve_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::span<std::byte> span(base, slab_bytes);
  if (listener_) listener_(slabs_.size() - 1, span);
  return span;
}

void PinnedPool::give_back(std::byte* data, uint64_t size) {
  MutexLock lock(mu_);
  free_blocks_.emplace(size, data);
  stats_.in_use -= size;
}

PinnedPoolStats PinnedPool::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

std::vector<std::span<std::byte>> PinnedPool::slabs() const {
  MutexLock lock(mu_);
  std::vector<std::span<std::byte>> out;
  out.reserve(slabs_.size());
  for (const Slab& slab : slabs_) out.emplace_back(slab.base, slab.size);
  return out;
}

void PinnedPool::set_slab_listener(std::function<void(size_t, std::span<std::byte>)> on_new_slab) {
  MutexLock lock(mu_);
  listener_ = std::move(on_new_slab);
}

int PinnedPool::slab_index(const void* p) const {
  const auto* b = static_cast<const std::byte*>(p);
  MutexLock lock(mu_);
  for (size_t i = 0; i < slabs_.size(); i++) {
    if (b >= slabs_[i].base && b < slabs_[i].base + slabs_[i].size) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace strata
