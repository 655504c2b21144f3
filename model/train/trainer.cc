// Trainer: the optimizer step of a Transformer over its weight source, gradient sink and optimizer
// (see trainer.h).
#include "model/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/cpu/half.h"

namespace strata::model {
namespace {

// Targets that count toward the loss (not kernels::kIgnoreTarget), from the host copy of the batch.
int64_t counted_targets(const BatchView& batch) {
  const int64_t n = int64_t(batch.batch_size) * batch.seq_len;
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) counted += batch.targets[i] != kernels::kIgnoreTarget;
  return counted;
}

// check_trainer_options, and the model computes in options.dtype. `mine`: this rank's micro-batches
// a step (all of them on one rank).
Status check_model_options(const Transformer& model, const TrainOptions& options, uint64_t mine) {
  STRATA_RETURN_IF_ERROR(check_trainer_options(options));
  if (model.dtype() != options.dtype)
    return error(Code::invalid_argument, "the model computes in {} but the trainer options ask for {}; create both "
                 "with the same --dtype", dtype_name(model.dtype()), dtype_name(options.dtype));
  if (options.step_schedule == StepSchedule::layer_major && mine > 1 && model.options().micro_batches < int64_t(mine))
    return error(Code::invalid_argument, "the layer-major schedule of {} micro-batches needs a model created for them "
                 "(TransformerOptions::micro_batches = {}, with checkpoint_layers), not {}", mine, mine,
                 model.options().micro_batches);
  return Status::ok();
}

// Whether a step runs layer-major (model/train/step_schedule.h): asked for, or automatic with a
// model created for this rank's `mine` micro-batches (a run resolves automatic before it creates
// the model).
bool runs_layer_major(const Transformer& model, const TrainOptions& options, uint64_t mine) {
  if (mine < 2) return false;
  if (options.step_schedule == StepSchedule::layer_major) return true;
  return options.step_schedule == StepSchedule::automatic && model.options().micro_batches >= int64_t(mine);
}

// This rank's micro-batches a step: all of them alone; across ranks grad_accum / N, which must be
// whole (each rank runs the same number of a step's micro-batches). TrainOptions::rank_micro_batches
// with N from the communicator (a trainer built directly may leave options.ranks at 1) and checked.
StatusOr<uint64_t> checked_rank_micro_batches(const TrainOptions& options, const Communicator* comm) {
  if (comm == nullptr) return options.grad_accum;
  const uint64_t n = uint64_t(comm->size());
  if (options.grad_accum % n != 0)
    return error(Code::invalid_argument, "across {} ranks each runs the same number of a step's micro-batches, so "
                 "--grad-accum (the step's micro-batches over all ranks) must be a multiple of {}, not {}", n, n,
                 options.grad_accum);
  return options.grad_accum / n;
}

// Across ranks the gradient is partitioned before the optimizer is made, which then holds only
// this rank's shard of the state (DeviceGrads::spread_over_ranks, DeviceOptimizer).
Status partition_gradients(Transformer& model, const TrainOptions& options, Communicator& comm) {
  STRATA_ASSIGN_OR_RETURN(const uint64_t mine, checked_rank_micro_batches(options, &comm));
  if (options.optimizer_home != Tier::device) return Status::ok();  // make_optimizer's GradientExchange
  if (model.device_grads() == nullptr || model.grad_sink() != model.device_grads())
    return error(Code::invalid_argument, "across ranks the optimizer on the device needs the model's device "
                 "gradients (create the model with device_grads = true)");
  return model.device_grads()->spread_over_ranks(comm, model.gradient_releases(), mine);
}

}  // namespace

Trainer::Trainer(Backend& backend, Transformer& model, const TrainOptions& options, LrSchedule schedule,
                 OptimizerParts parts)
    : backend_(backend), model_(model), options_(options), schedule_(std::move(schedule)), parts_(std::move(parts)) {}

