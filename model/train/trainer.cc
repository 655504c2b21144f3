// Trainer: the optimizer step of a resident Transformer (see trainer.h).
#include "model/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/cpu/half.h"
#include "offload/cpu_adam.h"
#include "model/plan/placement.h"
#include "offload/resident_weights.h"

namespace strata::model {
namespace {

// The device address of `spec` in the resident weights or the device gradients of `model` (the
// optimizer on the device; create() checked both exist).
std::byte* device_weights(Transformer& model, const ParamSpec& spec) {
  return static_cast<ResidentWeights&>(model.weights()).device_chunk(spec.chunk) + spec.offset;
}

// Targets that count toward the loss (not kernels::kIgnoreTarget), from the host copy of the batch.
int64_t counted_targets(const BatchView& batch) {
  const int64_t n = int64_t(batch.batch_size) * batch.seq_len;
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) counted += batch.targets[i] != kernels::kIgnoreTarget;
  return counted;
}

// Byte offset of each chunk when the chunks of `layout` lie back to back; the total last.
std::vector<uint64_t> chunk_starts(const ParamLayout& layout) {
  std::vector<uint64_t> at{0};
  for (const ChunkSpec& c : layout.chunks) at.push_back(at.back() + c.bytes);
  return at;
}

kernels::CopyOut copy_out_for(DType dt) {
  return dt == DType::bf16 ? kernels::CopyOut::bf16 : dt == DType::f16 ? kernels::CopyOut::f16 : kernels::CopyOut::none;
}

}  // namespace

Trainer::Trainer(Backend& backend, Transformer& model, ThreadPool* pool, const TrainOptions& options,
                 LrSchedule schedule, TraceRecorder* trace)
    : backend_(backend), model_(model), pool_(pool), options_(options), schedule_(std::move(schedule)), trace_(trace) {}

Status check_trainer_options(const TrainOptions& options) {
  if (options.dtype != DType::f32 && options.dtype != DType::bf16 && options.dtype != DType::f16)
    return error(Code::invalid_argument, "the trainer computes in fp32, bf16 or fp16, not {}; pass --dtype bf16",
                 dtype_name(options.dtype));
  if (options.grad_accum == 0) return error(Code::invalid_argument, "grad_accum must be at least 1");
  if (options.adam_states == AdamStates::q8 && options.optimizer_device == TrainOptions::OptimizerDevice::device)
    return error(Code::invalid_argument, "8-bit Adam moments (adamw8bit) live on the CPU; pass --optimizer-device "
                 "cpu, or --optimizer-type adamw to keep fp32 moments on the device");
  kernels::AdamHyper hyper = options.adam_hyper;
  hyper.lr = float(options.lr_schedule.peak_lr);
  STRATA_RETURN_IF_ERROR(validate_adam_hyper(hyper));
  if (options.dtype == DType::f16) STRATA_RETURN_IF_ERROR(LossScaler::create(options.loss_scaler).status());
  return LrSchedule::create(options.lr_schedule).status();
}

std::vector<OptimizerBuffer> optimizer_buffers(size_t chunk, const OptimizerStateLayout& layout, std::byte* image) {
  const auto buffer = [&](std::string_view what, SafeDType dtype, const StateRegion& r) {
    return OptimizerBuffer{.name = fmt::format("{}.{}", what, chunk), .dtype = dtype,
                           .data = image == nullptr ? nullptr : image + r.offset, .bytes = r.bytes};
  };
  if (layout.states == AdamStates::f32) return {buffer("m", SafeDType::f32, layout.m), buffer("v", SafeDType::f32, layout.v)};
  return {buffer("m_code", SafeDType::i8, layout.m_code), buffer("v_code", SafeDType::u8, layout.v_code),
          buffer("m_scale", SafeDType::f32, layout.m_scale), buffer("v_scale", SafeDType::f32, layout.v_scale)};
}

std::vector<OptimizerBuffer> optimizer_buffers(const StatePiece& piece, const OptimizerStateLayout& layout,
                                               std::byte* image) {
  std::vector<OptimizerBuffer> buffers = optimizer_buffers(piece.chunk, layout, image);
  // fp32 m, v: 4 bytes per slot; 8-bit codes: 1 byte per slot, then the scales: 4 bytes each.
  const bool q8 = layout.states == AdamStates::q8;
  for (size_t i = 0; i < buffers.size(); ++i)
    buffers[i].offset = !q8 ? piece.slot_begin * sizeof(float) : i < 2 ? piece.slot_begin : piece.scale_begin * sizeof(float);
  return buffers;
}

