// GradientOffloader (gradient_offloader.h): device slots per group, one pinned staging buffer,
// pinned fp32 accumulators per chunk (home cpu) or NVMe extents per chunk spilled through a few
// pinned buffers (home nvme); copies, accumulations and extent writes ordered on the d2h stream.
#include "offload/gradient_offloader.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/cpu/grad_accumulate.h"
#include "offload/trace.h"
#include "runtime/align.h"
#include "runtime/thread_pool.h"
#include "runtime/units.h"

namespace strata {
namespace {

constexpr size_t kAccumulateGrain = 1 << 16;  // elements per parallel task (256 KiB of fp32)

// Per group: slots of its largest chunk's bytes (0 for a group without chunks: no slots).
std::vector<SlotGroupSpec> slot_specs(const GradientOffloaderOptions& o) {
  return slot_group_specs(o.chunk_bytes, o.chunk_group, o.group_slots, o.group_names, 1);
}

// Home nvme: the fp32 bytes each spill buffer holds (padded to `alignment`): buffer i as the i-th
// largest chunk's sum (the smallest chunk's past the chunk count), so a model with one large chunk
// (an embedding) pins one buffer of its size and the rest of a layer's.
std::vector<uint64_t> spill_sizes(const GradientOffloaderOptions& o, uint64_t alignment) {
  const size_t es = kernels::float_format_size(o.format);
  std::vector<uint64_t> fp32;
  for (uint64_t b : o.chunk_bytes) fp32.push_back(round_up(b / es * sizeof(float), alignment));
  std::sort(fp32.begin(), fp32.end(), std::greater<>());
  std::vector<uint64_t> sizes;
  for (size_t i = 0; i < o.spill_buffers && !fp32.empty(); ++i) sizes.push_back(fp32[std::min(i, fp32.size() - 1)]);
  return sizes;
}

Status validate(const GradientOffloaderOptions& o, bool have_store) {
  const size_t es = kernels::float_format_size(o.format);
  if (o.chunk_bytes.empty()) return error(Code::invalid_argument, "{}: no chunks", o.name);
  if (o.home != Tier::cpu && o.home != Tier::nvme) {
    return error(Code::invalid_argument, "{}: the fp32 accumulators' home must be cpu or nvme, not {}", o.name,
                 tier_name(o.home));
  }
  if (o.home == Tier::nvme && !have_store) {
    return error(Code::invalid_argument, "{}: fp32 accumulators homed on nvme need an NvmeStore (none was given)",
                 o.name);
  }
  if (o.home == Tier::nvme && o.spill_buffers < 2) {
    return error(Code::invalid_argument,
                 "{}: fp32 accumulators homed on nvme need at least 2 spill buffers (the tied embedding keeps one "
                 "from the head's contribution to its own while the layers use another); got {}",
                 o.name, o.spill_buffers);
  }
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
                   slot_group_name(o.group_names, g));
    }
  }
  return Status::ok();
}

// Spans "<name> chunk <c>" on "grad nvme read" / "grad nvme write"; errors "NVMe read of chunk c's
// fp32 gradient".
StagingRingOptions spill_ring_options(const std::string& name) {
  StagingRingOptions r;
  r.name = name;
  r.what = "spill buffer";
  r.read_track = "grad nvme read";
  r.write_track = "grad nvme write";
  r.span_name = [name](size_t c) { return fmt::format("{} chunk {}", name, c); };
  r.subject = [](size_t c) { return fmt::format("chunk {}'s fp32 gradient", c); };
  return r;
}

uint64_t nanos_since(std::chrono::steady_clock::time_point t0) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

uint64_t gradient_offloader_device_bytes(const GradientOffloaderOptions& options) {
  return slot_groups_device_bytes(slot_specs(options));
}

uint64_t gradient_offloader_pinned_bytes(const GradientOffloaderOptions& options, uint32_t store_alignment) {
  const size_t es = kernels::float_format_size(options.format);
  uint64_t total = 0, largest = 0;
  for (uint64_t b : options.chunk_bytes) {
    if (options.home != Tier::nvme) total += round_up(b / es * sizeof(float), kHostPage);
    largest = std::max(largest, b);
  }
  if (options.home == Tier::nvme) {
    const uint64_t a = std::max<uint64_t>(store_alignment, 1);
    total += StagingRing::pinned_bytes(spill_sizes(options, a), a);
  }
  return total + round_up(largest, kHostPage);
}

