// DeviceOptimizer: AdamW with the backend's adam_update op over resident weights (see
// device_optimizer.h).
#include "model/train/device_optimizer.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace strata::model {
namespace {

// Each segment's state starts 256-byte aligned, as a tensor does in the layouts (vector loads).
constexpr uint64_t kStateAlign = 64;  // floats

}  // namespace

DeviceOptimizer::DeviceOptimizer(Backend& backend, ResidentWeights& weights, DeviceGrads& grads, OptimizerState& state,
                                 const ParamLayout& layout, const ParamLayout& masters, const TrainOptions& options,
                                 ChunkRoute route)
    : backend_(backend), weights_(weights), grads_(grads), state_(state), layout_(layout), masters_(masters),
      options_(options), comm_(grads.communicator()), route_(std::move(route)) {}

int DeviceOptimizer::ranks() const { return comm_ != nullptr ? comm_->size() : 1; }
int DeviceOptimizer::rank() const { return comm_ != nullptr ? comm_->rank() : 0; }

std::vector<DeviceOptimizer::Segment> DeviceOptimizer::segments(const ParamLayout& layout, size_t c, int ranks,
                                                                 int rank, uint64_t* length) {
  const uint64_t eb = layout.element_bytes;
  const ChunkShard shard = chunk_shard(layout.chunks[c].bytes / eb, ranks, rank);
  std::vector<Segment> out;
  uint64_t at = 0;
  // The chunk's params (ParamLayout::params is chunk by chunk).
  const auto first = std::partition_point(layout.params.begin(), layout.params.end(),
                                          [c](const ParamSpec& p) { return size_t(p.chunk) < c; });
  for (size_t i = size_t(first - layout.params.begin()); i < layout.params.size(); ++i) {
    const ParamSpec& p = layout.params[i];
    if (size_t(p.chunk) != c) break;
    const uint64_t begin = std::max(p.offset / eb, shard.begin), end = std::min(p.offset / eb + p.elements, shard.end);
    if (begin >= end) continue;
    const uint64_t scale = out.empty() ? 0 : out.back().scale + kernels::adam8bit_blocks(out.back().n);
    out.push_back({.param = i, .first = begin - p.offset / eb, .n = end - begin, .at = at, .scale = scale});
    at += (end - begin + kStateAlign - 1) / kStateAlign * kStateAlign;
  }
  *length = at;
  return out;
}

// One pass over the params a rank (segments' lengths, without building them): the planner calls it
// for every candidate it sizes.
uint64_t DeviceOptimizer::device_bytes(const ParamLayout& layout, DType dtype, int ranks, uint64_t align,
                                       const std::vector<bool>& updates, AdamStates states, bool spread) {
  const auto aligned = [align](uint64_t b) { return (b + align - 1) / align * align; };
  const uint64_t eb = layout.element_bytes;
  uint64_t largest = 0, widest_stride = 0, scales = 0;
  for (int r = 0; r < ranks; ++r) {
    uint64_t total = 0, chunk_length = 0, rank_scales = 0;
    for (size_t i = 0; i < layout.params.size(); ++i) {
      const ParamSpec& p = layout.params[i];
      if (!updates.empty() && !updates[size_t(p.chunk)]) continue;  // a chunk's params are together
      const ChunkShard shard = chunk_shard(layout.chunks[size_t(p.chunk)].bytes / eb, ranks, r);
      widest_stride = std::max(widest_stride, shard.stride);
      const uint64_t begin = std::max(p.offset / eb, shard.begin), end = std::min(p.offset / eb + p.elements, shard.end);
      if (begin < end) chunk_length += (end - begin + kStateAlign - 1) / kStateAlign * kStateAlign;
      if (begin < end) rank_scales += kernels::adam8bit_blocks(end - begin);  // 8-bit: its segment's blocks
      if (i + 1 == layout.params.size() || layout.params[i + 1].chunk != p.chunk) {  // the chunk's last
        total += chunk_length;
        chunk_length = 0;
      }
    }
    largest = std::max(largest, total);
    scales = std::max(scales, rank_scales);
  }
  const uint64_t masters = dtype == DType::f32 ? 0 : aligned(largest * sizeof(float));  // 16-bit only
  uint64_t bytes = states == AdamStates::q8
                       ? masters + 2 * aligned(largest) + 2 * aligned(scales * sizeof(float))  // codes, scales
                       : masters + 2 * aligned(largest * sizeof(float));                       // m, v
  if (ranks > 1 || spread) bytes += aligned(uint64_t(ranks) * widest_stride * eb);  // the updated weights' gather
  return bytes;
}