StatusOr<std::unique_ptr<Trainer>> Trainer::create(Backend& backend, Transformer& model, PinnedPool& pinned,
                                                   ThreadPool* pool, const TrainOptions& options, TrainerIo io) {
  STRATA_RETURN_IF_ERROR(check_trainer_options(options));
  if (model.dtype() != options.dtype)
    return error(Code::invalid_argument, "the model computes in {} but the trainer options ask for {}; create both "
                 "with the same --dtype", dtype_name(model.dtype()), dtype_name(options.dtype));
  if (options.optimizer_device == TrainOptions::OptimizerDevice::device) {
    if (dynamic_cast<ResidentWeights*>(&model.weights()) == nullptr)
      return error(Code::invalid_argument, "the optimizer on the device updates resident weights in place, but the "
                   "model's weights are paged (offloaded); pass --optimizer-device cpu, or keep the weights resident");
    if (model.device_grads() == nullptr)
      return error(Code::invalid_argument, "the optimizer on the device needs the model's device gradients (create "
                   "the model with device_grads = true)");
  }
  STRATA_ASSIGN_OR_RETURN(LrSchedule schedule, LrSchedule::create(options.lr_schedule));
  std::unique_ptr<Trainer> t(new Trainer(backend, model, pool, options, std::move(schedule), io.trace));
  if (options.dtype == DType::f16) {
    STRATA_ASSIGN_OR_RETURN(t->scaler_, LossScaler::create(options.loss_scaler));
  }
  STRATA_RETURN_IF_ERROR(t->allocate(pinned, io.store));
  STRATA_RETURN_IF_ERROR(t->init_masters());
  if (t->offloader_) {
    // A pending update reaches chunk c (and c + 1, which the weight source may fetch ahead) before
    // the next pass acquires c.
    Trainer* self = t.get();
    model.set_acquire_hook([self](size_t c) { return self->apply_update(c + 1); });
  }
  return t;
}

Trainer::~Trainer() {
  if (Status s = finish_update(); !s.is_ok()) spdlog::error("the last step's update was not applied: {}", s.message());
  model_.set_acquire_hook({});
  (void)backend_.synchronize_all();
  if (offloader_ && model_.grad_sink() == offloader_.get()) (void)model_.set_grad_sink(nullptr);
  for (void* p : {static_cast<void*>(inputs_), static_cast<void*>(targets_),
                  static_cast<void*>(device_masters_), static_cast<void*>(device_m_), static_cast<void*>(device_v_)})
    if (p != nullptr) (void)backend_.release(p);
}

