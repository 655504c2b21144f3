// Trainer: the optimizer step of a resident fp32 Transformer (see trainer.h).
#include "model/trainer.h"

#include <cmath>
#include <cstring>
#include <span>

#include "offload/cpu_adam.h"

namespace strata::model {
namespace {

// The device address of `spec` in the weights or gradients of `model`: the slot pointer the
// model exposes, moved from the slot's start to the tensor's (fused q|k|v rows, gate|up).
std::byte* device_tensor(const Transformer& model, const ParamSpec& spec, ParamState state) {
  float* slot = nullptr;
  if (spec.layer >= 0) {
    LayerParams p = state == ParamState::weights ? model.layer_params(spec.layer) : model.layer_grads(spec.layer);
    slot = slot_field(p, LayerSlot(spec.slot));
  } else {
    GlobalParams p = state == ParamState::weights ? model.params() : model.grads();
    slot = slot_field(p, GlobalSlot(spec.slot));
  }
  return reinterpret_cast<std::byte*>(slot) + (spec.offset - spec.slot_offset);
}

// Targets that count toward the loss (not kernels::kIgnoreTarget), from the host copy of the batch.
int64_t counted_targets(const BatchView& batch) {
  const int64_t n = int64_t(batch.batch_size) * batch.seq_len;
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) counted += batch.targets[i] != kernels::kIgnoreTarget;
  return counted;
}

}  // namespace

Trainer::Trainer(Backend& backend, Transformer& model, ThreadPool* pool, const TrainOptions& options,
                 LrSchedule schedule)
    : backend_(backend), model_(model), pool_(pool), options_(options), schedule_(std::move(schedule)) {}

Status check_trainer_options(const TrainOptions& options) {
  if (options.dtype != DType::f32)
    return error(Code::invalid_argument, "this build trains in fp32 only: pass --dtype fp32 (got {})",
                 dtype_name(options.dtype));
  if (options.adam_states != AdamStates::f32)
    return error(Code::invalid_argument,
                 "the resident trainer keeps fp32 Adam moments; pass --optimizer-type adamw (or adam)");
  if (options.grad_accum == 0) return error(Code::invalid_argument, "grad_accum must be at least 1");
  kernels::AdamHyper hyper = options.adam_hyper;
  hyper.lr = float(options.lr_schedule.peak_lr);
  STRATA_RETURN_IF_ERROR(validate_adam_hyper(hyper));
  return LrSchedule::create(options.lr_schedule).status();
}

StatusOr<std::unique_ptr<Trainer>> Trainer::create(Backend& backend, Transformer& model, PinnedPool& pinned,
                                                   ThreadPool* pool, const TrainOptions& options) {
  STRATA_RETURN_IF_ERROR(check_trainer_options(options));
  STRATA_ASSIGN_OR_RETURN(LrSchedule schedule, LrSchedule::create(options.lr_schedule));
  std::unique_ptr<Trainer> t(new Trainer(backend, model, pool, options, std::move(schedule)));
  STRATA_RETURN_IF_ERROR(t->allocate(pinned));
  STRATA_RETURN_IF_ERROR(t->copy_chunks(/*to_device=*/false, t->masters_.data(), ParamState::weights));
  return t;
}

Trainer::~Trainer() {
  (void)backend_.synchronize_all();
  for (void* p : {static_cast<void*>(inputs_), static_cast<void*>(targets_), static_cast<void*>(norm_sq_)})
    if (p != nullptr) (void)backend_.release(p);
}

Status Trainer::allocate(PinnedPool& pinned) {
  const ParamLayout& layout = model_.layout();
  uint64_t total = 0;
  for (const ChunkSpec& c : layout.chunks) {
    chunk_offsets_.push_back(total);
    total += c.bytes;
  }
  device_params_.assign(layout.chunks.size(), nullptr);
  device_grads_.assign(layout.chunks.size(), nullptr);
  for (const ParamSpec& p : layout.params) {
    if (device_params_[p.chunk] != nullptr) continue;
    device_params_[p.chunk] = device_tensor(model_, p, ParamState::weights) - p.offset;
    device_grads_[p.chunk] = device_tensor(model_, p, ParamState::gradients) - p.offset;
  }
  for (PinnedBuffer* b : {&masters_, &grads_, &m_, &v_}) {
    STRATA_ASSIGN_OR_RETURN(*b, pinned.acquire(total));
    std::memset(b->data(), 0, total);
  }
  STRATA_ASSIGN_OR_RETURN(scalars_, pinned.acquire(sizeof(float)));
  STRATA_ASSIGN_OR_RETURN(losses_, pinned.acquire(options_.grad_accum * sizeof(kernels::CrossEntropyResult)));
  const TransformerOptions& mo = model_.options();
  const uint64_t batch_bytes = uint64_t(mo.batch * mo.seq_len) * sizeof(int32_t);
  STRATA_ASSIGN_OR_RETURN(void* in, backend_.allocate(batch_bytes, "trainer inputs"));
  inputs_ = static_cast<int32_t*>(in);
  STRATA_ASSIGN_OR_RETURN(void* tg, backend_.allocate(batch_bytes, "trainer targets"));
  targets_ = static_cast<int32_t*>(tg);
  STRATA_ASSIGN_OR_RETURN(void* ns, backend_.allocate(sizeof(float), "trainer grad norm"));
  norm_sq_ = static_cast<float*>(ns);
  uploaded_ = backend_.create_event();
  computed_ = backend_.create_event();
  loss_copied_ = backend_.create_event();
  grads_ready_ = backend_.create_event();
  params_sent_ = backend_.create_event();
  return Status();
}