StatusOr<std::unique_ptr<DeviceOptimizer>> DeviceOptimizer::create(Backend& backend, ResidentWeights& weights,
                                                                   DeviceGrads& grads, OptimizerState& state,
                                                                   const ParamLayout& layout,
                                                                   const ParamLayout& masters,
                                                                   const TrainOptions& options,
                                                                   const std::vector<bool>& updates) {
  const size_t chunks = layout.chunks.size();
  ChunkRoute route(updates.empty() ? std::vector<bool>(chunks, true) : updates);
  if (route.size() != chunks || route.count(true) != weights.chunk_count() ||
      route.count(true) != grads.chunk_count())
    return error(Code::invalid_argument,
                 "the device optimizer updates {} of the model's {} chunks, but its weights hold {} chunks and its "
                 "gradients {}",
                 route.count(true), chunks, weights.chunk_count(), grads.chunk_count());
  const bool q8 = options.adam_states == AdamStates::q8;
  if (!updates.empty() && grads.partitioned())
    return error(Code::invalid_argument, "a split update (some chunks on the device, the rest on the CPU) runs on one "
                 "rank; across ranks pass --optimizer-device cpu or device");
  const int grad_ranks = grads.partitioned() ? grads.communicator()->size() : 1;
  if (state.ranks() != grad_ranks)
    return error(Code::invalid_argument, "the device optimizer's host mirrors are partitioned over {} ranks but its "
                 "gradients over {}: each rank mirrors its own shard (make_optimizer builds them alike)",
                 state.ranks(), grad_ranks);
  std::unique_ptr<DeviceOptimizer> o(
      new DeviceOptimizer(backend, weights, grads, state, layout, masters, options, std::move(route)));
  std::vector<bool> mine(chunks);
  for (size_t c = 0; c < chunks; ++c) mine[c] = o->route_.marked(c);
  o->pieces_ = state.pieces_where(mine);
  // This rank's segments' fp32 state, chunk after chunk (none for a chunk updated elsewhere).
  o->state_at_ = {0};
  o->scale_at_ = {0};
  uint64_t widest_stride = 0;
  for (size_t c = 0; c < chunks; ++c) {
    uint64_t length = 0;
    if (!o->route_.marked(c)) {
      o->segments_.emplace_back();
      o->state_at_.push_back(o->state_at_.back());
      o->scale_at_.push_back(o->scale_at_.back());
      continue;
    }
    o->segments_.push_back(segments(layout, c, o->ranks(), o->rank(), &length));
    const std::vector<Segment>& made = o->segments_.back();
    o->scale_at_.push_back(o->scale_at_.back() +
                           (made.empty() ? 0 : made.back().scale + kernels::adam8bit_blocks(made.back().n)));
    o->state_at_.push_back(o->state_at_.back() + length);
    widest_stride = std::max(widest_stride, grads.shard(o->local(c)).stride);
  }
  const uint64_t total = o->state_at_.back() * sizeof(float);
  const bool half = options.dtype != DType::f32;
  // Zeroed: zero moments (8-bit: zero codes and scales).
  const uint64_t codes = o->state_at_.back(), scales = o->scale_at_.back() * sizeof(float);
  const std::pair<void**, uint64_t> blocks[] = {
      {reinterpret_cast<void**>(&o->device_masters_), half ? total : 0},
      {reinterpret_cast<void**>(&o->device_m_), q8 ? 0 : total},
      {reinterpret_cast<void**>(&o->device_v_), q8 ? 0 : total},
      {reinterpret_cast<void**>(&o->device_m_code_), q8 ? codes : 0},
      {reinterpret_cast<void**>(&o->device_v_code_), q8 ? codes : 0},
      {reinterpret_cast<void**>(&o->device_m_scale_), q8 ? scales : 0},
      {reinterpret_cast<void**>(&o->device_v_scale_), q8 ? scales : 0}};
  const char* const names[] = {"fp32 master weights", "Adam m", "Adam v", "Adam m codes (8-bit)",
                               "Adam v codes (8-bit)", "Adam m block scales", "Adam v block scales"};
  for (size_t k = 0; k < std::size(blocks); ++k) {
    if (blocks[k].second == 0) continue;
    STRATA_ASSIGN_OR_RETURN(void* block, backend.allocate(blocks[k].second,
                                                          fmt::format("optimizer {}{}", names[k],
                                                                      o->comm_ ? " (this rank's shards)" : "")));
    *blocks[k].first = block;
    STRATA_RETURN_IF_ERROR(backend.fill_zero(block, blocks[k].second));
  }
  if (o->comm_ != nullptr) {
    STRATA_ASSIGN_OR_RETURN(void* block, backend.allocate(uint64_t(o->ranks()) * widest_stride * layout.element_bytes,
                                                          "optimizer: the ranks' updated weights of one chunk"));
    o->gathered_weights_ = static_cast<std::byte*>(block);
  }
  o->computed_ = backend.create_event();
  o->copied_ = backend.create_event();
  return o;
}