uint64_t gradient_offloader_nvme_bytes(const GradientOffloaderOptions& options, uint32_t store_alignment) {
  if (options.home != Tier::nvme) return 0;
  const size_t es = kernels::float_format_size(options.format);
  const uint64_t a = std::max<uint64_t>(store_alignment, 1);
  uint64_t total = 0;
  for (uint64_t b : options.chunk_bytes) total += round_up(b / es * sizeof(float), a);
  return total;
}

GradientOffloader::GradientOffloader(Backend& backend, const GradientOffloaderOptions& options, ThreadPool* pool,
                                     TraceRecorder* trace, NvmeStore* store)
    : backend_(backend), options_(options), pool_(pool), trace_(trace), store_(store),
      spills_(store, trace, spill_ring_options(options.name)) {
  if (pool_ != nullptr) {
    parallel_for_ = [pool = pool_](size_t n, size_t grain, const std::function<void(size_t, size_t)>& body) {
      pool->parallel_for(n, grain, body);
    };
  }
}

StatusOr<std::unique_ptr<GradientOffloader>> GradientOffloader::create(Backend& backend, PinnedPool& pinned,
                                                                       const GradientOffloaderOptions& options,
                                                                       ThreadPool* pool, TraceRecorder* trace,
                                                                       NvmeStore* store) {
  STRATA_RETURN_IF_ERROR(validate(options, store != nullptr));
  if (options.home != Tier::nvme) store = nullptr;  // a store given with home cpu is not used
  std::unique_ptr<GradientOffloader> o(new GradientOffloader(backend, options, pool, trace, store));
  // From here a failure returns and the destructor frees whatever was taken.
  STRATA_ASSIGN_OR_RETURN(o->groups_, carve_slot_groups(backend, options.name, slot_specs(options)));
  o->group_next_.assign(o->groups_.size(), 0);
  const size_t es = kernels::float_format_size(options.format);
  uint64_t largest = 0;
  o->chunks_.resize(options.chunk_bytes.size());
  for (size_t c = 0; c < o->chunks_.size(); ++c) {
    Chunk& ch = o->chunks_[c];
    ch.bytes = options.chunk_bytes[c];
    if (options.block_partials)
      ch.blocks.assign((ch.bytes / es + kernels::kSumSquaresBlock - 1) / kernels::kSumSquaresBlock, 0.0);
    ch.group = options.chunk_group[c];
    largest = std::max(largest, ch.bytes);
    if (options.home == Tier::nvme) continue;
    // Reads as zero before the first step.
    StatusOr<PinnedBuffer> acc = pinned.acquire(ch.bytes / es * sizeof(float), PinnedFill::zero);
    if (!acc.is_ok()) {
      return acc.status().with_context(fmt::format("{}: fp32 accumulator of chunk {}", options.name, c));
    }
    ch.accumulator = std::move(*acc);
  }
  if (options.home == Tier::nvme) STRATA_RETURN_IF_ERROR(o->carve_nvme(pinned));
  StatusOr<PinnedBuffer> staging = pinned.acquire(largest);
  if (!staging.is_ok()) return staging.status().with_context(fmt::format("{}: staging buffer", options.name));
  o->staging_ = std::move(*staging);
  return o;
}

Status GradientOffloader::carve_nvme(PinnedPool& pinned) {
  const GradientOffloaderOptions& o = options_;
  const uint32_t a = store_->alignment();
  for (size_t c = 0; c < chunks_.size(); ++c) {
    StatusOr<ExtentId> e = store_->allocate(fmt::format("{} chunk {}", o.name, c), elements(c) * sizeof(float));
    if (!e.is_ok()) {
      return e.status().with_context(fmt::format("{}: NVMe extent of chunk {}'s fp32 gradient (all chunks need {})",
                                                 o.name, c, format_size(gradient_offloader_nvme_bytes(o, a))));
    }
    chunks_[c].extent = *e;
  }
  STRATA_RETURN_IF_ERROR(spills_.carve(pinned, spill_sizes(o, a)));
  spill_use_.resize(spills_.size());
  for (SpillUse& u : spill_use_) u.done = backend_.create_event();
  return Status::ok();
}

