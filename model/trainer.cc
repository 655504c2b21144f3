// Trainer: the optimizer step of a resident Transformer (see trainer.h).
#include "model/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/cpu/half.h"
#include "offload/cpu_adam.h"
#include "model/placement.h"
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

StatusOr<std::unique_ptr<Trainer>> Trainer::create(Backend& backend, Transformer& model, PinnedPool& pinned,
                                                   ThreadPool* pool, const TrainOptions& options,
                                                   TraceRecorder* trace) {
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
  std::unique_ptr<Trainer> t(new Trainer(backend, model, pool, options, std::move(schedule), trace));
  if (options.dtype == DType::f16) {
    STRATA_ASSIGN_OR_RETURN(t->scaler_, LossScaler::create(options.loss_scaler));
  }
  STRATA_RETURN_IF_ERROR(t->allocate(pinned));
  STRATA_RETURN_IF_ERROR(t->init_masters());
  return t;
}

Trainer::~Trainer() {
  (void)backend_.synchronize_all();
  if (offloader_ && model_.grad_sink() == offloader_.get()) (void)model_.set_grad_sink(nullptr);
  for (void* p : {static_cast<void*>(inputs_), static_cast<void*>(targets_),
                  static_cast<void*>(device_masters_), static_cast<void*>(device_m_), static_cast<void*>(device_v_)})
    if (p != nullptr) (void)backend_.release(p);
}

Status Trainer::allocate(PinnedPool& pinned) {
  const ParamLayout& layout = model_.layout();
  const ParamLayout& masters = model_.master_layout();
  chunk_offsets_ = chunk_starts(layout);
  master_offsets_ = chunk_starts(masters);
  const uint64_t master_total = master_offsets_.back();
  const bool q8 = options_.adam_states == AdamStates::q8;
  scale_offsets_ = {0};
  for (const ParamSpec& p : layout.params) scale_offsets_.push_back(scale_offsets_.back() + kernels::adam8bit_blocks(p.elements));
  const uint64_t moment_bytes = q8 ? master_total / sizeof(float) : master_total;
  const uint64_t scale_bytes = q8 ? scale_offsets_.back() * sizeof(float) : 0;
  const bool on_device = options_.optimizer_device == TrainOptions::OptimizerDevice::device;
  const bool half = options_.dtype != DType::f32;
  if (!on_device) {
    // Gradient slots on the device: two for the layers (one in backward, one draining), one
    // each for the embedding and the head chunks (used at the same time when the head is tied).
    const GradientOffloaderOptions go = gradient_slot_options(layout, options_.dtype, model_.config().name);
    STRATA_ASSIGN_OR_RETURN(offloader_, GradientOffloader::create(backend_, pinned, go, pool_, trace_));
    offloader_host_bytes_ = gradient_offloader_pinned_bytes(go);
    STRATA_RETURN_IF_ERROR(model_.set_grad_sink(offloader_.get()));
  }
  if (on_device) {
    // Masters (16-bit only) and moments beside the weights; the pinned copies below are mirrors.
    for (auto [slot, what] : {std::pair{&device_masters_, "fp32 master weights"}, {&device_m_, "Adam m"},
                              {&device_v_, "Adam v"}}) {
      if (slot == &device_masters_ && !half) continue;
      STRATA_ASSIGN_OR_RETURN(void* block, backend_.allocate(master_total, fmt::format("optimizer {}", what)));
      *slot = static_cast<std::byte*>(block);
      STRATA_RETURN_IF_ERROR(backend_.fill_zero(block, master_total));
    }
  }
  const std::pair<PinnedBuffer*, uint64_t> buffers[] = {{&masters_, master_total}, {&m_, moment_bytes},
                                                         {&v_, moment_bytes}, {&m_scale_, scale_bytes},
                                                         {&v_scale_, scale_bytes}};
  for (auto [buffer, bytes] : buffers) {
    if (bytes == 0) continue;
    STRATA_ASSIGN_OR_RETURN(*buffer, pinned.acquire(bytes));
    std::memset(buffer->data(), 0, bytes);
  }
  if (!on_device) build_cpu_tensors();
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

// The exact fp32 values of the model's last load or init when it kept them (16-bit models), else
// the device weights (exact for fp32; for 16-bit only the rounded values are left: warned).
Status Trainer::init_masters() {
  std::vector<std::vector<float>> exact = model_.take_fp32_weights();
  const std::vector<ChunkSpec>& chunks = model_.master_layout().chunks;
  if (!exact.empty()) {
    for (size_t c = 0; c < chunks.size(); ++c)
      std::memcpy(masters_.data() + master_offsets_[c], exact[c].data(), chunks[c].bytes);
    return copy_device_state(/*to_device=*/true);
  }
  if (options_.dtype == DType::f32) return read_weights(masters_.data());
  spdlog::warn("the fp32 master weights start from the model's {} weights (it was loaded or initialised before "
               "another trainer took its fp32 values)", dtype_name(options_.dtype));
  std::vector<std::byte> staged(chunk_offsets_.back());
  STRATA_RETURN_IF_ERROR(read_weights(staged.data()));
  const kernels::FloatFormat format = float_format_of(options_.dtype, "weights").value();
  const ParamLayout& layout = model_.layout();
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const ParamSpec& p = layout.params[i];
    const auto* src = reinterpret_cast<const uint16_t*>(staged.data() + chunk_offsets_[p.chunk] + p.offset);
    auto* dst = reinterpret_cast<float*>(masters_.data() + master_offsets_[p.chunk] +
                                         model_.master_layout().params[i].offset);
    for (uint64_t e = 0; e < p.elements; ++e) dst[e] = kernels::half_to_float(format, src[e]);
  }
  return copy_device_state(/*to_device=*/true);
}

