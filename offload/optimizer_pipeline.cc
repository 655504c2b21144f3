// OptimizerPipeline: layouts, carving, and the pipelined walk (see optimizer_pipeline.h).
// Staging buffers (nvme home, a StagingRing; busy while their holder is set) cycle idle -> reading
// -> idle (write_back false, or an error) or idle -> reading -> writing -> idle. A read is begun for
// walk position j into an idle buffer, or into one whose write is two or more visits old (finished
// first), so the write of the chunk just visited always overlaps the next visit; with 3 buffers
// that is exactly read(i+1) | visit(i) | write(i-1), with more the reads run further ahead.
#include "offload/optimizer_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <spdlog/spdlog.h>

#include "offload/trace.h"
#include "runtime/align.h"
#include "runtime/units.h"

namespace strata {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

uint64_t image_alignment(uint32_t store_alignment) { return std::max<uint64_t>(kHostPage, store_alignment); }

uint64_t scales_of(const OptimizerPipelineOptions& o, size_t c) {
  return o.states == AdamStates::q8 && c < o.scale_count.size() ? o.scale_count[c] : 0;
}

uint64_t max_padded(const OptimizerPipelineOptions& o, uint64_t alignment) {
  uint64_t m = 0;
  for (size_t c = 0; c < o.fp32_elements.size(); c++)
    m = std::max(m, optimizer_state_layout(o.states, o.fp32_elements[c], scales_of(o, c), alignment).padded);
  return m;
}

// The nvme ring: `staging` buffers of the largest padded image, each rounded up to 4 KiB.
std::vector<uint64_t> ring_sizes(const OptimizerPipelineOptions& o, uint64_t alignment) {
  return std::vector<uint64_t>(o.staging, round_up(max_padded(o, alignment), kHostPage));
}

}  // namespace

OptimizerStateLayout optimizer_state_layout(AdamStates states, uint64_t fp32_elements, uint64_t scale_count,
                                            uint64_t alignment) {
  OptimizerStateLayout l;
  l.states = states;
  l.fp32_elements = fp32_elements;
  l.scale_count = states == AdamStates::q8 ? scale_count : 0;
  uint64_t at = 0;
  auto place = [&](StateRegion& r, uint64_t bytes) {
    at = round_up(at, kStateRegionAlignment);
    r = StateRegion{at, bytes};
    at += bytes;
  };
  place(l.master, fp32_elements * sizeof(float));
  if (states == AdamStates::f32) {
    place(l.m, fp32_elements * sizeof(float));
    place(l.v, fp32_elements * sizeof(float));
  } else {
    place(l.m_code, fp32_elements);
    place(l.v_code, fp32_elements);
    place(l.m_scale, l.scale_count * sizeof(float));
    place(l.v_scale, l.scale_count * sizeof(float));
  }
  l.bytes = at;
  l.padded = round_up(at, std::max<uint64_t>(alignment, kStateRegionAlignment));
  return l;
}