GradientOffloader::~GradientOffloader() {
  // Every queued fill, copy and callback touches our slots or buffers: wait for them first.
  (void)backend_.synchronize(Stream::compute);
  (void)backend_.synchronize(Stream::d2h);
  for (size_t b = 0; b < spills_.size(); ++b) (void)spills_.finish(b);  // every transfer, before its extent goes
  for (Chunk& ch : chunks_) {
    if (ch.extent == 0) continue;
    Status r = store_->release(ch.extent);
    if (!r.is_ok()) spdlog::error("{}: releasing an NVMe extent: {}", options_.name, r.to_string());
  }
  groups_.clear();  // the device slots, now that no stream uses them
}

uint64_t GradientOffloader::chunk_bytes(size_t c) const { return chunks_[c].bytes; }

const float* GradientOffloader::accumulated(size_t c) const {
  return nvme() ? nullptr : chunks_[c].accumulator.as<float>();
}

size_t GradientOffloader::accumulated_count(size_t c) const { return elements(c); }

double GradientOffloader::partial(size_t c) const { return chunks_[c].partial; }

Status GradientOffloader::begin_step() {
  STRATA_RETURN_IF_ERROR(sticky_.status());
  for (size_t c = 0; c < chunks_.size(); ++c) {
    if (chunks_[c].slot >= 0) {
      return error(Code::failed_precondition, "{}: begin_step while chunk {} is still acquired", options_.name, c);
    }
    if (chunks_[c].reading) {
      return error(Code::failed_precondition, "{}: begin_step while the read of chunk {} is outstanding (end_read first)",
                   options_.name, c);
    }
  }
  // No callback of an earlier step may still run when the flags are reset (a no-op after finish_step).
  Status st = backend_.synchronize(Stream::d2h);
  if (!st.is_ok()) return sticky_.record(st.with_context(options_.name));
  STRATA_RETURN_IF_ERROR(sticky_.status());
  // Home nvme: the buffers hold the last step's values; a step abandoned before finish_step may
  // leave writes in flight. Finish them, then every buffer is free.
  for (size_t b = 0; b < spills_.size(); ++b) {
    st = spills_.finish(b);
    if (!st.is_ok()) return sticky_.record(st);
    detach(b);
  }
  for (Chunk& ch : chunks_) {
    ch.touched = false;
    ch.partial_ready = false;
    ch.partial = 0.0;
    ch.open = false;
    ch.released = false;
  }
  in_step_ = true;
  last_micro_batch_ = true;
  return Status::ok();
}

StatusOr<std::byte*> GradientOffloader::acquire(size_t c) {
  STRATA_RETURN_IF_ERROR(sticky_.status());
  if (c >= chunks_.size()) {
    return error(Code::invalid_argument, "{}: chunk {} out of range ({} chunks)", options_.name, c, chunks_.size());
  }
  if (!in_step_) return error(Code::failed_precondition, "{}: acquire of chunk {} outside a step (begin_step first)", options_.name, c);
  Chunk& ch = chunks_[c];
  if (ch.slot >= 0) {
    return error(Code::failed_precondition, "{}: chunk {} is already acquired (release it first)", options_.name, c);
  }
  SlotGroup& group = groups_[ch.group];
  size_t& next = group_next_[ch.group];
  const size_t n = group.size();
  long found = -1;
  for (size_t k = 0; k < n; ++k) {
    const size_t s = (next + k) % n;
    if (group[s].chunk < 0) {
      found = static_cast<long>(s);
      break;
    }
  }
  if (found < 0) {
    return error(Code::failed_precondition, "{}: chunk {}: all {} device slots of group '{}' are held (release one first)",
                 options_.name, c, n, group.name());
  }
  if (nvme() && ch.spill < 0) {
    // A buffer for c's accumulator; c's value so far (an earlier micro-batch's) comes back from its
    // extent under the backward's compute. Still in a buffer (c kept it): no read.
    STRATA_ASSIGN_OR_RETURN(size_t b, take_spill(c));
    if (ch.released) {
      Status st = begin_extent_io(c, b, IoOp::read);
      if (!st.is_ok()) return sticky_.record(st);
    }
  }
  if (nvme()) ch.open = true;
  DeviceSlot& slot = group[static_cast<size_t>(found)];
  // The slot's previous copy-out must finish before the compute zeroes and writes it. The host
  // does not block: compute waits.
  Status st = backend_.wait(Stream::compute, *slot.drained);
  if (st.is_ok()) st = backend_.fill_zero(slot.ptr, ch.bytes, Stream::compute);
  if (!st.is_ok()) return sticky_.record(st.with_context(fmt::format("{}: acquire of chunk {}", options_.name, c)));
  next = (static_cast<size_t>(found) + 1) % n;
  slot.chunk = static_cast<int64_t>(c);
  ch.slot = found;
  return slot.ptr;
}