DeviceOptimizer::~DeviceOptimizer() {
  (void)backend_.synchronize_all();
  for (void* p : {static_cast<void*>(device_masters_), static_cast<void*>(device_m_), static_cast<void*>(device_v_),
                  static_cast<void*>(device_m_code_), static_cast<void*>(device_v_code_),
                  static_cast<void*>(device_m_scale_), static_cast<void*>(device_v_scale_),
                  static_cast<void*>(gathered_weights_)})
    if (p != nullptr) (void)backend_.release(p);
}

// The update queued on the compute stream, chunk by chunk: fp32 masters (the weights for fp32) and
// moments in device memory, the gradient as DeviceGrads holds it (fp32 sums, or one contribution
// in the working precision, widened as it is read; across ranks this rank's shard), and for 16-bit
// training the rounded weights written into the resident chunks in the same pass. Decaying tensors
// and the others with their own constants. Across ranks each chunk's shards are then gathered.
Status DeviceOptimizer::begin_update(const UpdateStep& update) {
  host_current_ = false;
  const bool half = options_.dtype != DType::f32;
  kernels::AdamHyper hyper = options_.adam_hyper;
  hyper.lr = float(update.lr);
  hyper.step = update.step;
  hyper.grad_scale = float(update.grad_multiplier);
  kernels::AdamHyper undecayed = hyper;
  undecayed.weight_decay = 0.0f;
  const kernels::AdamConstants constants[2] = {kernels::adam_constants(undecayed), kernels::adam_constants(hyper)};
  const uint64_t eb = layout_.element_bytes;
  for (size_t c = 0; c < segments_.size(); ++c) {
    if (!route_.marked(c)) continue;  // a split update's CPU part
    // The chunk's sum: its working-precision buffer after a single contribution, else fp32.
    const DeviceGrads::Sum sum = grads_.gradient(local(c));
    const kernels::FloatFormat grad_format = float_format_of(sum.format, "gradients").value();
    const uint64_t grad_bytes = kernels::float_format_size(grad_format);
    for (const Segment& s : segments_[c]) {
      const ParamSpec& p = layout_.params[s.param];
      const uint64_t element = p.offset / eb + s.first;  // in the chunk
      std::byte* w = weights_.device_chunk(local(c)) + element * eb;
      const uint64_t at = state_at_[c] + s.at;
      const kernels::AdamFormats formats{.grad = grad_format, .copy = adam_copy_out(options_.dtype)};
      const std::byte* grad =
          static_cast<const std::byte*>(sum.data) + (element - grads_.shard(local(c)).begin) * grad_bytes;
      if (device_m_code_ != nullptr) {
        const uint64_t scale = scale_at_[c] + s.scale;
        const kernels::Adam8bitSpan span{.param = half ? device_masters_ + at : reinterpret_cast<float*>(w),
                                         .m_code = device_m_code_ + at,
                                         .v_code = device_v_code_ + at,
                                         .m_scale = device_m_scale_ + scale,
                                         .v_scale = device_v_scale_ + scale,
                                         .grad = grad,
                                         .copy_out = half ? w : nullptr,
                                         .n = s.n};
        STRATA_RETURN_IF_ERROR(backend_.ops().adam8bit_update(constants[p.weight_decay], formats, span));
        continue;
      }
      kernels::AdamSpan span;
      span.param = half ? device_masters_ + at : reinterpret_cast<float*>(w);
      span.m = device_m_ + at;
      span.v = device_v_ + at;
      span.grad = grad;
      span.copy_out = half ? w : nullptr;
      span.n = s.n;
      STRATA_RETURN_IF_ERROR(backend_.ops().adam_update(constants[p.weight_decay], formats, span));
    }
    if (comm_ != nullptr) STRATA_RETURN_IF_ERROR(gather_weights(c));
  }
  return Status::ok();
}