Status check_trainer_options(const TrainOptions& options) {
  if (options.dtype != DType::f32 && options.dtype != DType::bf16 && options.dtype != DType::f16)
    return error(Code::invalid_argument, "the trainer computes in fp32, bf16 or fp16, not {}; pass --dtype bf16",
                 dtype_name(options.dtype));
  if (options.grad_accum == 0) return error(Code::invalid_argument, "grad_accum must be at least 1");
  kernels::AdamHyper hyper = options.adam_hyper;
  hyper.lr = float(options.lr_schedule.peak_lr);
  STRATA_RETURN_IF_ERROR(validate_adam_hyper(hyper));
  if (options.dtype == DType::f16) STRATA_RETURN_IF_ERROR(LossScaler::create(options.loss_scaler).status());
  return LrSchedule::create(options.lr_schedule).status();
}

StatusOr<std::unique_ptr<Trainer>> Trainer::create(Backend& backend, Transformer& model, PinnedPool& pinned,
                                                   ThreadPool* pool, const TrainOptions& options, TrainerIo io) {
  STRATA_ASSIGN_OR_RETURN(const uint64_t mine, checked_rank_micro_batches(options, io.comm));
  STRATA_RETURN_IF_ERROR(check_model_options(model, options, mine));
  if (io.comm != nullptr) STRATA_RETURN_IF_ERROR(partition_gradients(model, options, *io.comm));
  STRATA_ASSIGN_OR_RETURN(OptimizerParts parts,
                          make_optimizer(backend, model, pinned, pool, options, io.trace, io.store, io.comm,
                                         io.resident_part));
  return create(backend, model, pinned, options, std::move(parts), io.comm);
}

StatusOr<std::unique_ptr<Trainer>> Trainer::create(Backend& backend, Transformer& model, PinnedPool& pinned,
                                                   const TrainOptions& options, OptimizerParts parts,
                                                   Communicator* comm) {
  STRATA_ASSIGN_OR_RETURN(const uint64_t mine, checked_rank_micro_batches(options, comm));
  STRATA_RETURN_IF_ERROR(check_model_options(model, options, mine));
  if (parts.state == nullptr || parts.optimizer == nullptr)
    return error(Code::invalid_argument, "the trainer needs an optimizer and its state (make_optimizer)");
  STRATA_ASSIGN_OR_RETURN(LrSchedule schedule, LrSchedule::create(options.lr_schedule));
  std::unique_ptr<Trainer> t(new Trainer(backend, model, options, std::move(schedule), std::move(parts)));
  t->micro_batches_ = mine;
  t->layer_major_ = runs_layer_major(model, options, mine);
  if (options.dtype == DType::f16) {
    STRATA_ASSIGN_OR_RETURN(t->scaler_, LossScaler::create(options.loss_scaler));
  }
  if (t->parts_.sink() != nullptr) STRATA_RETURN_IF_ERROR(model.set_grad_sink(t->parts_.sink()));
  model.set_optimizer(t->parts_.optimizer.get());
  STRATA_RETURN_IF_ERROR(t->allocate(pinned));
  if (comm != nullptr) STRATA_RETURN_IF_ERROR(t->join_ranks(*comm));
  STRATA_RETURN_IF_ERROR(t->init_masters());
  return t;
}

Status Trainer::join_ranks(Communicator& comm) {
  const int n = comm.size();
  const bool device = model_.device_grads() != nullptr && model_.device_grads()->communicator() == &comm;
  const bool cpu = parts_.exchange != nullptr && &parts_.exchange->communicator() == &comm;
  if (!device && !cpu)
    return error(Code::failed_precondition, "across ranks the gradient is partitioned before the optimizer is made "
                 "(Trainer::create with TrainerIo::comm does both)");
  const uint64_t per_rank = micro_batches_ + 1;  // its micro-batches' losses, its tokens
  STRATA_ASSIGN_OR_RETURN(void* losses,
                          backend_.allocate(per_rank * sizeof(double) * uint64_t(n), "trainer rank losses"));
  rank_losses_ = static_cast<double*>(losses);
  comm_ = &comm;
  return Status::ok();
}