Status Trainer::allocate(PinnedPool& pinned, NvmeStore* store) {
  const ParamLayout& layout = model_.layout();
  const ParamLayout& masters = model_.master_layout();
  master_offsets_ = chunk_starts(masters);
  const uint64_t master_total = master_offsets_.back();
  const bool on_device = options_.optimizer_device == TrainOptions::OptimizerDevice::device;
  const bool half = options_.dtype != DType::f32;
  if (!on_device) {
    // Gradient slots on the device: two for the layers (one in backward, one draining), one
    // each for the embedding and the head chunks (used at the same time when the head is tied).
    const GradientOffloaderOptions go = gradient_options(layout, options_, model_.config().name);
    if (go.home == Tier::nvme && store == nullptr)
      return error(Code::invalid_argument, "the gradients spill to NVMe but the trainer got no NVMe store; pass "
                   "--nvme-path DIR");
    STRATA_ASSIGN_OR_RETURN(offloader_, GradientOffloader::create(backend_, pinned, go, pool_, trace_,
                                                                  go.home == Tier::nvme ? store : nullptr));
    offloader_host_bytes_ = gradient_offloader_pinned_bytes(go);
    STRATA_RETURN_IF_ERROR(model_.set_grad_sink(offloader_.get()));
  }
  if (on_device) {
    // Masters (16-bit only) and moments beside the weights; the pinned images are mirrors.
    for (auto [slot, what] : {std::pair{&device_masters_, "fp32 master weights"}, {&device_m_, "Adam m"},
                              {&device_v_, "Adam v"}}) {
      if (slot == &device_masters_ && !half) continue;
      STRATA_ASSIGN_OR_RETURN(void* block, backend_.allocate(master_total, fmt::format("optimizer {}", what)));
      *slot = static_cast<std::byte*>(block);
      STRATA_RETURN_IF_ERROR(backend_.fill_zero(block, master_total));
    }
  }
  const OptimizerPipelineOptions po = optimizer_state_options(masters, options_);
  if (po.home == Tier::nvme && store == nullptr)
    return error(Code::invalid_argument, "the optimizer state is homed on NVMe but the trainer got no NVMe store; "
                 "pass --nvme-path DIR");
  STRATA_ASSIGN_OR_RETURN(states_, OptimizerPipeline::create(pinned, po.home == Tier::nvme ? store : nullptr, trace_, po));
  pieces_ = optimizer_state_pieces(masters, options_.sub_group_size);
  piece_order_.resize(pieces_.size());
  for (size_t i = 0; i < pieces_.size(); ++i) piece_order_[i] = i;
  first_piece_.assign(masters.chunks.size() + 1, pieces_.size());
  for (size_t i = pieces_.size(); i-- > 0;) first_piece_[pieces_[i].chunk] = i;
  for (size_t c = 0; c < masters.chunks.size(); ++c) {
    uint64_t scales = 0;
    for (size_t i : pieces_of(c)) scales += pieces_[i].scales();
    chunk_layouts_.push_back(optimizer_state_layout(options_.adam_states, masters.chunks[c].bytes / sizeof(float),
                                                    options_.adam_states == AdamStates::q8 ? scales : 0));
  }
  build_tensor_refs();
  STRATA_ASSIGN_OR_RETURN(losses_, pinned.acquire(options_.grad_accum * sizeof(kernels::CrossEntropyResult)));
  const TransformerOptions& mo = model_.options();
  const uint64_t batch_bytes = uint64_t(mo.batch * mo.seq_len) * sizeof(int32_t);
  STRATA_ASSIGN_OR_RETURN(void* in, backend_.allocate(batch_bytes, "trainer inputs"));
  inputs_ = static_cast<int32_t*>(in);
  STRATA_ASSIGN_OR_RETURN(void* tg, backend_.allocate(batch_bytes, "trainer targets"));
  targets_ = static_cast<int32_t*>(tg);
  uploaded_ = backend_.create_event();
  computed_ = backend_.create_event();
  loss_copied_ = backend_.create_event();
  params_sent_ = backend_.create_event();
  return Status();
}

std::span<const size_t> Trainer::pieces_of(size_t chunk) const {
  return std::span(piece_order_).subspan(first_piece_[chunk], first_piece_[chunk + 1] - first_piece_[chunk]);
}

Status Trainer::fill_masters(const ChunkValues& produce, bool write_back) {
  std::vector<float> values;  // the chunk being cut into pieces
  size_t have = SIZE_MAX;
  const auto fill = [&](size_t i, ChunkState& state) -> Status {
    const StatePiece& piece = pieces_[i];
    const size_t c = piece.chunk;
    if (first_piece_[c + 1] - first_piece_[c] == 1) return produce(c, state.master);
    if (have != c) {
      values.assign(state_layout(c).fp32_slots, 0.0f);
      STRATA_RETURN_IF_ERROR(produce(c, values.data()));
      have = c;
    }
    std::copy_n(values.data() + piece.slot_begin, piece.slots(), state.master);
    return Status::ok();
  };
  return states_->for_each_chunk(piece_order_, fill, write_back);
}