Status check_optimizer_pipeline_options(const OptimizerPipelineOptions& o, bool have_store) {
  const std::string& n = o.name;
  if (o.fp32_elements.empty()) return error(Code::invalid_argument, "{}: no chunks", n);
  const bool q8 = o.states == AdamStates::q8;
  if (q8 && o.scale_count.size() != o.fp32_elements.size())
    return error(Code::invalid_argument, "{}: {} chunks but {} scale counts (8-bit states need one per chunk)", n,
                 o.fp32_elements.size(), o.scale_count.size());
  if (!q8 && !o.scale_count.empty() && o.scale_count.size() != o.fp32_elements.size())
    return error(Code::invalid_argument, "{}: {} chunks but {} scale counts", n, o.fp32_elements.size(), o.scale_count.size());
  for (size_t c = 0; c < o.fp32_elements.size(); c++) {
    if (o.fp32_elements[c] == 0) return error(Code::invalid_argument, "{}: chunk {} has 0 fp32 elements", n, c);
    if (q8 && o.scale_count[c] == 0)
      return error(Code::invalid_argument, "{}: chunk {} has 8-bit states but 0 block scales", n, c);
    if (!q8 && !o.scale_count.empty() && o.scale_count[c] != 0)
      return error(Code::invalid_argument, "{}: chunk {} has {} block scales, but the states are fp32 (scales are for 8-bit states)",
                   n, c, o.scale_count[c]);
  }
  if (!o.labels.empty() && o.labels.size() != o.fp32_elements.size())
    return error(Code::invalid_argument, "{}: {} chunks but {} labels", n, o.fp32_elements.size(), o.labels.size());
  if (o.home != Tier::cpu && o.home != Tier::nvme)
    return error(Code::invalid_argument, "{}: the optimizer states' home must be cpu or nvme, not {}", n, tier_name(o.home));
  if (o.home == Tier::nvme && !have_store)
    return error(Code::invalid_argument, "{}: optimizer states homed on nvme need an NVMe store (none was given)", n);
  if (o.home == Tier::nvme && o.staging < 3)
    return error(Code::invalid_argument,
                 "{}: optimizer states homed on nvme need at least 3 pinned staging buffers (read ahead, visit, write "
                 "behind); got {}",
                 n, o.staging);
  return Status::ok();
}

uint64_t optimizer_pipeline_pinned_bytes(const OptimizerPipelineOptions& o, uint32_t store_alignment) {
  const uint64_t a = image_alignment(store_alignment);
  if (o.home == Tier::nvme) return StagingRing::pinned_bytes(ring_sizes(o, a), a);
  uint64_t total = 0;
  for (size_t c = 0; c < o.fp32_elements.size(); c++)
    total += round_up(optimizer_state_layout(o.states, o.fp32_elements[c], scales_of(o, c), kHostPage).padded, kHostPage);
  return total;
}

uint64_t optimizer_pipeline_nvme_bytes(const OptimizerPipelineOptions& o, uint32_t store_alignment) {
  if (o.home != Tier::nvme) return 0;
  const uint64_t a = image_alignment(store_alignment);
  uint64_t total = 0;
  for (size_t c = 0; c < o.fp32_elements.size(); c++)
    total += optimizer_state_layout(o.states, o.fp32_elements[c], scales_of(o, c), a).padded;
  return total;
}

// ---- state ---------------------------------------------------------------------------------------

struct OptimizerPipeline::StagingUse {
  size_t pos = 0;       // walk position of the read or write
  bool zero = false;    // reading: a never-written chunk, zero-filled, no I/O
  Status begin_error;   // reading: the read's begin failed; returned at the chunk's visit
};

// ---- lifetime ------------------------------------------------------------------------------------

OptimizerPipeline::OptimizerPipeline(PinnedPool& pool, NvmeStore* store, TraceRecorder* trace,
                                     OptimizerPipelineOptions options)
    : pool_(pool), store_(store), options_(std::move(options)), staging_(store, trace, ring_options()) {}  // trace: the ring's

// Spans "<label>" on "optimizer read" / "optimizer write"; errors "NVMe read of the state of <label>".
StagingRingOptions OptimizerPipeline::ring_options() const {
  StagingRingOptions r;
  r.name = options_.name;
  r.read_track = "optimizer read";
  r.write_track = "optimizer write";
  r.span_name = [this](size_t c) { return label(c); };
  r.subject = [this](size_t c) { return "the state of " + label(c); };
  return r;
}

StatusOr<std::unique_ptr<OptimizerPipeline>> OptimizerPipeline::create(PinnedPool& pool, NvmeStore* store,
                                                                       TraceRecorder* trace,
                                                                       OptimizerPipelineOptions options) {
  STRATA_RETURN_IF_ERROR(check_optimizer_pipeline_options(options, store != nullptr));
  if (options.home != Tier::nvme) store = nullptr;  // a store given with a cpu home is not used
  std::unique_ptr<OptimizerPipeline> p(new OptimizerPipeline(pool, store, trace, std::move(options)));
  STRATA_RETURN_IF_ERROR(p->carve());
  return p;
}