// Every rank's (mean loss of each of its m micro-batches, counted tokens) gathered into rank order
// on the compute stream, then summed as one rank sums the step's K micro-batches: loss += mean_k /
// K for k = 0, 1, ..., micro-batch k = j x ranks + r being rank r's j-th (model/data/rank_batches.h).
Status Trainer::gather_losses(StepResult& r, uint64_t counted) {
  const uint64_t n = uint64_t(comm_->size()), m = micro_batches_, row = m + 1;
  std::vector<double> mine(row);
  for (uint64_t j = 0; j < m; ++j) mine[j] = double(losses_.as<kernels::CrossEntropyResult>()[j].mean_loss);
  mine[m] = double(counted);
  std::vector<double> all(row * n);
  double* slot = rank_losses_ + row * uint64_t(comm_->rank());
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_device(slot, mine.data(), row * sizeof(double), Stream::compute));
  STRATA_RETURN_IF_ERROR(comm_->all_gather(slot, rank_losses_, row * sizeof(double), Stream::compute));
  STRATA_RETURN_IF_ERROR(comm_->synchronize(Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_host(all.data(), rank_losses_, all.size() * sizeof(double), Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::compute));
  r.loss = 0;
  r.tokens = 0;
  for (uint64_t j = 0; j < m; ++j)
    for (uint64_t p = 0; p < n; ++p) r.loss += double(float(all[p * row + j])) / double(options_.grad_accum);
  for (uint64_t p = 0; p < n; ++p) r.tokens += uint64_t(all[p * row + m]);
  return Status::ok();
}

Trainer::~Trainer() {
  if (Status s = finish_update(); !s.is_ok()) spdlog::error("the last step's update was not applied: {}", s.message());
  if (model_.optimizer() == parts_.optimizer.get()) model_.set_optimizer(nullptr);
  (void)backend_.synchronize_all();
  if (parts_.sink() != nullptr && model_.grad_sink() == parts_.sink()) (void)model_.set_grad_sink(nullptr);
  for (size_t k = 0; k < inputs_.size(); ++k)
    for (void* p : {static_cast<void*>(inputs_[k]), static_cast<void*>(targets_[k])})
      if (p != nullptr) (void)backend_.release(p);
  if (rank_losses_ != nullptr) (void)backend_.release(rank_losses_);
}

Status Trainer::allocate(PinnedPool& pinned) {
  STRATA_ASSIGN_OR_RETURN(losses_, pinned.acquire(options_.grad_accum * sizeof(kernels::CrossEntropyResult)));
  const TransformerOptions& mo = model_.options();
  const uint64_t batch_bytes = uint64_t(mo.batch * mo.seq_len) * sizeof(int32_t);
  // Layer-major: every micro-batch this rank runs a step is on the device at once.
  const uint64_t buffers = layer_major_ ? micro_batches_ : 1;
  for (uint64_t k = 0; k < buffers; ++k) {
    STRATA_ASSIGN_OR_RETURN(void* in, backend_.allocate(batch_bytes, fmt::format("trainer inputs {}", k)));
    inputs_.push_back(static_cast<int32_t*>(in));
    STRATA_ASSIGN_OR_RETURN(void* tg, backend_.allocate(batch_bytes, fmt::format("trainer targets {}", k)));
    targets_.push_back(static_cast<int32_t*>(tg));
  }
  uploaded_ = backend_.create_event();
  computed_ = backend_.create_event();
  loss_copied_ = backend_.create_event();
  return Status::ok();
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
  STRATA_RETURN_IF_ERROR(parts_.state->fill_masters(produce, /*write_back=*/true));
  return parts_.optimizer->state_from_host();
}

Status Trainer::sync_host_state() {
  STRATA_RETURN_IF_ERROR(finish_update());
  return parts_.optimizer->state_to_host();
}

Status Trainer::visit_state(bool write_back, const PieceVisit& visit) {
  STRATA_RETURN_IF_ERROR(finish_update());
  OptimizerState& state = *parts_.state;
  if (state.partitioned() && !write_back) return visit_gathered(visit, nullptr, /*masters_only=*/false);
  return visit_pieces(write_back, visit);
}