// The exact fp32 values of the model's last load or init from its fp32 source (16-bit models), else
// the device weights (exact for fp32; for 16-bit only the rounded values are left: warned). One
// walk over the pieces writes each one's image (the moments start at zero).
Status Trainer::init_masters() {
  Transformer::Fp32ChunkSource exact = model_.take_fp32_source();
  const ParamLayout& layout = model_.layout();
  const ParamLayout& masters = model_.master_layout();
  if (!exact && options_.dtype != DType::f32)
    spdlog::warn("the fp32 master weights start from the model's {} weights (it was loaded or initialised before "
                 "another trainer took its fp32 values)", dtype_name(options_.dtype));
  std::vector<std::byte> staged;
  const auto produce = [&](size_t c, float* out) -> Status {
    if (exact) return exact(c, out);  // produced a chunk at a time: no copy of the model
    if (options_.dtype == DType::f32) return model_.weights().read(c, reinterpret_cast<std::byte*>(out));
    staged.resize(layout.chunks[c].bytes);
    STRATA_RETURN_IF_ERROR(model_.weights().read(c, staged.data()));
    const kernels::FloatFormat format = float_format_of(options_.dtype, "weights").value();
    for (size_t i = 0; i < layout.params.size(); ++i) {
      const ParamSpec& p = layout.params[i];
      if (size_t(p.chunk) != c) continue;
      const auto* src = reinterpret_cast<const uint16_t*>(staged.data() + p.offset);
      float* dst = out + masters.params[i].offset / sizeof(float);
      for (uint64_t e = 0; e < p.elements; ++e) dst[e] = kernels::half_to_float(format, src[e]);
    }
    return Status::ok();
  };
  STRATA_RETURN_IF_ERROR(fill_masters(produce, /*write_back=*/true));
  return copy_device_state(/*to_device=*/true);
}

// Masters (16-bit; fp32's are the model's weights, which the device already holds) and moments,
// chunk by chunk between the pinned images (a cpu home: the device optimizer's mirrors) and the
// device arrays.
Status Trainer::copy_device_state(bool to_device) {
  if (device_m_ == nullptr) return Status::ok();
  const Stream stream = to_device ? Stream::h2d : Stream::d2h;
  STRATA_RETURN_IF_ERROR(backend_.record(*computed_, Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.wait(stream, *computed_));
  const auto copy = [&](size_t i, ChunkState& state) -> Status {
    const StatePiece& piece = pieces_[i];
    const uint64_t at = master_offsets_[piece.chunk] + piece.slot_begin * sizeof(float);
    const uint64_t bytes = piece.slots() * sizeof(float);
    std::pair<std::byte*, float*> pairs[] = {{device_masters_, state.master}, {device_m_, state.m}, {device_v_, state.v}};
    for (auto [device, host] : pairs) {
      if (device == nullptr) continue;
      STRATA_RETURN_IF_ERROR(to_device ? backend_.copy_to_device(device + at, host, bytes, stream)
                                       : backend_.copy_to_host(host, device + at, bytes, stream));
    }
    return Status::ok();
  };
  STRATA_RETURN_IF_ERROR(states_->for_each_chunk(piece_order_, copy, /*write_back=*/false));
  STRATA_RETURN_IF_ERROR(backend_.record(*params_sent_, stream));
  if (to_device) return backend_.wait(Stream::compute, *params_sent_);  // the next step reads them
  STRATA_RETURN_IF_ERROR(backend_.synchronize(*params_sent_));
  if (device_masters_ != nullptr) return Status::ok();
  // fp32: the masters are the model's weights.
  return fill_masters([&](size_t c, float* out) { return model_.weights().read(c, reinterpret_cast<std::byte*>(out)); },
                      /*write_back=*/false);
}

Status Trainer::sync_host_state() {
  STRATA_RETURN_IF_ERROR(finish_update());
  return copy_device_state(/*to_device=*/false);
}

Status Trainer::visit_state(bool write_back, const PieceVisit& visit) {
  STRATA_RETURN_IF_ERROR(finish_update());
  return states_->for_each_chunk(
      piece_order_, [&](size_t i, ChunkState& state) { return visit(i, pieces_[i], state); }, write_back);
}

StatusOr<std::vector<float>> Trainer::master(const ParamSpec& spec) {
  STRATA_RETURN_IF_ERROR(finish_update());
  std::vector<float> out(spec.elements);
  const uint64_t slot = spec.offset / sizeof(float);
  STRATA_RETURN_IF_ERROR(states_->for_each_chunk(
      pieces_of(spec.chunk),
      [&](size_t i, ChunkState& state) {
        const StatePiece& piece = pieces_[i];
        const uint64_t lo = std::max(slot, piece.slot_begin), hi = std::min(slot + spec.elements, piece.slot_end);
        if (lo < hi) std::copy_n(state.master + (lo - piece.slot_begin), hi - lo, out.begin() + (lo - slot));
        return Status::ok();
      },
      /*write_back=*/false));
  return out;
}

Status Trainer::restore_progress(uint64_t steps_done, uint64_t updates_done,
                                 std::optional<std::string_view> loss_scaler_json) {
  if (updates_done > steps_done)
    return error(Code::invalid_argument, "the optimizer state has {} updates but only {} steps", updates_done,
                 steps_done);
  if (scaler_ && loss_scaler_json) STRATA_RETURN_IF_ERROR(scaler_->deserialize(*loss_scaler_json));
  STRATA_RETURN_IF_ERROR(copy_device_state(/*to_device=*/true));
  steps_done_ = steps_done;
  updates_done_ = updates_done;
  return Status::ok();
}

uint64_t Trainer::host_bytes() const { return states_->stats().pinned_bytes + offloader_host_bytes_; }

Status Trainer::upload_batch(const BatchView& batch) {
  const TransformerOptions& mo = model_.options();
  if (int64_t(batch.batch_size) > mo.batch || int64_t(batch.seq_len) > mo.seq_len)
    return error(Code::invalid_argument, "a batch of ({}, {}) does not fit the model's buffers for ({}, {})",
                 batch.batch_size, batch.seq_len, mo.batch, mo.seq_len);
  const uint64_t bytes = uint64_t(batch.batch_size) * batch.seq_len * sizeof(int32_t);
  // The previous micro-batch's compute must be done with the device buffers before they change.
  STRATA_RETURN_IF_ERROR(backend_.record(*computed_, Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.wait(Stream::h2d, *computed_));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_device(inputs_, batch.inputs, bytes, Stream::h2d));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_device(targets_, batch.targets, bytes, Stream::h2d));
  STRATA_RETURN_IF_ERROR(backend_.record(*uploaded_, Stream::h2d));
  // The batch's host buffer goes back to its source on the next call: finish reading it now.
  STRATA_RETURN_IF_ERROR(backend_.synchronize(*uploaded_));
  return backend_.wait(Stream::compute, *uploaded_);
}