// Every rank's updated shard of chunk c's working weights into every rank's chunk, on the compute
// stream: this rank's shard into its block of the gather buffer, the all-gather, the chunk back.
Status DeviceOptimizer::gather_weights(size_t c) {
  const uint64_t eb = layout_.element_bytes, bytes = layout_.chunks[c].bytes;
  const ChunkShard& shard = grads_.shard(local(c));  // across ranks every chunk is updated here
  std::byte* mine = gathered_weights_ + uint64_t(rank()) * shard.stride * eb;
  if (shard.elements() > 0)
    STRATA_RETURN_IF_ERROR(
        backend_.copy_on_device(mine, weights_.device_chunk(local(c)) + shard.begin * eb, shard.elements() * eb));
  STRATA_RETURN_IF_ERROR(comm_->all_gather(mine, gathered_weights_, shard.stride * eb, Stream::compute));
  return backend_.copy_on_device(weights_.device_chunk(local(c)), gathered_weights_, bytes);
}

// 8-bit moments: piece i's codes and block scales, tensor by tensor, between its host image and the
// segment holding that tensor's elements. Each piece's share of a tensor starts on one of its
// 256-element blocks, and across ranks so does each segment (a shard's cut is a whole number of
// blocks into the tensor it cuts: q8_block_split, checked by OptimizerState::create), so a
// segment's blocks are the tensor's and its scales are those blocks' scales.
Status DeviceOptimizer::copy_codes(size_t i, ChunkState& host, bool to_device, Stream stream) {
  const size_t c = state_.pieces()[i].chunk;
  const uint64_t eb = layout_.element_bytes;
  for (const PieceTensor& t : state_.tensors(i)) {
    for (const Segment& s : segments_[c]) {
      const uint64_t begin = layout_.params[s.param].offset / eb + s.first;
      if (t.work_at < begin || t.work_at >= begin + s.n) continue;
      const uint64_t off = t.work_at - begin, at = state_at_[c] + s.at + off;
      const uint64_t scale = scale_at_[c] + s.scale + off / kernels::kAdam8bitBlock;
      const uint64_t scale_bytes = kernels::adam8bit_blocks(t.n) * sizeof(float);
      const std::pair<void*, void*> arrays[] = {{host.m_code + t.master_element, device_m_code_ + at},
                                                {host.v_code + t.master_element, device_v_code_ + at},
                                                {host.m_scale + t.scale_at, device_m_scale_ + scale},
                                                {host.v_scale + t.scale_at, device_v_scale_ + scale}};
      for (size_t k = 0; k < std::size(arrays); ++k) {
        const uint64_t bytes = k < 2 ? t.n : scale_bytes;
        STRATA_RETURN_IF_ERROR(to_device ? backend_.copy_to_device(arrays[k].second, arrays[k].first, bytes, stream)
                                         : backend_.copy_to_host(arrays[k].first, arrays[k].second, bytes, stream));
      }
      break;
    }
  }
  return Status::ok();
}