Status Trainer::visit_pieces(bool write_back, const PieceVisit& visit) {
  OptimizerState& state = *parts_.state;
  return state.pipeline().for_each_chunk(
      state.order(),
      [&](size_t i, ChunkState& image) { return visit(state.pieces()[i], state.pipeline().layout(i), image); },
      write_back);
}

// Chunk by chunk (those `chunks` marks; all when null): this rank's pieces copied into a whole image
// of the chunk, each array's shards (every rank's master range of it; of 8-bit block scales, the
// scales of the blocks in that range; the masters alone with `masters_only`) all-gathered into
// place, the image visited.
Status Trainer::visit_gathered(const PieceVisit& visit, const std::vector<bool>* chunks, bool masters_only) {
  OptimizerState& state = *parts_.state;
  if (parts_.gather == nullptr)
    return error(Code::internal, "a partitioned optimizer state without its gather (make_optimizer builds both)");
  const int ranks = state.ranks();
  // One array of a state image: its region in a layout (the chunk's, or a piece's), its unit (the
  // bytes an element or a block scale takes), and whether it is indexed by block scale rather than
  // by fp32 element.
  struct Array {
    StateRegion OptimizerStateLayout::*region;
    uint64_t unit;
    bool scales;
  };
  using L = OptimizerStateLayout;
  std::vector<std::byte> image, all;
  Status visited;  // the first visit's error: later chunks are gathered, not visited
  for (size_t c = 0; c < state.chunk_count(); ++c) {
    if (chunks != nullptr && !(*chunks)[c]) continue;
    const OptimizerStateLayout& layout = state.chunk_layout(c);
    const bool q8 = layout.states == AdamStates::q8;
    image.assign(layout.padded, std::byte{0});
    std::vector<Array> arrays = {{&L::master, sizeof(float), false}};
    if (!masters_only && !q8) {
      arrays.insert(arrays.end(), {{&L::m, sizeof(float), false}, {&L::v, sizeof(float), false}});
    } else if (!masters_only) {
      arrays.insert(arrays.end(), {{&L::m_code, 1, false},
                                   {&L::v_code, 1, false},
                                   {&L::m_scale, sizeof(float), true},
                                   {&L::v_scale, sizeof(float), true}});
    }
    STRATA_RETURN_IF_ERROR(state.pipeline().for_each_chunk(
        state.pieces_of(c),
        [&](size_t i, ChunkState& piece) {
          const StatePiece& p = state.pieces()[i];
          const OptimizerStateLayout& piece_layout = state.pipeline().layout(i);
          for (const Array& a : arrays) {
            const uint64_t at = a.scales ? p.scale_begin : p.element_begin;
            const uint64_t count = a.scales ? p.scales() : p.elements();
            std::memcpy(image.data() + (layout.*a.region).offset + at * a.unit,
                        piece.image.data() + (piece_layout.*a.region).offset, count * a.unit);
          }
          return Status::ok();
        },
        /*write_back=*/false));
    // Every rank's master range, and (8-bit moments) the block scales it holds.
    std::vector<ElementRange> range(static_cast<size_t>(ranks)), scales(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      range[size_t(r)] = master_shard(model_.layout(), model_.master_layout(), c, ranks, r);
      if (q8) scales[size_t(r)] = range_scales(model_.master_layout(), c, range[size_t(r)]);
    }
    for (const Array& a : arrays) {
      const std::vector<ElementRange>& cut = a.scales ? scales : range;
      uint64_t widest = 0;
      for (const ElementRange& e : cut) widest = std::max(widest, e.elements());
      const uint64_t block = widest * a.unit;
      all.resize(uint64_t(ranks) * block);
      std::byte* array = image.data() + (layout.*a.region).offset;
      const ElementRange& mine = cut[size_t(state.rank())];
      STRATA_RETURN_IF_ERROR(parts_.gather->gather(array + mine.begin * a.unit, mine.elements() * a.unit, block,
                                                   all.data(), all.size()));
      for (int r = 0; r < ranks; ++r)
        std::memcpy(array + cut[size_t(r)].begin * a.unit, all.data() + uint64_t(r) * block,
                    cut[size_t(r)].elements() * a.unit);
    }
    if (!visited.is_ok()) continue;
    const auto at = [&](const StateRegion& region) { return image.data() + region.offset; };
    ChunkState whole{.chunk = c, .fp32_elements = layout.fp32_elements, .image = std::span(image.data(), layout.bytes)};
    whole.master = reinterpret_cast<float*>(at(layout.master));
    if (!masters_only && !q8) {
      whole.m = reinterpret_cast<float*>(at(layout.m));
      whole.v = reinterpret_cast<float*>(at(layout.v));
    } else if (!masters_only) {
      whole.scale_count = layout.scale_count;
      whole.m_code = reinterpret_cast<int8_t*>(at(layout.m_code));
      whole.v_code = reinterpret_cast<uint8_t*>(at(layout.v_code));
      whole.m_scale = reinterpret_cast<float*>(at(layout.m_scale));
      whole.v_scale = reinterpret_cast<float*>(at(layout.v_scale));
    }
    visited = visit(StatePiece{.chunk = c,
                               .element_begin = 0,
                               .element_end = layout.fp32_elements,
                               .scale_begin = 0,
                               .scale_end = q8 ? layout.scale_count : 0},
                    layout, whole);
  }
  return visited;
}