std::span<const std::byte> Trainer::first_moment(size_t chunk) const {
  return {m_.data() + chunk_offsets_.at(chunk), model_.layout().chunks.at(chunk).bytes};
}

std::span<const std::byte> Trainer::second_moment(size_t chunk) const {
  return {v_.data() + chunk_offsets_.at(chunk), model_.layout().chunks.at(chunk).bytes};
}

Status Trainer::restore_optimizer(uint64_t steps_done, const std::vector<std::span<const std::byte>>& m,
                                  const std::vector<std::span<const std::byte>>& v) {
  const std::vector<ChunkSpec>& chunks = model_.layout().chunks;
  if (m.size() != chunks.size() || v.size() != chunks.size())
    return error(Code::invalid_argument, "the optimizer state has {} and {} moment chunks; this model has {}",
                 m.size(), v.size(), chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (m[c].size() != chunks[c].bytes || v[c].size() != chunks[c].bytes)
      return error(Code::invalid_argument, "the optimizer state of chunk '{}' has {} bytes; this model's has {}",
                   chunks[c].name, m[c].size(), chunks[c].bytes);
  }
  STRATA_RETURN_IF_ERROR(copy_chunks(/*to_device=*/false, masters_.data(), ParamState::weights));
  for (size_t c = 0; c < chunks.size(); ++c) {
    std::memcpy(m_.data() + chunk_offsets_[c], m[c].data(), m[c].size());
    std::memcpy(v_.data() + chunk_offsets_[c], v[c].data(), v[c].size());
  }
  steps_done_ = steps_done;
  return Status();
}

uint64_t Trainer::host_bytes() const { return masters_.size() + grads_.size() + m_.size() + v_.size(); }

Status Trainer::copy_chunks(bool to_device, std::byte* host, ParamState state) {
  const ParamLayout& layout = model_.layout();
  const std::vector<std::byte*>& device = state == ParamState::weights ? device_params_ : device_grads_;
  const Stream stream = to_device ? Stream::h2d : Stream::d2h;
  Event& done = to_device ? *params_sent_ : *grads_ready_;
  // The copy starts after the compute work queued so far (backward, or the last forward).
  STRATA_RETURN_IF_ERROR(backend_.record(*computed_, Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.wait(stream, *computed_));
  for (size_t c = 0; c < layout.chunks.size(); ++c) {
    if (device[c] == nullptr) continue;
    std::byte* h = host + chunk_offsets_[c];
    const uint64_t bytes = layout.chunks[c].bytes;
    STRATA_RETURN_IF_ERROR(to_device ? backend_.copy_to_device(device[c], h, bytes, stream)
                                     : backend_.copy_to_host(h, device[c], bytes, stream));
  }
  STRATA_RETURN_IF_ERROR(backend_.record(done, stream));
  if (to_device) return backend_.wait(Stream::compute, done);  // the next forward reads them
  return backend_.synchronize(done);  // the host reads them next
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

StatusOr<kernels::CrossEntropyResult> Trainer::forward_uploaded(const BatchView& batch) {
  STRATA_RETURN_IF_ERROR(upload_batch(batch));
  STRATA_RETURN_IF_ERROR(model_.forward(inputs_, targets_, batch.batch_size, batch.seq_len));
  return model_.read_loss();
}

// Queues the copy of the last forward's loss into host slot `micro_batch`; the next forward (which
// rewrites the device loss) waits for the copy. No host synchronisation: the step reads the slots
// after grad_norm() has synchronised the d2h stream.
Status Trainer::queue_loss_copy(uint64_t micro_batch) {
  STRATA_RETURN_IF_ERROR(backend_.record(*computed_, Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.wait(Stream::d2h, *computed_));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_host(losses_.as<kernels::CrossEntropyResult>() + micro_batch,
                                               model_.loss_result(), sizeof(kernels::CrossEntropyResult),
                                               Stream::d2h));
  STRATA_RETURN_IF_ERROR(backend_.record(*loss_copied_, Stream::d2h));
  return backend_.wait(Stream::compute, *loss_copied_);
}

StatusOr<double> Trainer::grad_norm() {
  STRATA_RETURN_IF_ERROR(backend_.fill_zero(norm_sq_, sizeof(float), Stream::compute));
  for (const ParamSpec& p : model_.layout().params) {
    STRATA_RETURN_IF_ERROR(backend_.ops().grad_norm_squared(
        norm_sq_, device_tensor(model_, p, ParamState::gradients), DType::f32, int64_t(p.elements)));
  }
  STRATA_RETURN_IF_ERROR(backend_.record(*computed_, Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.wait(Stream::d2h, *computed_));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_host(scalars_.data(), norm_sq_, sizeof(float), Stream::d2h));
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::d2h));
  return std::sqrt(double(*scalars_.as<float>()));
}