Status OptimizerPipeline::carve() {
  const OptimizerPipelineOptions& o = options_;
  const size_t chunks = o.fp32_elements.size();
  alignment_ = store_ != nullptr ? static_cast<uint32_t>(image_alignment(store_->alignment())) : kHostPage;
  for (size_t c = 0; c < chunks; c++)
    layouts_.push_back(optimizer_state_layout(o.states, o.fp32_elements[c], scales_of(o, c), alignment_));
  seen_.assign(chunks, 0);
  buffer_of_.assign(chunks, -1);
  const uint64_t pinned_total = optimizer_pipeline_pinned_bytes(o, alignment_);

  if (o.home == Tier::cpu) {
    homes_.reserve(chunks);
    for (size_t c = 0; c < chunks; c++) {
      auto b = pool_.acquire(layouts_[c].padded, PinnedFill::zero);  // written only if it was used before
      if (!b.is_ok())
        return b.status().with_context(fmt::format("{}: pinned state of {} (all chunks need {})", o.name, label(c),
                                                   format_size(pinned_total)));
      homes_.push_back(std::move(*b));
    }
    return Status::ok();
  }

  extents_.reserve(chunks);
  for (size_t c = 0; c < chunks; c++) {
    auto e = store_->allocate(fmt::format("{} {}", o.name, label(c)), layouts_[c].bytes);
    if (!e.is_ok())
      return e.status().with_context(fmt::format("{}: NVMe extent of {} (all chunks need {})", o.name, label(c),
                                                 format_size(optimizer_pipeline_nvme_bytes(o, alignment_))));
    extents_.push_back(*e);
  }
  written_.assign(chunks, 0);
  STRATA_RETURN_IF_ERROR(staging_.carve(pool_, ring_sizes(o, alignment_)));
  use_.resize(staging_.size());
  return Status::ok();
}

OptimizerPipeline::~OptimizerPipeline() {
  drain();  // nothing is in flight between walks; this is a guard
  if (store_ == nullptr) return;
  for (ExtentId e : extents_) {
    Status r = store_->release(e);
    if (!r.is_ok()) spdlog::error("{}: releasing an NVMe extent: {}", options_.name, r.to_string());
  }
}

// ---- the visit's view ----------------------------------------------------------------------------

std::string OptimizerPipeline::label(size_t c) const {
  return options_.labels.empty() ? fmt::format("chunk {}", c) : options_.labels[c];
}

ChunkState OptimizerPipeline::view(size_t c, std::byte* image) const {
  const OptimizerStateLayout& l = layouts_[c];
  ChunkState s;
  s.chunk = c;
  s.fp32_elements = l.fp32_elements;
  s.scale_count = l.scale_count;
  s.master = reinterpret_cast<float*>(image + l.master.offset);
  if (l.states == AdamStates::f32) {
    s.m = reinterpret_cast<float*>(image + l.m.offset);
    s.v = reinterpret_cast<float*>(image + l.v.offset);
  } else {
    s.m_code = reinterpret_cast<int8_t*>(image + l.m_code.offset);
    s.v_code = reinterpret_cast<uint8_t*>(image + l.v_code.offset);
    s.m_scale = reinterpret_cast<float*>(image + l.m_scale.offset);
    s.v_scale = reinterpret_cast<float*>(image + l.v_scale.offset);
  }
  s.image = std::span<std::byte>(image, l.bytes);
  return s;
}

// ---- walks ---------------------------------------------------------------------------------------

Status OptimizerPipeline::for_each_chunk(std::span<const size_t> order, const Visit& visit, bool write_back) {
  STRATA_RETURN_IF_ERROR(begin_walk(order, write_back));
  while (walk_remaining() > 0) STRATA_RETURN_IF_ERROR(visit_next(visit));
  return end_walk();
}