Status Trainer::visit_shards(const PieceVisit& visit) {
  STRATA_RETURN_IF_ERROR(finish_update());
  return visit_pieces(/*write_back=*/false, visit);
}

Status Trainer::visit_gathered_masters(const std::vector<bool>& chunks, const PieceVisit& visit) {
  STRATA_RETURN_IF_ERROR(finish_update());
  if (!parts_.state->partitioned())
    return error(Code::failed_precondition, "visit_gathered_masters: the optimizer state is not partitioned");
  if (chunks.size() != parts_.state->chunk_count())
    return error(Code::invalid_argument, "visit_gathered_masters: {} chunk flags for {} chunks", chunks.size(),
                 parts_.state->chunk_count());
  return visit_gathered(visit, &chunks, /*masters_only=*/true);
}

StatusOr<std::vector<float>> Trainer::master(const ParamSpec& spec) {
  STRATA_RETURN_IF_ERROR(finish_update());
  if (parts_.state->partitioned())
    return error(Code::failed_precondition, "the fp32 masters of '{}' are partitioned over {} ranks: no rank holds "
                 "them whole (a checkpoint gathers them)", spec.name, parts_.state->ranks());
  return parts_.state->master(spec);
}

Status Trainer::restore_progress(uint64_t steps_done, uint64_t updates_done,
                                 std::optional<std::string_view> loss_scaler_json) {
  if (updates_done > steps_done)
    return error(Code::invalid_argument, "the optimizer state has {} updates but only {} steps", updates_done,
                 steps_done);
  if (scaler_ && loss_scaler_json) STRATA_RETURN_IF_ERROR(scaler_->deserialize(*loss_scaler_json));
  STRATA_RETURN_IF_ERROR(parts_.optimizer->state_from_host());
  steps_done_ = steps_done;
  updates_done_ = updates_done;
  return Status::ok();
}

uint64_t Trainer::host_bytes() const {
  return parts_.state->pipeline().stats().pinned_bytes + parts_.gradient_host_bytes;
}

StatusOr<int64_t> Trainer::upload_batch(const BatchView& batch, size_t buffer) {
  const TransformerOptions& mo = model_.options();
  if (int64_t(batch.batch_size) > mo.batch || int64_t(batch.seq_len) > mo.seq_len)
    return error(Code::invalid_argument, "a batch of ({}, {}) does not fit the model's buffers for ({}, {})",
                 batch.batch_size, batch.seq_len, mo.batch, mo.seq_len);
  const uint64_t bytes = uint64_t(batch.batch_size) * batch.seq_len * sizeof(int32_t);
  // The previous micro-batch's compute must be done with the device buffers before they change.
  STRATA_RETURN_IF_ERROR(backend_.record(*computed_, Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.wait(Stream::h2d, *computed_));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_device(inputs_[buffer], batch.inputs, bytes, Stream::h2d));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_device(targets_[buffer], batch.targets, bytes, Stream::h2d));
  STRATA_RETURN_IF_ERROR(backend_.record(*uploaded_, Stream::h2d));
  // The batch's host buffer goes back to its source on the next call: finish reading it now.
  STRATA_RETURN_IF_ERROR(backend_.synchronize(*uploaded_));
  STRATA_RETURN_IF_ERROR(backend_.wait(Stream::compute, *uploaded_));
  return counted_targets(batch);
}