// Between the state's host images (pieces in the master layout) and the device arrays (segments),
// segment by segment where the two overlap. Across ranks both are this rank's shard: the mirrors
// are partitioned as the device state is, so nothing crosses between ranks.
Status DeviceOptimizer::copy_state(bool to_device) {
  const Stream stream = to_device ? Stream::h2d : Stream::d2h;
  STRATA_RETURN_IF_ERROR(backend_.record(*computed_, Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.wait(stream, *computed_));
  const bool nvme = state_.pipeline().options().home == Tier::nvme;
  const auto copy = [&](size_t i, ChunkState& host) -> Status {
    const StatePiece& piece = state_.pieces()[i];
    const size_t c = piece.chunk;
    float* const host_of[3] = {host.master, host.m, host.v};
    float* const device_of[3] = {device_masters_, device_m_, device_v_};
    for (int k = 0; k < 3; ++k) {
      if (device_of[k] == nullptr) continue;
      for (const Segment& s : segments_[c]) {
        // The segment's fp32 elements in the master layout's chunk, cut to the piece.
        const uint64_t m0 = masters_.params[s.param].offset / sizeof(float) + s.first;
        const uint64_t from = std::max(m0, piece.element_begin), to = std::min(m0 + s.n, piece.element_end);
        if (from >= to) continue;
        const uint64_t bytes = (to - from) * sizeof(float), at = s.at + (from - m0);
        float* h = host_of[k] + (from - piece.element_begin);
        float* d = device_of[k] + state_at_[c] + at;
        STRATA_RETURN_IF_ERROR(to_device ? backend_.copy_to_device(d, h, bytes, stream)
                                         : backend_.copy_to_host(h, d, bytes, stream));
      }
    }
    if (device_m_code_ != nullptr) STRATA_RETURN_IF_ERROR(copy_codes(i, host, to_device, stream));
    // An NVMe-homed image (a split update's mirrors) is a staging buffer: its write begins, or the
    // buffer is reused, when the visit returns, so its copies must be done by then.
    if (nvme) STRATA_RETURN_IF_ERROR(backend_.synchronize(stream));
    return Status::ok();
  };
  // Down, the images are written back to their home (an NVMe-homed mirror: a split update's).
  STRATA_RETURN_IF_ERROR(state_.pipeline().for_each_chunk(pieces_, copy, /*write_back=*/!to_device));
  STRATA_RETURN_IF_ERROR(backend_.record(*copied_, stream));
  if (to_device) {
    STRATA_RETURN_IF_ERROR(backend_.wait(Stream::compute, *copied_));  // the next step reads them
  } else {
    STRATA_RETURN_IF_ERROR(backend_.synchronize(*copied_));
    // fp32: the masters are the resident weights (whole on every rank; across ranks each keeps
    // its shard's).
    if (device_masters_ == nullptr)
      STRATA_RETURN_IF_ERROR(state_.fill_masters(
          [&](size_t c, float* out) { return weights_.read(local(c), reinterpret_cast<std::byte*>(out)); },
          /*write_back=*/true, state_.partitioned() ? nullptr : &pieces_));
  }
  host_current_ = true;
  return Status::ok();
}

}  // namespace strata::model