Status OptimizerPipeline::begin_walk(std::span<const size_t> order, bool write_back) {
  if (walking_)
    return error(Code::failed_precondition, "{}: a walk begins while another is in progress (end it first)",
                 options_.name);
  STRATA_RETURN_IF_ERROR(write_error_.status());
  Status bad;
  for (size_t c : order) {
    if (c >= layouts_.size()) {
      bad = error(Code::invalid_argument, "{}: chunk {} in the walk's order, but there are {}", options_.name, c,
                  layouts_.size());
      break;
    }
    if (seen_[c]) {
      bad = error(Code::invalid_argument, "{}: chunk {} appears twice in the walk's order", options_.name, c);
      break;
    }
    seen_[c] = 1;
  }
  for (size_t c : order)
    if (c < seen_.size()) seen_[c] = 0;
  if (!bad.is_ok()) return bad;
  walking_ = true;
  walk_write_back_ = write_back;
  walk_order_.assign(order.begin(), order.end());
  walk_pos_ = 0;
  walk_next_ = 0;
  if (options_.home == Tier::nvme) {
    std::fill(buffer_of_.begin(), buffer_of_.begin() + static_cast<std::ptrdiff_t>(order.size()), -1);
    read_ahead(0);
  }
  return Status::ok();
}

Status OptimizerPipeline::visit_next(const Visit& visit) {
  if (!walking_ || walk_pos_ >= walk_order_.size())
    return error(Code::failed_precondition, "{}: visit_next {}", options_.name,
                 walking_ ? "past the end of the walk's order" : "outside a walk");
  const size_t i = walk_pos_++;
  return options_.home == Tier::cpu ? visit_cpu(walk_order_[i], visit) : visit_nvme(i, visit);
}

Status OptimizerPipeline::end_walk() {
  if (!walking_) return write_error_.status();
  walking_ = false;
  if (options_.home == Tier::nvme) drain();  // the last writes
  return write_error_.status();
}

Status OptimizerPipeline::abort_walk(Status why) {
  if (options_.home == Tier::nvme) drain();
  walking_ = false;
  return why;
}

Status OptimizerPipeline::visit_cpu(size_t c, const Visit& visit) {
  ChunkState s = view(c, homes_[c].data());
  const auto t0 = std::chrono::steady_clock::now();
  Status v = visit(c, s);
  counters_.visit_seconds += seconds_since(t0);
  if (!v.is_ok()) return abort_walk(v.with_context(fmt::format("{}: visiting {}", options_.name, label(c))));
  counters_.chunks_visited++;
  return Status::ok();
}

int OptimizerPipeline::take_for_read(size_t visiting) {
  for (size_t b = 0; b < staging_.size(); b++)
    if (staging_[b].holder < 0) return static_cast<int>(b);
  // The oldest write at least two visits old: the write of visiting - 1 overlaps this visit and
  // is not waited for here; visiting - 2's is the youngest taken.
  int best = -1;
  for (size_t b = 0; b < staging_.size(); b++) {
    if (!writing(b) || use_[b].pos + 2 > visiting) continue;
    if (best < 0 || use_[b].pos < use_[best].pos) best = static_cast<int>(b);
  }
  if (best >= 0) (void)finish_write(best);  // an error is recorded (sticky) and checked by the walk
  return best;
}

bool OptimizerPipeline::writing(size_t b) const { return staging_[b].pending() && staging_[b].op() == IoOp::write; }
void OptimizerPipeline::begin_read(size_t pos, size_t c, int b) {
  StagingUse& u = use_[b];
  staging_[b].holder = static_cast<int64_t>(c);
  u.pos = pos;
  u.zero = !written_[c];
  u.begin_error = Status();
  buffer_of_[pos] = b;
  if (u.zero) {
    std::memset(staging_[b].data, 0, layouts_[c].padded);
    return;
  }
  u.begin_error = staging_.begin(b, IoOp::read, extents_[c], c, layouts_[c].padded);
}

Status OptimizerPipeline::finish_read(int b) {
  const StagingUse& u = use_[b];
  Status s = u.begin_error;
  if (u.zero) {
    counters_.zero_fills++;
  } else if (s.is_ok()) {
    s = staging_.finish(b);
  }
  if (!s.is_ok()) staging_[b].holder = -1;  // the bytes are never visited
  return s;
}