Status Trainer::adam_update(double lr, double clip_scale) {
  // Two groups: tensors that decay (>= 2 dims) and those that do not (norms, biases).
  std::vector<CpuAdamTensor> decay, no_decay;
  for (const ParamSpec& p : model_.layout().params) {
    const uint64_t at = chunk_offsets_[p.chunk] + p.offset;
    CpuAdamTensor t;
    t.param = reinterpret_cast<float*>(masters_.data() + at);
    t.m = reinterpret_cast<float*>(m_.data() + at);
    t.v = reinterpret_cast<float*>(v_.data() + at);
    t.grad = grads_.data() + at;
    t.n = p.elements;
    (p.weight_decay ? decay : no_decay).push_back(t);
  }
  CpuAdamOptions o;
  o.hyper = options_.adam_hyper;
  o.hyper.lr = float(lr);
  o.hyper.step = int64_t(steps_done_ + 1);
  o.hyper.grad_scale = float(clip_scale);
  o.formats = kernels::AdamFormats{.grad = kernels::FloatFormat::f32, .copy = kernels::CopyOut::none};
  o.states = AdamStates::f32;
  STRATA_RETURN_IF_ERROR(cpu_adam_step(pool_, decay, o).status());
  o.hyper.weight_decay = 0.0f;
  return cpu_adam_step(pool_, no_decay, o).status();
}

StatusOr<StepResult> Trainer::step(const NextBatch& next) {
  StepResult r;
  r.step = steps_done_ + 1;
  r.lr = schedule_.lr(steps_done_);
  STRATA_RETURN_IF_ERROR(model_.zero_grad());
  const uint64_t K = options_.grad_accum;
  for (uint64_t k = 0; k < K; ++k) {
    STRATA_ASSIGN_OR_RETURN(BatchView batch, next());
    const int64_t counted = counted_targets(batch);
    if (counted == 0)
      return error(Code::invalid_argument, "micro-batch {} of step {} has no counted targets (all -1)", k + 1,
                   r.step);
    STRATA_RETURN_IF_ERROR(upload_batch(batch));
    STRATA_RETURN_IF_ERROR(model_.forward(inputs_, targets_, batch.batch_size, batch.seq_len));
    STRATA_RETURN_IF_ERROR(queue_loss_copy(k));
    STRATA_RETURN_IF_ERROR(model_.backward(counted, float(1.0 / double(K))));
    r.tokens += uint64_t(counted);
  }
  STRATA_ASSIGN_OR_RETURN(r.grad_norm, grad_norm());  // synchronises d2h: the loss slots are filled
  for (uint64_t k = 0; k < K; ++k) r.loss += double(losses_.as<kernels::CrossEntropyResult>()[k].mean_loss) / double(K);
  if (options_.clip_grad_norm > 0) r.clip_scale = std::min(1.0, options_.clip_grad_norm / (r.grad_norm + 1e-6));
  STRATA_RETURN_IF_ERROR(copy_chunks(/*to_device=*/false, grads_.data(), ParamState::gradients));
  STRATA_RETURN_IF_ERROR(adam_update(r.lr, r.clip_scale));
  STRATA_RETURN_IF_ERROR(copy_chunks(/*to_device=*/true, masters_.data(), ParamState::weights));
  steps_done_ = r.step;
  return r;
}

StatusOr<double> Trainer::evaluate(const NextBatch& next, uint64_t batches) {
  if (batches == 0) return error(Code::invalid_argument, "evaluate needs at least one batch");
  double sum = 0.0;
  for (uint64_t i = 0; i < batches; ++i) {
    STRATA_ASSIGN_OR_RETURN(BatchView batch, next());
    STRATA_ASSIGN_OR_RETURN(kernels::CrossEntropyResult loss, forward_uploaded(batch));
    sum += double(loss.mean_loss);
  }
  return sum / double(batches);
}

}  // namespace strata::model