// Masters (16-bit; fp32's are the model's weights, which the device already holds) and moments.
Status Trainer::copy_device_state(bool to_device) {
  if (device_m_ == nullptr) return Status::ok();
  const uint64_t bytes = masters_.size();
  const Stream stream = to_device ? Stream::h2d : Stream::d2h;
  STRATA_RETURN_IF_ERROR(backend_.record(*computed_, Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.wait(stream, *computed_));
  std::pair<std::byte*, std::byte*> pairs[] = {{device_masters_, masters_.data()}, {device_m_, m_.data()},
                                               {device_v_, v_.data()}};
  for (auto [device, host] : pairs) {
    if (device == nullptr) continue;
    STRATA_RETURN_IF_ERROR(to_device ? backend_.copy_to_device(device, host, bytes, stream)
                                     : backend_.copy_to_host(host, device, bytes, stream));
  }
  if (!to_device && device_masters_ == nullptr) {  // fp32: the masters are the model's weights
    STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::d2h));
    return read_weights(masters_.data());
  }
  STRATA_RETURN_IF_ERROR(backend_.record(*params_sent_, stream));
  if (to_device) return backend_.wait(Stream::compute, *params_sent_);  // the next step reads them
  return backend_.synchronize(*params_sent_);
}

Status Trainer::sync_host_state() { return copy_device_state(/*to_device=*/false); }

std::span<const float> Trainer::master(const ParamSpec& spec) const {
  const auto* at = reinterpret_cast<const float*>(masters_.data() + master_offsets_.at(spec.chunk) + spec.offset);
  return {at, spec.elements};
}