// Queues the copy of the last forward's loss into host slot `micro_batch`; the next forward (which
// rewrites the device loss) waits for the copy. No host synchronisation: the step reads the slots
// after the step's finish_step has synchronised the d2h stream.
Status Trainer::queue_loss_copy(uint64_t micro_batch) {
  STRATA_RETURN_IF_ERROR(backend_.record(*computed_, Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.wait(Stream::d2h, *computed_));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_host(losses_.as<kernels::CrossEntropyResult>() + micro_batch,
                                               model_.loss_result(), sizeof(kernels::CrossEntropyResult),
                                               Stream::d2h));
  STRATA_RETURN_IF_ERROR(backend_.record(*loss_copied_, Stream::d2h));
  return backend_.wait(Stream::compute, *loss_copied_);
}

StatusOr<std::vector<float>> Trainer::gradient(const ParamSpec& spec) {
  const uint64_t at = spec.offset / model_.layout().element_bytes;
  std::vector<float> out(spec.elements);
  STRATA_RETURN_IF_ERROR(finish_update());
  if (offloader_) {
    STRATA_ASSIGN_OR_RETURN(const float* acc, offloader_->wait_read(spec.chunk));
    std::copy(acc + at, acc + at + spec.elements, out.begin());
    offloader_->end_read(spec.chunk);
    return out;
  }
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_host(out.data(), model_.device_grads()->accumulated(spec.chunk) + at,
                                               spec.elements * sizeof(float), Stream::d2h));
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::d2h));
  return out;
}

// Each tensor's share of each piece: its place in the piece's state image and in the working
// layout. The images move (NVMe-homed state is visited in whichever staging buffer its read used),
// so the CPU optimizer's tensors are bound per visit from these offsets.
void Trainer::build_tensor_refs() {
  const ParamLayout& layout = model_.layout();
  const ParamLayout& masters = model_.master_layout();
  tensor_refs_.assign(pieces_.size(), {});
  std::vector<uint64_t> scales(layout.chunks.size(), 0);  // per chunk: the next tensor's first scale
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const ParamSpec& p = layout.params[i];
    const uint64_t slot = masters.params[i].offset / sizeof(float);
    for (size_t k : pieces_of(p.chunk)) {
      const StatePiece& piece = pieces_[k];
      const uint64_t lo = std::max(slot, piece.slot_begin), hi = std::min(slot + p.elements, piece.slot_end);
      if (lo >= hi) continue;
      // A cut inside a tensor is a whole number of 8-bit blocks from its start (placement.h).
      tensor_refs_[k].push_back(TensorRef{.master_slot = lo - piece.slot_begin,
                                          .scale_at = scales[p.chunk] + (lo - slot) / kernels::kAdam8bitBlock -
                                                      piece.scale_begin,
                                          .work_at = p.offset / layout.element_bytes + (lo - slot),
                                          .n = hi - lo,
                                          .decay = p.weight_decay});
    }
    scales[p.chunk] += kernels::adam8bit_blocks(p.elements);
  }
}