Status GradientOffloader::release(size_t c, bool last) {
  STRATA_RETURN_IF_ERROR(sticky_.status());
  if (c >= chunks_.size()) {
    return error(Code::invalid_argument, "{}: chunk {} out of range ({} chunks)", options_.name, c, chunks_.size());
  }
  Chunk& ch = chunks_[c];
  if (ch.slot < 0) return error(Code::failed_precondition, "{}: release of chunk {}, which is not acquired", options_.name, c);
  DeviceSlot& slot = groups_[ch.group][static_cast<size_t>(ch.slot)];
  const uint64_t bytes = ch.bytes;
  const bool final = last && last_micro_batch_;
  const long b = ch.spill;  // home nvme: the buffer acquire gave c
  auto copy = [&] { return backend_.copy_to_host(staging_.data(), slot.ptr, bytes, Stream::d2h); };

  // Stream order on d2h makes the one staging buffer safe: this copy starts only after every
  // earlier d2h item, including the callback that consumed the previous copy, has finished; and
  // this callback runs before any later copy overwrites the staging buffer.
  Status st = backend_.record(*slot.filled, Stream::compute);
  if (st.is_ok()) st = backend_.wait(Stream::d2h, *slot.filled);
  if (st.is_ok()) {
    st = trace_ == nullptr ? copy()
                           : trace_->stream_span(backend_, Stream::d2h, "d2h", fmt::format("{} chunk {}", options_.name, c),
                                                 copy, {{"chunk", static_cast<int64_t>(c)}, {"bytes", static_cast<int64_t>(bytes)}});
  }
  if (st.is_ok()) st = backend_.record(*slot.drained, Stream::d2h);
  if (st.is_ok()) {
    if (nvme()) {
      st = backend_.host_callback(Stream::d2h, [this, c, b, final, last] {
        spill_callback(c, static_cast<size_t>(b), final, last);
      });
      // Marks the buffer's last callback: taking the buffer back waits for it.
      if (st.is_ok()) st = backend_.record(*spill_use_[static_cast<size_t>(b)].done, Stream::d2h);
    } else {
      st = backend_.host_callback(Stream::d2h, [this, c, final] { accumulate_callback(c, final); });
    }
  }
  // The slot is free for a later acquire either way: that acquire orders itself after `drained`.
  slot.chunk = -1;
  ch.slot = -1;
  if (nvme()) {
    ch.open = !last;
    ch.released = true;
    if (last) spill_use_[static_cast<size_t>(b)].closed_at = ++use_clock_;
  }
  if (!st.is_ok()) return sticky_.record(st.with_context(fmt::format("{}: release of chunk {}", options_.name, c)));
  d2h_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return Status::ok();
}

void GradientOffloader::accumulate_callback(size_t c, bool final) {
  accumulate_into(c, chunks_[c].accumulator.as<float>(), final);
}