std::vector<OptimizerBuffer> Trainer::optimizer_buffers() {
  std::vector<OptimizerBuffer> out;
  const ParamLayout& masters = model_.master_layout();
  const auto name = [](std::string_view what, size_t c) { return std::string(what) + "." + std::to_string(c); };
  for (size_t c = 0; c < masters.chunks.size(); ++c) {
    const uint64_t at = master_offsets_[c], bytes = masters.chunks[c].bytes;
    if (options_.adam_states == AdamStates::f32) {
      out.push_back({name("m", c), SafeDType::f32, {m_.data() + at, bytes}});
      out.push_back({name("v", c), SafeDType::f32, {v_.data() + at, bytes}});
      continue;
    }
    // 8-bit: one code per fp32 slot; the chunk's block scales are those of its tensors, in order.
    const uint64_t codes_at = at / sizeof(float), codes = bytes / sizeof(float);
    uint64_t first = UINT64_MAX, last = 0;
    for (size_t i = 0; i < masters.params.size(); ++i) {
      if (size_t(masters.params[i].chunk) != c) continue;
      first = std::min<uint64_t>(first, scale_offsets_[i]);
      last = std::max<uint64_t>(last, scale_offsets_[i + 1]);
    }
    if (first > last) first = last;  // a chunk without tensors
    const uint64_t scale_at = first * sizeof(float), scale_bytes = (last - first) * sizeof(float);
    out.push_back({name("m_code", c), SafeDType::i8, {m_.data() + codes_at, codes}});
    out.push_back({name("v_code", c), SafeDType::u8, {v_.data() + codes_at, codes}});
    out.push_back({name("m_scale", c), SafeDType::f32, {m_scale_.data() + scale_at, scale_bytes}});
    out.push_back({name("v_scale", c), SafeDType::f32, {v_scale_.data() + scale_at, scale_bytes}});
  }
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

uint64_t Trainer::host_bytes() const {
  uint64_t bytes = 0;
  for (const PinnedBuffer* b : {&masters_, &m_, &v_, &m_scale_, &v_scale_}) bytes += b->size();
  return bytes + offloader_host_bytes_;
}

Status Trainer::read_weights(std::byte* host) {
  const ParamLayout& layout = model_.layout();
  for (size_t c = 0; c < layout.chunks.size(); ++c)
    STRATA_RETURN_IF_ERROR(model_.weights().read(c, host + chunk_offsets_[c]));
  return Status::ok();
}

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
  if (offloader_) {
    const float* acc = offloader_->accumulated(spec.chunk);
    std::copy(acc + at, acc + at + spec.elements, out.begin());
    return out;
  }
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_host(out.data(), model_.device_grads()->accumulated(spec.chunk) + at,
                                               spec.elements * sizeof(float), Stream::d2h));
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::d2h));
  return out;
}

// The CPU optimizer's tensors, per chunk and decay group: fp32 masters and moments (or 8-bit
// codes) in the pinned buffers, which never move, so they are built once. The gradient (the
// offloader's fp32 accumulator) and the copy-out (the weight source's update buffer) are bound per
// update from each tensor's element offset in the working layout.
void Trainer::build_cpu_tensors() {
  const ParamLayout& layout = model_.layout();
  const ParamLayout& masters = model_.master_layout();
  const bool q8 = options_.adam_states == AdamStates::q8;
  cpu_tensors_.assign(layout.chunks.size(), {});
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const ParamSpec& p = layout.params[i];
    const uint64_t master_at = master_offsets_[p.chunk] + masters.params[i].offset;
    CpuAdamTensor t;
    t.param = reinterpret_cast<float*>(masters_.data() + master_at);
    if (q8) {
      t.m_code = reinterpret_cast<int8_t*>(m_.data() + master_at / sizeof(float));
      t.v_code = reinterpret_cast<uint8_t*>(v_.data() + master_at / sizeof(float));
      t.m_scale = m_scale_.as<float>() + scale_offsets_[i];
      t.v_scale = v_scale_.as<float>() + scale_offsets_[i];
    } else {
      t.m = reinterpret_cast<float*>(m_.data() + master_at);
      t.v = reinterpret_cast<float*>(v_.data() + master_at);
    }
    t.n = p.elements;
    CpuChunkTensors& chunk = cpu_tensors_[p.chunk];
    (p.weight_decay ? chunk.decay : chunk.no_decay).push_back(t);
    (p.weight_decay ? chunk.decay_at : chunk.no_decay_at).push_back(p.offset / layout.element_bytes);
  }
}