// A training micro-batch (the k-th of step `step`, 0-based) uploaded to device buffer `buffer`;
// its counted targets, which must not be 0.
StatusOr<int64_t> Trainer::upload_train_batch(const BatchView& batch, size_t buffer, uint64_t k, uint64_t step) {
  STRATA_ASSIGN_OR_RETURN(const int64_t counted, upload_batch(batch, buffer));
  if (counted == 0)
    return error(Code::invalid_argument, "micro-batch {} of step {} has no counted targets (all -1)", k + 1, step);
  return counted;
}

// The layer-major schedule (Transformer::step_layer_major): every micro-batch this rank runs
// uploaded to a buffer of its own first, then one pass over the model for all of them. Across ranks
// micro-batch k here is round k's (each chunk's contributions reach the exchange round by round, the
// one-rank order); the loss is scaled by the step's micro-batches over all ranks, K.
Status Trainer::layer_major_micro_batches(const NextBatch& next, double loss_scale, StepResult& r) {
  const uint64_t K = options_.grad_accum;
  std::vector<Transformer::MicroBatch> batches(micro_batches_);
  for (uint64_t k = 0; k < micro_batches_; ++k) {
    STRATA_ASSIGN_OR_RETURN(BatchView batch, next());
    STRATA_ASSIGN_OR_RETURN(const int64_t counted, upload_train_batch(batch, k, k, r.step));
    batches[k] = {.inputs = inputs_[k], .targets = targets_[k], .B = int64_t(batch.batch_size),
                  .T = int64_t(batch.seq_len), .counted_targets = counted};
    r.tokens += uint64_t(counted);
  }
  return model_.step_layer_major(batches, float(loss_scale / double(K)),
                                 {.before_backward = [&] { return begin_gradient(); },
                                  .loss_ready = [&](size_t k) { return queue_loss_copy(k); }});
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
  if (parts_.exchange != nullptr)
    return error(Code::failed_precondition, "the gradient of '{}' is partitioned over {} ranks: no rank holds it whole",
                 spec.name, parts_.exchange->communicator().size());
  // A split update: the chunk's owner holds it as its chunk route.index(c).
  const bool on_device = parts_.split != nullptr && parts_.split->route().marked(spec.chunk);
  const size_t chunk = parts_.split != nullptr ? parts_.split->route().index(spec.chunk) : size_t(spec.chunk);
  if (GradientOffloader* offloader = parts_.gradients.get(); offloader != nullptr && !on_device) {
    STRATA_ASSIGN_OR_RETURN(const float* acc, offloader->wait_read(chunk));
    std::copy(acc + at, acc + at + spec.elements, out.begin());
    offloader->end_read(chunk);
    return out;
  }
  DeviceGrads* grads = on_device ? parts_.device_gradients.get() : model_.device_grads();
  STRATA_ASSIGN_OR_RETURN(const float* acc, grads->widened(chunk));
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_host(out.data(), acc + at,
                                               spec.elements * sizeof(float), Stream::d2h));
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::d2h));
  return out;
}

Status Trainer::finish_update() { return parts_.optimizer->finish_update(); }

// The order the model's zero_grad enforces: the last step's update is still reading the gradient
// until finish_update returns.
Status Trainer::begin_gradient() {
  STRATA_RETURN_IF_ERROR(finish_update());
  return model_.zero_grad();
}