// AdamW over the tensors of one piece on the CPU: decaying tensors (>= 2 dims) and the others
// (norms, biases) in two calls. Gradients: the offloader's fp32 sums of the piece's chunk; for
// 16-bit training the rounded weights go straight into `copy_out` (the chunk's update buffer,
// working layout).
Status Trainer::adam_update(const PendingUpdate& update, size_t piece, const ChunkState& state, const float* grads,
                            std::byte* copy_out) {
  CpuAdamOptions o;
  o.hyper = options_.adam_hyper;
  o.hyper.lr = float(update.lr);
  o.hyper.step = update.step;  // bias correction counts applied updates only
  o.hyper.grad_scale = float(update.grad_multiplier);
  o.formats = kernels::AdamFormats{.grad = kernels::FloatFormat::f32, .copy = copy_out_for(options_.dtype)};
  o.states = options_.adam_states;
  const uint64_t esize = model_.layout().element_bytes;
  const bool q8 = options_.adam_states == AdamStates::q8;
  std::vector<CpuAdamTensor> group;
  for (const bool decayed : {true, false}) {
    group.clear();
    for (const TensorRef& r : tensor_refs_[piece]) {
      if (r.decay != decayed) continue;
      CpuAdamTensor t;
      t.param = state.master + r.master_slot;
      if (q8) {
        t.m_code = state.m_code + r.master_slot;
        t.v_code = state.v_code + r.master_slot;
        t.m_scale = state.m_scale + r.scale_at;
        t.v_scale = state.v_scale + r.scale_at;
      } else {
        t.m = state.m + r.master_slot;
        t.v = state.v + r.master_slot;
      }
      t.n = r.n;
      t.grad = grads + r.work_at;
      t.copy_out = o.formats.copy == kernels::CopyOut::none ? nullptr : copy_out + r.work_at * esize;
      group.push_back(t);
    }
    if (!decayed) o.hyper.weight_decay = 0.0f;
    STRATA_RETURN_IF_ERROR(cpu_adam_step(pool_, group, o).status());
  }
  return Status::ok();
}

// The same update with the backend's adam_update op, queued on the compute stream: fp32 masters
// (the model's weights for fp32) and moments in device memory, the gradient in the working
// precision, and for 16-bit training the rounded weights written into the model in the same pass.
Status Trainer::device_adam_update(double lr, double grad_multiplier) {
  const ParamLayout& layout = model_.layout();
  const ParamLayout& masters = model_.master_layout();
  const bool half = options_.dtype != DType::f32;
  kernels::AdamHyper hyper = options_.adam_hyper;
  hyper.lr = float(lr);
  hyper.step = int64_t(updates_done_ + 1);
  hyper.grad_scale = float(grad_multiplier);
  const kernels::AdamFormats formats{.grad = kernels::FloatFormat::f32, .copy = copy_out_for(options_.dtype)};
  DeviceGrads& grads = *model_.device_grads();
  for (const bool decayed : {true, false}) {
    kernels::AdamHyper group = hyper;
    if (!decayed) group.weight_decay = 0.0f;
    const kernels::AdamConstants constants = kernels::adam_constants(group);
    for (size_t i = 0; i < layout.params.size(); ++i) {
      const ParamSpec& p = layout.params[i];
      if (p.weight_decay != decayed) continue;
      const uint64_t master_at = master_offsets_[p.chunk] + masters.params[i].offset;
      std::byte* weights = device_weights(model_, p);
      kernels::AdamSpan span;
      span.param = reinterpret_cast<float*>(half ? device_masters_ + master_at : weights);
      span.m = reinterpret_cast<float*>(device_m_ + master_at);
      span.v = reinterpret_cast<float*>(device_v_ + master_at);
      span.grad = grads.accumulated(p.chunk) + p.offset / layout.element_bytes;
      span.copy_out = half ? weights : nullptr;
      span.n = p.elements;
      STRATA_RETURN_IF_ERROR(backend_.ops().adam_update(constants, formats, span));
    }
  }
  return Status::ok();
}