void GradientOffloader::spill_callback(size_t c, size_t b, bool final, bool last) {
  // After a failure nothing more is worth doing, but a transfer begun must still be finished.
  if (!sticky_.ok()) {
    (void)spills_.finish(b);
    return;
  }
  // The read acquire began (c's value from an earlier micro-batch), or c's previous write from
  // this buffer (c kept it): both begun before this callback was queued.
  Status st = spills_.finish(b);
  if (!st.is_ok()) {
    (void)sticky_.record(st);
    return;
  }
  accumulate_into(c, spill_data(b), final);
  if (last) {
    st = begin_extent_io(c, b, IoOp::write);
    if (!st.is_ok()) (void)sticky_.record(st);
  }
}

void GradientOffloader::accumulate_into(size_t c, float* acc, bool final) {
  Chunk& ch = chunks_[c];
  const bool first = !ch.touched;
  ch.touched = true;
  const size_t n = elements(c);
  const double trace_begin = trace_ != nullptr ? trace_->now_us() : 0.0;
  const auto t0 = std::chrono::steady_clock::now();
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
    ch.partial = chunk_sum_squares(c, acc);
    ch.partial_ready = true;
  }
  if (trace_ != nullptr) {
    trace_->span("host accumulate", fmt::format("{} chunk {}", options_.name, c), trace_begin, trace_->now_us(),
                 {{"chunk", static_cast<int64_t>(c)}, {"first", first ? 1 : 0}, {"partial", final ? 1 : 0}});
  }
}

double GradientOffloader::chunk_sum_squares(size_t c, const float* acc) {
  const auto t0 = std::chrono::steady_clock::now();
  const double s = kernels::sum_squares(acc, elements(c), chunks_[c].blocks.empty() ? nullptr : chunks_[c].blocks.data(),
                                        parallel_for_);
  partials_ns_.fetch_add(nanos_since(t0), std::memory_order_relaxed);
  return s;
}

StatusOr<double> GradientOffloader::finish_step() {
  STRATA_RETURN_IF_ERROR(sticky_.status());
  if (!in_step_) return error(Code::failed_precondition, "{}: finish_step without begin_step", options_.name);
  for (size_t c = 0; c < chunks_.size(); ++c) {
    if (chunks_[c].slot >= 0) {
      return error(Code::failed_precondition, "{}: finish_step while chunk {} is still acquired", options_.name, c);
    }
  }
  Status st = backend_.synchronize(Stream::d2h);
  if (!st.is_ok()) return sticky_.record(st.with_context(fmt::format("{}: finish_step", options_.name)));
  STRATA_RETURN_IF_ERROR(sticky_.status());
  // The callbacks are done (synchronize orders their writes before our reads). Home nvme: finish
  // every write; a chunk never released with last = true (a misuse of `last`) is written now.
  for (size_t b = 0; b < spills_.size(); ++b) {
    const int64_t holder = spills_[b].holder;
    st = spills_.finish(b);
    if (st.is_ok() && holder >= 0 && chunks_[static_cast<size_t>(holder)].open) {
      const size_t c = static_cast<size_t>(holder);
      chunks_[c].open = false;
      spill_use_[b].closed_at = ++use_clock_;
      st = begin_extent_io(c, b, IoOp::write);
      if (st.is_ok()) st = spills_.finish(b);
    }
    if (!st.is_ok()) return sticky_.record(st);
  }
  in_step_ = false;
  double total = 0.0;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    Chunk& ch = chunks_[c];
    if (!ch.touched) {
      if (!nvme()) std::memset(ch.accumulator.data(), 0, elements(c) * sizeof(float));
      ch.partial = 0.0;  // sum_squares of zeros, by the definition
      std::fill(ch.blocks.begin(), ch.blocks.end(), 0.0);
      ch.partial_ready = true;
    } else if (!ch.partial_ready) {
      if (!nvme()) {
        ch.partial = chunk_sum_squares(c, ch.accumulator.as<float>());
      } else {
        StatusOr<const float*> acc = wait_read(c);  // no I/O while c's value is still in a buffer
        if (!acc.is_ok()) return sticky_.record(acc.status());
        ch.partial = chunk_sum_squares(c, *acc);
        end_read(c);
      }
      ch.partial_ready = true;
    }
    total += ch.partial;
  }
  return total;
}

// ---- reading the finished step ----------------------------------------------------------------