// AdamW over the tensors of chunk `chunk` on the CPU: decaying tensors (>= 2 dims) and the others
// (norms, biases) in two calls. Gradients: the offloader's fp32 sums; for 16-bit training the
// rounded weights go straight into `copy_out` (the chunk's update buffer, working layout).
Status Trainer::adam_update(double lr, double grad_multiplier, size_t chunk, std::byte* copy_out) {
  CpuAdamOptions o;
  o.hyper = options_.adam_hyper;
  o.hyper.lr = float(lr);
  o.hyper.step = int64_t(updates_done_ + 1);  // bias correction counts applied updates only
  o.hyper.grad_scale = float(grad_multiplier);
  o.formats = kernels::AdamFormats{.grad = kernels::FloatFormat::f32, .copy = copy_out_for(options_.dtype)};
  o.states = options_.adam_states;
  const float* grads = offloader_->accumulated(chunk);
  const uint64_t esize = model_.layout().element_bytes;
  CpuChunkTensors& t = cpu_tensors_[chunk];
  for (const bool decayed : {true, false}) {
    std::vector<CpuAdamTensor>& group = decayed ? t.decay : t.no_decay;
    const std::vector<uint64_t>& at = decayed ? t.decay_at : t.no_decay_at;
    for (size_t i = 0; i < group.size(); ++i) {
      group[i].grad = grads + at[i];
      group[i].copy_out = o.formats.copy == kernels::CopyOut::none ? nullptr : copy_out + at[i] * esize;
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

// The CPU optimizer's update, chunk by chunk in chunk order, once every gradient is on the host:
// Adam over chunk c writes its new working weights into the weight source's update buffer, and the
// commit sends them home (resident: uploaded while chunk c + 1 is updated; pinned CPU: in place;
// NVMe: written behind). fp32 training updates the masters in place and copies them out. The
// same arithmetic per tensor as one pass over everything: the order of chunks changes no bit.
Status Trainer::cpu_update(double lr, double grad_multiplier) {
  const std::vector<ChunkSpec>& chunks = model_.layout().chunks;
  WeightSource& weights = model_.weights();
  for (size_t c = 0; c < chunks.size(); ++c) {
    STRATA_ASSIGN_OR_RETURN(std::byte* out, weights.update_buffer(c));
    const double t0 = trace_ ? trace_->now_us() : 0;
    STRATA_RETURN_IF_ERROR(adam_update(lr, grad_multiplier, c, out));
    if (options_.dtype == DType::f32) std::memcpy(out, masters_.data() + master_offsets_[c], chunks[c].bytes);
    if (trace_) trace_->span("cpu adam", fmt::format("chunk {}", c), t0, trace_->now_us());
    STRATA_RETURN_IF_ERROR(weights.commit_update(c));
  }
  return Status::ok();
}

StatusOr<StepResult> Trainer::step(const NextBatch& next) {
  StepResult r;
  r.step = steps_done_ + 1;
  r.lr = schedule_.lr(steps_done_);
  const double loss_scale = scaler_ ? scaler_->scale() : 1.0;
  if (scaler_) r.loss_scale = loss_scale;
  STRATA_RETURN_IF_ERROR(model_.weights().begin_sequence("train"));
  STRATA_RETURN_IF_ERROR(model_.zero_grad());
  const uint64_t K = options_.grad_accum;
  for (uint64_t k = 0; k < K; ++k) {
    if (offloader_) offloader_->set_last_micro_batch(k + 1 == K);
    STRATA_ASSIGN_OR_RETURN(BatchView batch, next());
    STRATA_RETURN_IF_ERROR(upload_batch(batch));  // checks the batch's shape before anything reads it
    const int64_t counted = counted_targets(batch);
    if (counted == 0)
      return error(Code::invalid_argument, "micro-batch {} of step {} has no counted targets (all -1)", k + 1,
                   r.step);
    STRATA_RETURN_IF_ERROR(model_.forward(inputs_, targets_, batch.batch_size, batch.seq_len));
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
  STRATA_RETURN_IF_ERROR(cpu_update(r.lr, r.clip_scale / loss_scale));
  ++updates_done_;
  return r;
}

StatusOr<double> Trainer::evaluate(const NextBatch& next, uint64_t batches) {
  if (batches == 0) return error(Code::invalid_argument, "evaluate needs at least one batch");
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