// The CPU optimizer's update of one piece, its state visited by the walk. At a chunk's first piece
// chunk c + 1's spilled gradient read begins (it proceeds while chunk c is updated) and c's is
// waited for; Adam over each piece writes its new working weights into the weight source's update
// buffer of the chunk, and after the chunk's last piece the commit sends them home (resident:
// uploaded; pinned CPU: in place; NVMe: written behind). fp32 training updates the masters in
// place and copies them out. The same arithmetic per element as one pass over everything,
// whenever it runs: the order, the pieces and the timing change no bit.
Status Trainer::update_piece(size_t p, ChunkState& state) {
  const std::vector<ChunkSpec>& chunks = model_.layout().chunks;
  const StatePiece& piece = pieces_[p];
  const size_t c = piece.chunk;
  WeightSource& weights = model_.weights();
  if (updating_.chunk != c) {
    // The read ahead is best effort: with no spill buffer for c + 1 free of reads (c holds the
    // only one large enough), wait_read(c + 1) begins it after end_read(c).
    if (c + 1 < chunks.size()) {
      const Status ahead = offloader_->begin_read(c + 1);
      if (!ahead.is_ok() && ahead.code() != Code::failed_precondition) return ahead;
    }
    STRATA_ASSIGN_OR_RETURN(const float* grads, offloader_->wait_read(c));
    updating_ = {.chunk = c, .grads = grads};
    STRATA_ASSIGN_OR_RETURN(updating_.out, weights.update_buffer(c));
  }
  const double t0 = trace_ ? trace_->now_us() : 0;
  STRATA_RETURN_IF_ERROR(adam_update(*pending_, p, state, updating_.grads, updating_.out));
  if (options_.dtype == DType::f32)
    std::memcpy(updating_.out + piece.slot_begin * sizeof(float), state.master, piece.slots() * sizeof(float));
  if (trace_) trace_->span("cpu adam", fmt::format("chunk {}", c), t0, trace_->now_us());
  if (p + 1 < first_piece_[c + 1]) return Status::ok();
  offloader_->end_read(c);
  updating_ = {};
  return weights.commit_update(c);
}

// The update of a finished step, piece by piece in chunk order: one walk through the optimizer
// state (NVMe-homed state read ahead from here on and written behind), applied by apply_update
// as far as it is asked.
Status Trainer::start_update(PendingUpdate update) {
  pending_ = update;
  STRATA_RETURN_IF_ERROR(offloader_->begin_read(0));
  if (Status s = states_->begin_walk(piece_order_, /*write_back=*/true); !s.is_ok()) {
    pending_.reset();
    return s;
  }
  return Status::ok();
}

Status Trainer::apply_update(size_t through) {
  if (!pending_) return Status::ok();
  const auto visit = [this](size_t p, ChunkState& state) { return update_piece(p, state); };
  while (states_->walk_remaining() > 0 && pieces_[states_->walk_next_chunk()].chunk <= through) {
    if (Status s = states_->visit_next(visit); !s.is_ok()) {
      // The walk has ended; the chunks before the failing one are updated.
      pending_.reset();
      if (updating_.chunk != SIZE_MAX) offloader_->end_read(updating_.chunk);
      updating_ = {};
      return s;
    }
  }
  if (states_->walk_remaining() > 0) return Status::ok();
  pending_.reset();
  return states_->end_walk();
}

Status Trainer::finish_update() { return apply_update(SIZE_MAX); }