Status GradientOffloader::begin_read(size_t c) {
  if (c >= chunks_.size()) {
    return error(Code::invalid_argument, "{}: chunk {} out of range ({} chunks)", options_.name, c, chunks_.size());
  }
  STRATA_RETURN_IF_ERROR(sticky_.status());
  if (in_step_) {
    return error(Code::failed_precondition, "{}: read of chunk {} during a step (finish_step first)", options_.name, c);
  }
  Chunk& ch = chunks_[c];
  if (!nvme() || ch.reading) return Status::ok();
  if (ch.spill >= 0) {
    // c's value is still in a buffer from the step. When a smaller buffer holds it too, the read
    // moves there (from the extent, which has the value since the step's writes finished), keeping
    // the large buffers for the chunks only they hold.
    const long smaller = pick_spill(c, ch.spill);
    if (smaller >= 0 && spills_[static_cast<size_t>(smaller)].bytes < spills_[static_cast<size_t>(ch.spill)].bytes) {
      const size_t own = static_cast<size_t>(ch.spill);
      if (Status st = spills_.finish(own); !st.is_ok()) return sticky_.record(st);
      detach(own);
    }
  }
  STRATA_RETURN_IF_ERROR(load_for_read(c));
  ch.reading = true;
  return Status::ok();
}

Status GradientOffloader::load_for_read(size_t c) {
  if (chunks_[c].spill >= 0) return Status::ok();
  STRATA_ASSIGN_OR_RETURN(size_t b, take_spill(c));
  if (!chunks_[c].touched) {
    std::memset(spill_data(b), 0, elements(c) * sizeof(float));  // no contribution: zero
    return Status::ok();
  }
  Status st = begin_extent_io(c, b, IoOp::read);
  if (!st.is_ok()) detach(b);
  return st;
}

StatusOr<const float*> GradientOffloader::wait_read(size_t c) {
  STRATA_RETURN_IF_ERROR(begin_read(c));  // checks; a no-op when begun
  if (!nvme()) return accumulated(c);
  Chunk& ch = chunks_[c];
  if (Status st = load_for_read(c); !st.is_ok()) {  // its buffer was lent to a larger chunk's read
    ch.reading = false;
    return st;
  }
  const size_t b = static_cast<size_t>(ch.spill);
  Status st = spills_.finish(b);
  if (!st.is_ok()) {  // the buffer's contents are not c's: end the read
    ch.reading = false;
    detach(b);
    return st;
  }
  ch.handed_out = true;
  return static_cast<const float*>(spill_data(b));
}

void GradientOffloader::end_read(size_t c) {
  if (!nvme() || c >= chunks_.size() || !chunks_[c].reading) return;
  Chunk& ch = chunks_[c];
  ch.reading = false;
  ch.handed_out = false;
  if (ch.spill < 0) return;  // its buffer went to a larger chunk's read before it was waited for
  const size_t b = static_cast<size_t>(ch.spill);
  if (!spills_.finish(b).is_ok()) {  // begun, never waited for, and failed: not c's value
    detach(b);
    return;
  }
  spill_use_[b].closed_at = ++use_clock_;  // c keeps the buffer (and its value) until another needs it
}

// ---- home nvme helpers ------------------------------------------------------------------------

long GradientOffloader::pick_spill(size_t c, long except) const {
  const uint64_t need = elements(c) * sizeof(float);
  long best = -1;
  for (size_t b = 0; b < spills_.size(); ++b) {
    const StagingRing::Buffer& s = spills_[b];
    if (static_cast<long>(b) == except || s.bytes < need) continue;
    if (s.holder >= 0) {
      const Chunk& owner = chunks_[static_cast<size_t>(s.holder)];
      if (owner.open || owner.reading) continue;
    }
    if (best < 0) {
      best = static_cast<long>(b);
      continue;
    }
    const StagingRing::Buffer& t = spills_[static_cast<size_t>(best)];
    const bool better = s.bytes != t.bytes                    ? s.bytes < t.bytes
                        : (s.holder < 0) != (t.holder < 0) ? s.holder < 0
                                                             : spill_use_[b].closed_at < spill_use_[static_cast<size_t>(best)].closed_at;
    if (better) best = static_cast<long>(b);
  }
  return best;
}

