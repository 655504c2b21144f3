// GradientOffloader (gradient_offloader.h): device slots per group, one pinned staging buffer,
// pinned fp32 accumulators per chunk; copies and accumulations ordered on the d2h stream.
#include "offload/gradient_offloader.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "kernels/cpu/grad_accumulate.h"
#include "offload/trace.h"
#include "runtime/thread_pool.h"

namespace strata {
namespace {

constexpr uint64_t kArenaAlignment = 256;   // Backend::allocate's block alignment
constexpr uint64_t kPinnedGranule = 4096;   // PinnedPool rounds every block up to 4 KiB
constexpr size_t kAccumulateGrain = 1 << 16;  // elements per parallel task (256 KiB of fp32)

uint64_t round_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

std::string group_name(const GradientOffloaderOptions& o, size_t g) {
  if (g < o.group_names.size() && !o.group_names[g].empty()) return o.group_names[g];
  return fmt::format("group {}", g);
}

// Largest chunk per group (0 for a group without chunks). Assumes chunk_group is in range.
std::vector<uint64_t> group_slot_bytes(const GradientOffloaderOptions& o) {
  std::vector<uint64_t> bytes(o.group_slots.size(), 0);
  for (size_t c = 0; c < o.chunk_bytes.size() && c < o.chunk_group.size(); ++c) {
    const size_t g = o.chunk_group[c];
    if (g < bytes.size()) bytes[g] = std::max(bytes[g], o.chunk_bytes[c]);
  }
  return bytes;
}

Status validate(const GradientOffloaderOptions& o) {
  const size_t es = kernels::float_format_size(o.format);
  if (o.chunk_bytes.empty()) return error(Code::invalid_argument, "{}: no chunks", o.name);
  if (o.chunk_group.size() != o.chunk_bytes.size()) {
    return error(Code::invalid_argument, "{}: {} chunk sizes but {} chunk groups", o.name, o.chunk_bytes.size(),
                 o.chunk_group.size());
  }
  for (size_t c = 0; c < o.chunk_bytes.size(); ++c) {
    if (o.chunk_bytes[c] == 0 || o.chunk_bytes[c] % es != 0) {
      return error(Code::invalid_argument, "{}: chunk {} has {} bytes, not a positive multiple of the {}-byte {} element",
                   o.name, c, o.chunk_bytes[c], es, kernels::float_format_name(o.format));
    }
    if (o.chunk_group[c] >= o.group_slots.size()) {
      return error(Code::invalid_argument, "{}: chunk {} is in slot group {}, but there are {} groups", o.name, c,
                   o.chunk_group[c], o.group_slots.size());
    }
  }
  for (size_t g = 0; g < o.group_slots.size(); ++g) {
    if (o.group_slots[g] == 0) {
      return error(Code::invalid_argument, "{}: slot group '{}' has 0 device slots (at least 1)", o.name,
                   group_name(o, g));
    }
  }
  return Status::ok();
}

uint64_t nanos_since(std::chrono::steady_clock::time_point t0) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

uint64_t gradient_offloader_device_bytes(const GradientOffloaderOptions& options) {
  const std::vector<uint64_t> largest = group_slot_bytes(options);
  uint64_t total = 0;
  for (size_t g = 0; g < largest.size(); ++g) {
    if (largest[g] > 0) total += options.group_slots[g] * round_up(largest[g], kArenaAlignment);
  }
  return total;
}

uint64_t gradient_offloader_pinned_bytes(const GradientOffloaderOptions& options) {
  const size_t es = kernels::float_format_size(options.format);
  uint64_t total = 0, largest = 0;
  for (uint64_t b : options.chunk_bytes) {
    total += round_up(b / es * sizeof(float), kPinnedGranule);
    largest = std::max(largest, b);
  }
  return total + round_up(largest, kPinnedGranule);
}

GradientOffloader::GradientOffloader(Backend& backend, const GradientOffloaderOptions& options, ThreadPool* pool,
                                     TraceRecorder* trace)
    : backend_(backend), options_(options), pool_(pool), trace_(trace) {
  if (pool_ != nullptr) {
    parallel_for_ = [pool = pool_](size_t n, size_t grain, const std::function<void(size_t, size_t)>& body) {
      pool->parallel_for(n, grain, body);
    };
  }
}

StatusOr<std::unique_ptr<GradientOffloader>> GradientOffloader::create(Backend& backend, PinnedPool& pinned,
                                                                       const GradientOffloaderOptions& options,
                                                                       ThreadPool* pool, TraceRecorder* trace) {
  STRATA_RETURN_IF_ERROR(validate(options));
  std::unique_ptr<GradientOffloader> o(new GradientOffloader(backend, options, pool, trace));
  // From here a failure returns and the destructor frees whatever was taken.
  const std::vector<uint64_t> slot_bytes = group_slot_bytes(options);
  o->groups_.resize(options.group_slots.size());
  for (size_t g = 0; g < o->groups_.size(); ++g) {
    Group& group = o->groups_[g];
    group.name = group_name(options, g);
    if (slot_bytes[g] == 0) continue;  // a group without chunks needs no slots
    group.slots.resize(options.group_slots[g]);
    for (size_t i = 0; i < group.slots.size(); ++i) {
      Slot& s = group.slots[i];
      const std::string tag = fmt::format("{} slot ({}) {}/{}", options.name, group.name, i + 1, group.slots.size());
      STRATA_ASSIGN_OR_RETURN(void* p, backend.allocate(slot_bytes[g], tag));
      s.device = static_cast<std::byte*>(p);
      s.bytes = slot_bytes[g];
      s.ready = backend.create_event();
      s.copied_out = backend.create_event();
    }
  }
  const size_t es = kernels::float_format_size(options.format);
  uint64_t largest = 0;
  o->chunks_.resize(options.chunk_bytes.size());
  for (size_t c = 0; c < o->chunks_.size(); ++c) {
    Chunk& ch = o->chunks_[c];
    ch.bytes = options.chunk_bytes[c];
    ch.group = options.chunk_group[c];
    largest = std::max(largest, ch.bytes);
    StatusOr<PinnedBuffer> acc = pinned.acquire(ch.bytes / es * sizeof(float));
    if (!acc.is_ok()) {
      return acc.status().with_context(fmt::format("{}: fp32 accumulator of chunk {}", options.name, c));
    }
    ch.accumulator = std::move(*acc);
    std::memset(ch.accumulator.data(), 0, ch.accumulator.size());  // reads as zero before the first step
  }
  StatusOr<PinnedBuffer> staging = pinned.acquire(largest);
  if (!staging.is_ok()) return staging.status().with_context(fmt::format("{}: staging buffer", options.name));
  o->staging_ = std::move(*staging);
  return o;
}

GradientOffloader::~GradientOffloader() {
  // Every queued fill, copy and callback touches our slots or buffers: wait for them first.
  (void)backend_.synchronize(Stream::compute);
  (void)backend_.synchronize(Stream::d2h);
  for (Group& g : groups_) {
    for (Slot& s : g.slots) {
      if (s.device != nullptr) (void)backend_.release(s.device);
    }
  }
}

uint64_t GradientOffloader::chunk_bytes(size_t c) const { return chunks_[c].bytes; }

const float* GradientOffloader::accumulated(size_t c) const { return chunks_[c].accumulator.as<float>(); }

size_t GradientOffloader::accumulated_count(size_t c) const { return elements(c); }

double GradientOffloader::partial(size_t c) const { return chunks_[c].partial; }

Status GradientOffloader::begin_step() {
  if (!sticky_.is_ok()) return sticky_;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    if (chunks_[c].slot >= 0) {
      return error(Code::failed_precondition, "{}: begin_step while chunk {} is still acquired", options_.name, c);
    }
  }
  // No callback of an earlier step may still run when the flags are reset (a no-op after finish_step).
  Status st = backend_.synchronize(Stream::d2h);
  if (!st.is_ok()) return sticky_ = st.with_context(options_.name);
  for (Chunk& ch : chunks_) {
    ch.touched = false;
    ch.partial_ready = false;
    ch.partial = 0.0;
  }
  in_step_ = true;
  last_micro_batch_ = true;
  return Status::ok();
}

StatusOr<std::byte*> GradientOffloader::acquire(size_t c) {
  if (!sticky_.is_ok()) return sticky_;
  if (c >= chunks_.size()) {
    return error(Code::invalid_argument, "{}: chunk {} out of range ({} chunks)", options_.name, c, chunks_.size());
  }
  if (!in_step_) return error(Code::failed_precondition, "{}: acquire of chunk {} outside a step (begin_step first)", options_.name, c);
  Chunk& ch = chunks_[c];
  if (ch.slot >= 0) {
    return error(Code::failed_precondition, "{}: chunk {} is already acquired (release it first)", options_.name, c);
  }
  Group& group = groups_[ch.group];
  const size_t n = group.slots.size();
  long found = -1;
  for (size_t k = 0; k < n; ++k) {
    const size_t s = (group.next + k) % n;
    if (group.slots[s].held_by < 0) {
      found = static_cast<long>(s);
      break;
    }
  }
  if (found < 0) {
    return error(Code::failed_precondition, "{}: chunk {}: all {} device slots of group '{}' are held (release one first)",
                 options_.name, c, n, group.name);
  }
  Slot& slot = group.slots[static_cast<size_t>(found)];
  // The slot's previous copy-out must finish before the compute zeroes and writes it. The host
  // does not block: compute waits.
  Status st = backend_.wait(Stream::compute, *slot.copied_out);
  if (st.is_ok()) st = backend_.fill_zero(slot.device, ch.bytes, Stream::compute);
  if (!st.is_ok()) return sticky_ = st.with_context(fmt::format("{}: acquire of chunk {}", options_.name, c));
  group.next = (static_cast<size_t>(found) + 1) % n;
  slot.held_by = static_cast<long>(c);
  ch.slot = found;
  return slot.device;
}

Status GradientOffloader::release(size_t c, bool last) {
  if (!sticky_.is_ok()) return sticky_;
  if (c >= chunks_.size()) {
    return error(Code::invalid_argument, "{}: chunk {} out of range ({} chunks)", options_.name, c, chunks_.size());
  }
  Chunk& ch = chunks_[c];
  if (ch.slot < 0) return error(Code::failed_precondition, "{}: release of chunk {}, which is not acquired", options_.name, c);
  Slot& slot = groups_[ch.group].slots[static_cast<size_t>(ch.slot)];
  const uint64_t bytes = ch.bytes;
  const bool final = last && last_micro_batch_;
  auto copy = [&] { return backend_.copy_to_host(staging_.data(), slot.device, bytes, Stream::d2h); };

  // Stream order on d2h makes the one staging buffer safe: this copy starts only after every
  // earlier d2h item, including the callback that consumed the previous copy, has finished; and
  // this callback runs before any later copy overwrites the staging buffer.
  Status st = backend_.record(*slot.ready, Stream::compute);
  if (st.is_ok()) st = backend_.wait(Stream::d2h, *slot.ready);
  if (st.is_ok()) {
    st = trace_ == nullptr ? copy()
                           : trace_->stream_span(backend_, Stream::d2h, "d2h", fmt::format("{} chunk {}", options_.name, c),
                                                 copy, {{"chunk", static_cast<int64_t>(c)}, {"bytes", static_cast<int64_t>(bytes)}});
  }
  if (st.is_ok()) st = backend_.record(*slot.copied_out, Stream::d2h);
  if (st.is_ok()) st = backend_.host_callback(Stream::d2h, [this, c, final] { accumulate_callback(c, final); });
  // The slot is free for a later acquire either way: that acquire orders itself after copied_out.
  slot.held_by = -1;
  ch.slot = -1;
  if (!st.is_ok()) return sticky_ = st.with_context(fmt::format("{}: release of chunk {}", options_.name, c));
  d2h_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return Status::ok();
}

void GradientOffloader::accumulate_callback(size_t c, bool final) {
  Chunk& ch = chunks_[c];
  const bool first = !ch.touched;
  ch.touched = true;
  const size_t n = elements(c);
  const double trace_begin = trace_ != nullptr ? trace_->now_us() : 0.0;
  const auto t0 = std::chrono::steady_clock::now();
  float* acc = ch.accumulator.as<float>();
  const std::byte* src = staging_.data();
  const size_t es = kernels::float_format_size(options_.format);
  const kernels::FloatFormat format = options_.format;
  if (pool_ != nullptr && n >= 2 * kAccumulateGrain) {
    // Elementwise, so the split cannot change a bit.
    pool_->parallel_for(n, kAccumulateGrain, [&](size_t begin, size_t end) {
      kernels::accumulate_widened(format, src + begin * es, acc + begin, end - begin, first);
    });
  } else {
    kernels::accumulate_widened(format, src, acc, n, first);
  }
  accumulate_ns_.fetch_add(nanos_since(t0), std::memory_order_relaxed);
  contributions_.fetch_add(1, std::memory_order_relaxed);
  // A contribution after the partial was taken (a misuse of `last`) makes it stale: finish_step
  // recomputes it.
  ch.partial_ready = false;
  if (final) {
    ch.partial = chunk_sum_squares(c);
    ch.partial_ready = true;
  }
  if (trace_ != nullptr) {
    trace_->span("host accumulate", fmt::format("{} chunk {}", options_.name, c), trace_begin, trace_->now_us(),
                 {{"chunk", static_cast<int64_t>(c)}, {"first", first ? 1 : 0}, {"partial", final ? 1 : 0}});
  }
}

double GradientOffloader::chunk_sum_squares(size_t c) {
  const auto t0 = std::chrono::steady_clock::now();
  const double s = kernels::sum_squares(chunks_[c].accumulator.as<float>(), elements(c), parallel_for_);
  partials_ns_.fetch_add(nanos_since(t0), std::memory_order_relaxed);
  return s;
}

StatusOr<double> GradientOffloader::finish_step() {
  if (!sticky_.is_ok()) return sticky_;
  if (!in_step_) return error(Code::failed_precondition, "{}: finish_step without begin_step", options_.name);
  for (size_t c = 0; c < chunks_.size(); ++c) {
    if (chunks_[c].slot >= 0) {
      return error(Code::failed_precondition, "{}: finish_step while chunk {} is still acquired", options_.name, c);
    }
  }
  Status st = backend_.synchronize(Stream::d2h);
  if (!st.is_ok()) return sticky_ = st.with_context(fmt::format("{}: finish_step", options_.name));
  in_step_ = false;
  // The callbacks are done (synchronize orders their writes before our reads).
  double total = 0.0;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    Chunk& ch = chunks_[c];
    if (!ch.touched) {
      std::memset(ch.accumulator.data(), 0, elements(c) * sizeof(float));
      ch.partial = 0.0;  // sum_squares of zeros, by the definition
      ch.partial_ready = true;
    } else if (!ch.partial_ready) {
      ch.partial = chunk_sum_squares(c);
      ch.partial_ready = true;
    }
    total += ch.partial;
  }
  return total;
}

GradientOffloaderStats GradientOffloader::stats() const {
  GradientOffloaderStats s;
  s.d2h_bytes = d2h_bytes_.load(std::memory_order_relaxed);
  s.contributions = contributions_.load(std::memory_order_relaxed);
  s.accumulate_seconds = static_cast<double>(accumulate_ns_.load(std::memory_order_relaxed)) * 1e-9;
  s.partials_seconds = static_cast<double>(partials_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return s;
}

void GradientOffloader::reset_stats() {
  d2h_bytes_.store(0);
  contributions_.store(0);
  accumulate_ns_.store(0);
  partials_ns_.store(0);
}

}  // namespace strata