StatusOr<StepResult> Trainer::step(const NextBatch& next) {
  StepResult r;
  r.step = steps_done_ + 1;
  r.lr = schedule_.lr(steps_done_);
  const double loss_scale = scaler_ ? scaler_->scale() : 1.0;
  if (scaler_) r.loss_scale = loss_scale;
  STRATA_RETURN_IF_ERROR(model_.weights().begin_sequence("train"));
  // The step's micro-batches over every rank; this rank runs `mine` of them (all of them alone).
  const uint64_t K = options_.grad_accum;
  const uint64_t mine = micro_batches_;
  if (layer_major_) {
    STRATA_RETURN_IF_ERROR(layer_major_micro_batches(next, loss_scale, r));
  } else {
    for (uint64_t k = 0; k < mine; ++k) {
      STRATA_ASSIGN_OR_RETURN(BatchView batch, next());
      STRATA_ASSIGN_OR_RETURN(const int64_t counted, upload_train_batch(batch, 0, k, r.step));
      // The first forward applies the previous step's pending update chunk by chunk, just before
      // each chunk is acquired (the model calls the optimizer's prepare(c)); then the gradient it
      // read is free to reset.
      // The forward writes the loss's gradient over the logits too (one pass over them).
      const float grad_scale = float(loss_scale / double(K));
      STRATA_RETURN_IF_ERROR(model_.forward_with_loss_gradient(inputs_[0], targets_[0], batch.batch_size,
                                                               batch.seq_len, counted, grad_scale));
      if (k == 0) STRATA_RETURN_IF_ERROR(begin_gradient());
      model_.grad_sink()->set_last_micro_batch(k + 1 == mine);
      STRATA_RETURN_IF_ERROR(queue_loss_copy(k));
      STRATA_RETURN_IF_ERROR(model_.backward(counted, grad_scale));
      r.tokens += uint64_t(counted);
    }
  }
  STRATA_RETURN_IF_ERROR(model_.weights().end_sequence());
  // The squared norm of the accumulated (for fp16, loss-scaled) gradient, by the blocked definition
  // every gradient sink shares; non-finite anywhere is the step's overflow check. It synchronises
  // d2h, after the loss copies: the losses are in.
  // Across ranks the sum is over every rank's micro-batch (DeviceGrads::spread_over_ranks).
  STRATA_ASSIGN_OR_RETURN(const double norm_sq, model_.grad_sink()->finish_step());
  if (comm_ != nullptr) {
    STRATA_RETURN_IF_ERROR(gather_losses(r, r.tokens));
  } else {
    for (uint64_t k = 0; k < K; ++k) r.loss += double(losses_.as<kernels::CrossEntropyResult>()[k].mean_loss) / double(K);
  }
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
  // The device optimizer queues the update before the next forward's compute; the CPU one begins
  // its walk, and the next forward (prepare) or finish_update applies it.
  STRATA_RETURN_IF_ERROR(parts_.optimizer->begin_update({.lr = r.lr, .grad_multiplier = r.clip_scale / loss_scale,
                                                         .step = int64_t(updates_done_ + 1)}));
  ++updates_done_;
  if (!options_.overlap_optimizer) STRATA_RETURN_IF_ERROR(finish_update());
  return r;
}

StatusOr<double> Trainer::evaluate(const NextBatch& next, uint64_t batches) {
  if (batches == 0) return error(Code::invalid_argument, "evaluate needs at least one batch");
  STRATA_RETURN_IF_ERROR(finish_update());  // the forward's prepare(c) would apply it too, interleaved
  STRATA_RETURN_IF_ERROR(model_.weights().begin_sequence("eval"));
  double sum = 0.0;
  for (uint64_t i = 0; i < batches; ++i) {
    STRATA_ASSIGN_OR_RETURN(BatchView batch, next());
    STRATA_RETURN_IF_ERROR(upload_batch(batch, 0).status());
    STRATA_RETURN_IF_ERROR(model_.forward(inputs_[0], targets_[0], batch.batch_size, batch.seq_len));
    STRATA_ASSIGN_OR_RETURN(kernels::CrossEntropyResult loss, model_.read_loss());
    sum += double(loss.mean_loss);
  }
  STRATA_RETURN_IF_ERROR(model_.weights().end_sequence());
  return sum / double(batches);
}

}  // namespace strata::model