StatusOr<size_t> GradientOffloader::take_spill(size_t c) {
  long best = pick_spill(c, -1);
  if (best < 0 && !in_step_) {
    // Reads hold every buffer large enough for c: take one from a read not waited for yet (its
    // transfer finished and dropped; its wait_read reads it again into another buffer).
    const uint64_t need = elements(c) * sizeof(float);
    for (size_t b = 0; b < spills_.size() && best < 0; ++b) {
      const StagingRing::Buffer& s = spills_[b];
      if (s.bytes < need || s.holder < 0 || chunks_[static_cast<size_t>(s.holder)].handed_out) continue;
      if (Status st = spills_.finish(b); !st.is_ok() && s.op() == IoOp::write) return sticky_.record(st);
      detach(b);
      best = static_cast<long>(b);
    }
  }
  if (best < 0) {
    std::string held;
    for (size_t b = 0; b < spills_.size(); ++b) held += fmt::format("{}{}", held.empty() ? "" : ", ", spills_[b].holder);
    if (!in_step_) {
      return error(Code::failed_precondition,
                   "{}: read of chunk {}: all {} spill buffers hold reads not ended (chunks {}); at most spill_buffers "
                   "reads are outstanding: end_read one first",
                   options_.name, c, spills_.size(), held);
    }
    return error(Code::failed_precondition,
                 "{}: chunk {}: all {} spill buffers hold chunks still being accumulated (chunks {}: acquired, or "
                 "released with last = false); raise spill_buffers",
                 options_.name, c, spills_.size(), held);
  }
  const size_t b = static_cast<size_t>(best);
  StagingRing::Buffer& s = spills_[b];
  if (s.holder >= 0) {
    // Take it back from a closed chunk: its last callback must have run (it began the write),
    // and the write must be done. The callback waits for nothing this thread does next.
    const auto t0 = std::chrono::steady_clock::now();
    Status st = backend_.synchronize(*spill_use_[b].done);
    spill_wait_ns_.fetch_add(nanos_since(t0), std::memory_order_relaxed);
    if (!st.is_ok()) {
      return sticky_.record(st.with_context(fmt::format("{}: waiting for chunk {}'s accumulation", options_.name, s.holder)));
    }
    STRATA_RETURN_IF_ERROR(sticky_.status());
    st = spills_.finish(b);
    if (!st.is_ok()) return sticky_.record(st);
    detach(b);
  }
  s.holder = static_cast<int64_t>(c);
  chunks_[c].spill = static_cast<long>(b);
  return b;
}

Status GradientOffloader::begin_extent_io(size_t c, size_t b, IoOp op) {
  return spills_.begin(b, op, chunks_[c].extent, c, store_->padded_size(elements(c) * sizeof(float)));
}

void GradientOffloader::detach(size_t b) {
  int64_t& holder = spills_[b].holder;
  if (holder >= 0) chunks_[static_cast<size_t>(holder)].spill = -1;
  holder = -1;
}

GradientOffloaderStats GradientOffloader::stats() const {
  GradientOffloaderStats s;
  s.d2h_bytes = d2h_bytes_.load(std::memory_order_relaxed);
  s.contributions = contributions_.load(std::memory_order_relaxed);
  s.accumulate_seconds = static_cast<double>(accumulate_ns_.load(std::memory_order_relaxed)) * 1e-9;
  s.partials_seconds = static_cast<double>(partials_ns_.load(std::memory_order_relaxed)) * 1e-9;
  const StagingRingStats io = spills_.stats();
  s.nvme_read_bytes = io.read_bytes;
  s.nvme_write_bytes = io.write_bytes;
  s.nvme_read_wait_seconds = static_cast<double>(io.read_wait_ns) * 1e-9;
  s.nvme_write_wait_seconds = static_cast<double>(io.write_wait_ns + spill_wait_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return s;
}

void GradientOffloader::reset_stats() {
  d2h_bytes_.store(0);
  contributions_.store(0);
  accumulate_ns_.store(0);
  partials_ns_.store(0);
  spills_.reset_stats();
  spill_wait_ns_.store(0);
}

}  // namespace strata
