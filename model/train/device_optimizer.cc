// DeviceOptimizer: AdamW with the backend's adam_update op over resident weights (see
// device_optimizer.h).
#include "model/train/device_optimizer.h"

#include <utility>

#include <fmt/format.h>

namespace strata::model {

DeviceOptimizer::DeviceOptimizer(Backend& backend, ResidentWeights& weights, DeviceGrads& grads, OptimizerState& state,
                                 const ParamLayout& layout, const ParamLayout& masters, const TrainOptions& options)
    : backend_(backend), weights_(weights), grads_(grads), state_(state), layout_(layout), masters_(masters),
      options_(options) {}

StatusOr<std::unique_ptr<DeviceOptimizer>> DeviceOptimizer::create(Backend& backend, ResidentWeights& weights,
                                                                   DeviceGrads& grads, OptimizerState& state,
                                                                   const ParamLayout& layout,
                                                                   const ParamLayout& masters,
                                                                   const TrainOptions& options) {
  std::unique_ptr<DeviceOptimizer> o(new DeviceOptimizer(backend, weights, grads, state, layout, masters, options));
  // The chunks' fp32 state back to back.
  o->master_offsets_ = {0};
  for (const ChunkSpec& c : masters.chunks) o->master_offsets_.push_back(o->master_offsets_.back() + c.bytes);
  const uint64_t total = o->master_offsets_.back();
  const bool half = options.dtype != DType::f32;
  for (auto [slot, what] : {std::pair{&o->device_masters_, "fp32 master weights"}, {&o->device_m_, "Adam m"},
                            {&o->device_v_, "Adam v"}}) {
    if (slot == &o->device_masters_ && !half) continue;
    STRATA_ASSIGN_OR_RETURN(void* block, backend.allocate(total, fmt::format("optimizer {}", what)));
    *slot = static_cast<std::byte*>(block);
    STRATA_RETURN_IF_ERROR(backend.fill_zero(block, total));
  }
  o->computed_ = backend.create_event();
  o->copied_ = backend.create_event();
  return o;
}

DeviceOptimizer::~DeviceOptimizer() {
  (void)backend_.synchronize_all();
  for (std::byte* p : {device_masters_, device_m_, device_v_})
    if (p != nullptr) (void)backend_.release(p);
}

// The update queued on the compute stream: fp32 masters (the weights for fp32) and moments in
// device memory, the gradient as DeviceGrads holds it (fp32 sums, or one contribution in the
// working precision, widened as it is read), and for 16-bit training the rounded weights written
// into the resident chunks in the same pass. Decaying tensors and the others in two groups.
Status DeviceOptimizer::begin_update(const UpdateStep& update) {
  const bool half = options_.dtype != DType::f32;
  kernels::AdamHyper hyper = options_.adam_hyper;
  hyper.lr = float(update.lr);
  hyper.step = update.step;
  hyper.grad_scale = float(update.grad_multiplier);
  for (const bool decayed : {true, false}) {
    kernels::AdamHyper group = hyper;
    if (!decayed) group.weight_decay = 0.0f;
    const kernels::AdamConstants constants = kernels::adam_constants(group);
    for (size_t i = 0; i < layout_.params.size(); ++i) {
      const ParamSpec& p = layout_.params[i];
      if (p.weight_decay != decayed) continue;
      const uint64_t master_at = master_offsets_[p.chunk] + masters_.params[i].offset;
      std::byte* w = weights_.device_chunk(p.chunk) + p.offset;
      kernels::AdamSpan span;
      span.param = reinterpret_cast<float*>(half ? device_masters_ + master_at : w);
      span.m = reinterpret_cast<float*>(device_m_ + master_at);
      span.v = reinterpret_cast<float*>(device_v_ + master_at);
      // The chunk's sum: its working-precision buffer after a single contribution, else fp32.
      const DeviceGrads::Sum sum = grads_.gradient(p.chunk);
      const kernels::FloatFormat grad_format = float_format_of(sum.format, "gradients").value();
      span.grad = static_cast<const std::byte*>(sum.data) +
                  p.offset / layout_.element_bytes * kernels::float_format_size(grad_format);
      span.copy_out = half ? w : nullptr;
      span.n = p.elements;
      const kernels::AdamFormats formats{.grad = grad_format, .copy = adam_copy_out(options_.dtype)};
      STRATA_RETURN_IF_ERROR(backend_.ops().adam_update(constants, formats, span));
    }
  }
  return Status::ok();
}

Status DeviceOptimizer::copy_state(bool to_device) {
  const Stream stream = to_device ? Stream::h2d : Stream::d2h;
  STRATA_RETURN_IF_ERROR(backend_.record(*computed_, Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.wait(stream, *computed_));
  const auto copy = [&](size_t i, ChunkState& state) -> Status {
    const StatePiece& piece = state_.pieces()[i];
    const uint64_t at = master_offsets_[piece.chunk] + piece.element_begin * sizeof(float);
    const uint64_t bytes = piece.elements() * sizeof(float);
    std::pair<std::byte*, float*> pairs[] = {{device_masters_, state.master}, {device_m_, state.m}, {device_v_, state.v}};
    for (auto [device, host] : pairs) {
      if (device == nullptr) continue;
      STRATA_RETURN_IF_ERROR(to_device ? backend_.copy_to_device(device + at, host, bytes, stream)
                                       : backend_.copy_to_host(host, device + at, bytes, stream));
    }
    return Status::ok();
  };
  STRATA_RETURN_IF_ERROR(state_.pipeline().for_each_chunk(state_.order(), copy, /*write_back=*/false));
  STRATA_RETURN_IF_ERROR(backend_.record(*copied_, stream));
  if (to_device) return backend_.wait(Stream::compute, *copied_);  // the next step reads them
  STRATA_RETURN_IF_ERROR(backend_.synchronize(*copied_));
  if (device_masters_ != nullptr) return Status::ok();
  // fp32: the masters are the resident weights.
  return state_.fill_masters(
      [&](size_t c, float* out) { return weights_.read(c, reinterpret_cast<std::byte*>(out)); },
      /*write_back=*/false);
}

}  // namespace strata::model