Status OptimizerPipeline::finish_write(int b) {
  const size_t c = staging_[b].chunk();
  Status s = staging_.finish(b);
  staging_[b].holder = -1;
  written_[c] = s.is_ok() ? 1 : 0;
  return write_error_.record(s);
}

void OptimizerPipeline::drain() {
  for (size_t b = 0; b < staging_.size(); b++) {
    if (writing(b)) {
      (void)finish_write(static_cast<int>(b));  // an error is recorded (sticky)
    } else if (staging_[b].holder >= 0) {
      (void)staging_.finish(b);  // a read begun, never visited: dropped
      staging_[b].holder = -1;
    }
  }
}

void OptimizerPipeline::note_in_use() {
  uint64_t busy = 0;
  for (size_t b = 0; b < staging_.size(); b++) busy += staging_[b].holder >= 0;
  counters_.peak_staging_in_use = std::max(counters_.peak_staging_in_use, busy);
}

void OptimizerPipeline::read_ahead(size_t visiting) {
  while (walk_next_ < walk_order_.size()) {
    const int b = take_for_read(visiting);
    if (b < 0) break;
    begin_read(walk_next_, walk_order_[walk_next_], b);
    if (walk_next_ > visiting) counters_.reads_ahead++;
    walk_next_++;
    note_in_use();
  }
}

Status OptimizerPipeline::visit_nvme(size_t i, const Visit& visit) {
  const size_t c = walk_order_[i];
  // Read ahead: the current chunk (if not begun yet) and as many after it as the ring allows.
  read_ahead(i);
  if (!write_error_.ok()) return abort_walk(write_error_.status());  // a write finished to make room failed
  if (walk_next_ <= i)  // unreachable with >= 3 buffers; kept so the walk cannot stall
    return abort_walk(error(Code::internal, "{}: no staging buffer for {}", options_.name, label(c)));
  counters_.max_reads_ahead = std::max<uint64_t>(counters_.max_reads_ahead, walk_next_ - 1 - i);

  const int b = buffer_of_[i];
  if (Status r = finish_read(b); !r.is_ok()) return abort_walk(r);
  int64_t& holder = staging_[b].holder;
  ChunkState s = view(c, staging_[b].data);
  const auto t0 = std::chrono::steady_clock::now();
  Status v = visit(c, s);
  counters_.visit_seconds += seconds_since(t0);
  if (!v.is_ok()) {
    holder = -1;
    return abort_walk(v.with_context(fmt::format("{}: visiting {}", options_.name, label(c))));
  }
  counters_.chunks_visited++;
  if (!walk_write_back_) {
    holder = -1;
    read_ahead(i + 1);  // the freed buffer reads the next chunk now, not at the next visit
    return Status::ok();
  }
  if (Status w = staging_.begin(b, IoOp::write, extents_[c], c, layouts_[c].padded); !w.is_ok()) {
    holder = -1;
    written_[c] = 0;
    return abort_walk(write_error_.record(w));
  }
  return Status::ok();
}

// ---- stats ---------------------------------------------------------------------------------------

OptimizerPipelineStats OptimizerPipeline::stats() const {
  OptimizerPipelineStats s = counters_;
  for (const PinnedBuffer& h : homes_) s.pinned_bytes += h.size();
  s.pinned_bytes += staging_.pinned_bytes();
  const StagingRingStats io = staging_.stats();
  s.read_bytes = io.read_bytes;
  s.write_bytes = io.write_bytes;
  s.read_wait_seconds = static_cast<double>(io.read_wait_ns) * 1e-9;
  s.write_wait_seconds = static_cast<double>(io.write_wait_ns) * 1e-9;
  if (store_ != nullptr)
    for (const OptimizerStateLayout& l : layouts_) s.nvme_bytes += l.padded;
  return s;
}

void OptimizerPipeline::reset_stats() {
  counters_ = OptimizerPipelineStats();
  staging_.reset_stats();
}

}  // namespace strata