StatusOr<StepResult> Trainer::step(const NextBatch& next) {
  StepResult r;
  r.step = steps_done_ + 1;
  r.lr = schedule_.lr(steps_done_);
  const double loss_scale = scaler_ ? scaler_->scale() : 1.0;
  if (scaler_) r.loss_scale = loss_scale;
  STRATA_RETURN_IF_ERROR(model_.weights().begin_sequence("train"));
  const uint64_t K = options_.grad_accum;
  for (uint64_t k = 0; k < K; ++k) {
    STRATA_ASSIGN_OR_RETURN(BatchView batch, next());
    STRATA_RETURN_IF_ERROR(upload_batch(batch));  // checks the batch's shape before anything reads it
    const int64_t counted = counted_targets(batch);
    if (counted == 0)
      return error(Code::invalid_argument, "micro-batch {} of step {} has no counted targets (all -1)", k + 1,
                   r.step);
    // The first forward applies the previous step's pending update chunk by chunk, just before
    // each chunk is acquired (the acquire hook); the gradients it reads are then free to reset.
    STRATA_RETURN_IF_ERROR(model_.forward(inputs_, targets_, batch.batch_size, batch.seq_len));
    if (k == 0) {
      STRATA_RETURN_IF_ERROR(finish_update());
      STRATA_RETURN_IF_ERROR(model_.zero_grad());
    }
    if (offloader_) offloader_->set_last_micro_batch(k + 1 == K);
    STRATA_RETURN_IF_ERROR(queue_loss_copy(k));
    STRATA_RETURN_IF_ERROR(model_.backward(counted, float(loss_scale / double(K))));
    r.tokens += uint64_t(counted);
  }
  STRATA_RETURN_IF_ERROR(model_.weights().end_sequence());
  // The squared norm of the accumulated (for fp16, loss-scaled) gradient, by the blocked definition
  // both gradient placements share; non-finite anywhere is the step's overflow check. Both
  // synchronise d2h, after the loss copies: the losses are in.
  STRATA_ASSIGN_OR_RETURN(const double norm_sq,
                          offloader_ ? offloader_->finish_step() : model_.device_grads()->finish_step());
  for (uint64_t k = 0; k < K; ++k) r.loss += double(losses_.as<kernels::CrossEntropyResult>()[k].mean_loss) / double(K);
  r.grad_norm = std::sqrt(norm_sq) / loss_scale;
  steps_done_ = r.step;
  // Once per optimizer step, after every micro-batch: an overflow skips the update.
  const bool finite = std::isfinite(norm_sq);
  if (scaler_) scaler_->update(/*found_nonfinite=*/!finite);  // logs a skipped step itself
  if (!finite) {
    if (!scaler_) spdlog::warn("step {}: the gradient norm is {}; the update is skipped", r.step, r.grad_norm);
    r.skipped = true;
    return r;
  }
  if (options_.clip_grad_norm > 0) r.clip_scale = std::min(1.0, options_.clip_grad_norm / (r.grad_norm + 1e-6));
  if (device_m_ != nullptr) {  // the optimizer lives on the device: the next forward waits for it there
    STRATA_RETURN_IF_ERROR(device_adam_update(r.lr, r.clip_scale / loss_scale));
    ++updates_done_;
    return r;
  }
  STRATA_RETURN_IF_ERROR(start_update({.lr = r.lr, .grad_multiplier = r.clip_scale / loss_scale,
                                        .step = int64_t(updates_done_ + 1)}));
  ++updates_done_;
  // Overlapped: the next forward (or finish_update) applies it; else now.
  if (!options_.overlap_optimizer) STRATA_RETURN_IF_ERROR(finish_update());
  return r;
}

StatusOr<double> Trainer::evaluate(const NextBatch& next, uint64_t batches) {
  if (batches == 0) return error(Code::invalid_argument, "evaluate needs at least one batch");
  STRATA_RETURN_IF_ERROR(finish_update());  // the forward's hook would apply it too, interleaved
  STRATA_RETURN_IF_ERROR(model_.weights().begin_sequence("eval"));
  double sum = 0.0;
  for (uint64_t i = 0; i < batches; ++i) {
    STRATA_ASSIGN_OR_RETURN(BatchView batch, next());
    STRATA_RETURN_IF_ERROR(upload_batch(batch));
    STRATA_RETURN_IF_ERROR(model_.forward(inputs_, targets_, batch.batch_size, batch.seq_len));
    STRATA_ASSIGN_OR_RETURN(kernels::CrossEntropyResult loss, model_.read_loss());
    sum += double(loss.mean_loss);
  }
  STRATA_RETURN_IF_ERROR(model_.weights().end_sequence());
  return sum / double(batches);
}

}  // namespace strata::model
