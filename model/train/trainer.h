// Trainer: one optimizer step of a Transformer -- K micro-batches of forward and backward, the
// global gradient norm, optional clipping, then the update by the run's Optimizer (offload/
// optimizer.h), which model/train/optimizer_factory.h chooses once from options.optimizer_home:
// - on the CPU (model/train/cpu_optimizer.h): each chunk's gradient leaves the device as soon as
//   its backward is done and accumulates in fp32 in pinned host memory (offload/gradient_offloader.h,
//   the same arithmetic whatever the placement of the weights); the norm is the sum of per-chunk
//   partials in chunk order; fp32 or 8-bit moments; the masters and moments are an OptimizerState
//   (model/train/optimizer_state.h: one image per piece, pinned or on NVMe) and the update is one
//   walk through them, whose new weights go to each chunk's home through the model's WeightSource;
// - on the device beside resident weights (model/train/device_optimizer.h: the backend's
//   adam_update op, fp32 moments, gradients accumulated in the model's DeviceGrads; nothing crosses
//   PCIe).
// fp16 training scales the loss (model/train/loss_scaler.h) and checks for overflow once per optimizer
// step, after all K micro-batches. Across ranks (TrainerIo::comm, a scale-out run of N ranks): the
// step's K = m x N micro-batches run m per rank in m rounds, micro-batch j x N + r on rank r, and
// the step is the bits of one rank running all K (the gradient sum, the norm, the clip, the loss: DeviceGrads::spread_over_ranks). Not a data loader and not a CLI; where chunks live is the
// model's WeightSource's business, where and when the update runs the Optimizer's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/data/batch_loader.h"
#include "model/train/loss_scaler.h"
#include "model/plan/placement.h"
#include "model/train/lr_schedule.h"
#include "model/train/train_options.h"
#include "model/net/transformer.h"
#include "model/train/optimizer_factory.h"
#include "model/train/optimizer_state.h"
#include "offload/gradient_offloader.h"
#include "offload/nvme_store.h"
#include "offload/optimizer.h"
#include "offload/optimizer_pipeline.h"
#include "offload/trace.h"
#include "runtime/backend.h"
#include "runtime/communicator.h"
#include "runtime/pinned_pool.h"
#include "runtime/thread_pool.h"

namespace strata::model {

// The batch source of one step: called once per micro-batch; the returned view must stay valid
// until the next call (BatchLoader::next() has exactly this contract). Its (B, T) must fit the
// model's TransformerOptions.
using NextBatch = std::function<StatusOr<BatchView>()>;

struct StepResult {
  uint64_t step = 0;       // 1-based: optimizer steps done, this one included
  double loss = 0;         // mean over the micro-batches of each one's mean loss
  double lr = 0;           // the rate the update used
  double grad_norm = 0;    // global L2 norm of the accumulated (unscaled) gradient, before clipping
  double clip_scale = 1;   // the clipping multiplier applied to the gradient (1 without clipping)
  uint64_t tokens = 0;     // counted target tokens of the step
  // The update was not applied: a gradient was Inf or NaN (fp16: the loss scale overflowed).
  // The step still counts (the LR schedule and the data move on), as in DeepSpeed.
  bool skipped = false;
  std::optional<double> loss_scale;  // fp16: the scale this step's backward used
};

// ok if this trainer can run `options`: dtype fp32, bf16 or fp16, grad_accum >= 1, usable Adam
// hyper-parameters and LR schedule, 8-bit moments only on the CPU; else invalid_argument saying
// what to pass instead. create() runs it; a CLI runs it before any setup.
Status check_trainer_options(const TrainOptions& options);

// What a Trainer borrows besides the model: all optional, all must outlive it.
struct TrainerIo {
  TraceRecorder* trace = nullptr;  // a span per transfer, accumulation and Adam chunk
  NvmeStore* store = nullptr;      // required for options.optimizer_home nvme: the optimizer state's extents
  // A scale-out run's ranks (null: one rank, no exchange; a world of one given here runs the
  // across-ranks path at N = 1, the same bits as null: strata train --comm local|nccl). Each rank
  // runs grad_accum / size() of every step's micro-batches (grad_accum must be a multiple of
  // size(): the step's micro-batches over all ranks; round j: micro-batch j x size() + rank() on
  // this rank), and the step's gradient, norm, clip, update and loss are those of one rank running
  // the grad_accum micro-batches in turn, the same bits on every rank. The gradient is partitioned
  // before the optimizer is made -- the model's DeviceGrads for the optimizer on the device, a
  // GradientExchange over this rank's shards for the optimizer on the CPU -- so each rank homes and
  // updates its shard of every chunk's gradient sum and state (offload/chunk_shard.h) and the new
  // weights are all-gathered (not with partitioned weights, ZeRO-3: each rank keeps its shard).
  // Trainer::gradient() refuses then (no rank holds a whole sum).
  Communicator* comm = nullptr;
  // A split update (options.split_update): the resident source of the model's SplitWeights, whose
  // chunks the device updates (make_optimizer).
  ResidentWeights* resident_part = nullptr;
};

// Thread-safety: one thread drives a Trainer (as the Transformer). Lifetime: the backend, model,
// pinned pool and thread pool (may be null: Adam then runs on the calling thread) outlive it; it
// owns its optimizer (OptimizerParts) and is set on the model as its optimizer (and, on the CPU,
// its gradient sink) from create until it is destroyed; a later trainer over the same model takes
// them over, and a destroyed trainer unsets only what is still its own.
class Trainer {
 public:
  // The fp32 master weights are the model's take_fp32_source() when it has one (16-bit models
  // keep the exact values of their last load or init), else the device weights; the moments
  // start at zero. So load or init the model first. Errors: check_trainer_options's, a model
  // whose precision differs from options.dtype or, for options.step_schedule layer_major with
  // more than one micro-batch a rank, was not created for them (grad_accum, across N ranks
  // grad_accum / N), make_optimizer's (an optimizer on the device
  // with weights that are not resident or a model without device gradients; an nvme home or
  // spill without io.store; the store's no_space), the loss scaler's options (fp16), the pool's
  // or arena's out_of_memory for the host copies, the gradient slots or the device scalars.
  // Builds the optimizer with make_optimizer (model/train/optimizer_factory.h), then as below.
  static StatusOr<std::unique_ptr<Trainer>> create(Backend& backend, Transformer& model, PinnedPool& pinned,
                                                   ThreadPool* pool, const TrainOptions& options,
                                                   TrainerIo io = {});
  // The same over an optimizer a run built (make_optimizer for this model and options): the
  // trainer owns the parts from here on, sets parts.gradients (if any) as the model's gradient
  // sink and parts.optimizer as its optimizer until it is destroyed, and fills the state's masters.
  // `comm`: as TrainerIo::comm (null or a world of one: this rank alone); across ranks, also
  // invalid_argument when options.grad_accum is not a multiple of comm->size(), and the arena's
  // out_of_memory for the buffers DeviceGrads::spread_over_ranks takes.
  static StatusOr<std::unique_ptr<Trainer>> create(Backend& backend, Transformer& model, PinnedPool& pinned,
                                                   const TrainOptions& options, OptimizerParts parts,
                                                   Communicator* comm = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer step over options.grad_accum micro-batches from `next`: micro-batch-major (each
  // one's forward and backward in turn), or layer-major when options.step_schedule says so (or is
  // automatic and the model was created with TransformerOptions::micro_batches >= this rank's
  // micro-batches, as a run does when model/train/step_schedule.h picks it): all of this rank's
  // batches uploaded first, then Transformer::step_layer_major; the same bits (across ranks too:
  // each chunk's contributions reach the exchange round by round). A non-finite gradient
  // skips the update (logged; fp16 also adjusts the loss scale). With the optimizer on the device,
  // or on the CPU without options.overlap_optimizer, returns once the updated weights are on the
  // device (queued there for the device optimizer). With overlap_optimizer the CPU update is
  // begun (its state read ahead) and applied chunk by chunk by the next pass over the model (the
  // model calls Optimizer::prepare(c) just before it acquires chunk c, so the update runs under
  // that forward), or by finish_update(): the same bits either way. The next step's first
  // forward applies it; then finish_update, then the gradients are zeroed (the model's zero_grad
  // refuses while the update is pending). Errors from the batch source, the model or the backend
  // are returned as they are; the step is then incomplete (weights may be partly updated).
  StatusOr<StepResult> step(const NextBatch& next);
  // Applies the rest of a pending update (a no-op without one): before reading the model's
  // weights outside the trainer. sync_host_state, visit_state, master, gradient, evaluate and the
  // destructor call it.
  Status finish_update();
  // Mean loss over `batches` micro-batches from `next` with the current weights; no gradients.
  StatusOr<double> evaluate(const NextBatch& next, uint64_t batches);

  // Checkpoints. The optimizer state is kept in pieces (state_pieces(): each chunk's, cut as
  // options.sub_group_size says; one piece per chunk for chunks no larger). With the optimizer on
  // the device the host images below are mirrors: call sync_host_state() before reading them (it
  // waits for the step's work and copies the device state down; a no-op on the CPU). visit_state
  // walks every piece in order, chunk by chunk (OptimizerPipeline::for_each_chunk: one piece's
  // image at a time, read from NVMe ahead of the visit when homed there; `index` is the piece's in
  // state_pieces()): read them to save; write into them with write_back (before the next step) to
  // restore, then call restore_progress (which uploads them to the device) with the step count,
  // the count of applied (not skipped) updates that Adam's bias correction uses and, for fp16, the
  // loss scaler's JSON (LossScaler::serialize; nullopt keeps the fresh scaler).
  // `layout` is the visited image's (the piece's, state_layout(chunk) for a whole chunk).
  // Across ranks with the optimizer on the CPU, where each rank keeps only its shards of the state
  // (state_partitioned()), a read (no write_back) is a collective that every rank calls: each
  // chunk's shards are gathered (ShardGather) and every rank's visit sees whole chunks, one piece
  // each, in chunk order; a visit's error stops the visits but not the gathers, so the other ranks
  // are not left waiting, and is returned. A write_back visits this rank's own pieces only (a
  // restore reads each rank's share of the file).
  // master(): a copy of the fp32 master of tensor `spec` of model().master_layout() (strata's
  // layout: spec.elements values); one walk over its chunk's pieces per call, for tests and
  // diagnostics (failed_precondition across ranks when the state is partitioned).
  using PieceVisit =
      std::function<Status(const StatePiece& piece, const OptimizerStateLayout& layout, ChunkState& state)>;
  Status sync_host_state();
  Status visit_state(bool write_back, const PieceVisit& visit);
  // A checkpoint written shard-wise across ranks (model/ckpt/checkpoint.h): visit_shards reads this
  // rank's own pieces, as visit_state does on one rank (not a collective; on one rank, every
  // piece). visit_gathered_masters (a collective; failed_precondition unless state_partitioned())
  // gathers the fp32 masters of each chunk `chunks` marks (one flag per chunk) as visit_state's
  // read does and visits them whole, as one piece whose `m` and `v` are null (the image's other
  // bytes are zeros); a visit's error stops the visits, not the gathers.
  Status visit_shards(const PieceVisit& visit);
  Status visit_gathered_masters(const std::vector<bool>& chunks, const PieceVisit& visit);
  StatusOr<std::vector<float>> master(const ParamSpec& spec);
  // Chunk c's state as if it were one image: the sizes of its checkpoint buffers.
  const OptimizerStateLayout& state_layout(size_t chunk) const { return parts_.state->chunk_layout(chunk); }
  size_t state_chunks() const { return parts_.state->chunk_count(); }
  const std::vector<StatePiece>& state_pieces() const { return parts_.state->pieces(); }
  bool state_partitioned() const { return parts_.state->partitioned(); }
  // Across ranks (a partitioned state), the all-gather of host bytes the checkpoint's reads use, also
  // lent to the messages of a save written by the ranks together (model/ckpt/checkpoint_ranks.h);
  // else null.
  ShardGather* shard_gather() const { return parts_.gather.get(); }
  const OptimizerStateLayout& piece_layout(size_t index) const { return parts_.state->pipeline().layout(index); }
  OptimizerPipelineStats state_stats() const { return parts_.state->pipeline().stats(); }
  Status restore_progress(uint64_t steps_done, uint64_t updates_done, std::optional<std::string_view> loss_scaler_json);
  // The gradient of tensor `spec` (strata's layout, spec.elements fp32 values) the last step
  // accumulated over its micro-batches: before clipping, loss-scaled for fp16. Valid until the next
  // step; for tests and diagnostics.
  StatusOr<std::vector<float>> gradient(const ParamSpec& spec);
  // fp16 only: the dynamic loss scaler; null otherwise.
  const LossScaler* loss_scaler() const { return scaler_ ? &*scaler_ : nullptr; }

  uint64_t steps_done() const { return steps_done_; }
  uint64_t updates_done() const { return updates_done_; }  // steps_done() less the skipped ones
  const TrainOptions& options() const { return options_; }
  const Transformer& model() const { return model_; }
  const LrSchedule& lr_schedule() const { return schedule_; }
  // Pinned host bytes this trainer holds (masters and moments or their staging ring, gradient
  // accumulators and staging).
  uint64_t host_bytes() const;
  // The gradient offloader (optimizer on the CPU), else null.
  const GradientOffloader* gradients() const { return parts_.gradients.get(); }
  // Whether steps run in the layer-major schedule (TrainOptions::step_schedule).
  bool layer_major() const { return layer_major_; }
  // The optimizer: "cpu" or "device" (Optimizer::where).
  const Optimizer& optimizer() const { return *parts_.optimizer; }

 private:
  Trainer(Backend& backend, Transformer& model, const TrainOptions& options, LrSchedule schedule, OptimizerParts parts);
  Status allocate(PinnedPool& pinned);
  Status init_masters();
  // visit_state's read of a partitioned state (every chunk when `chunks` is null), or of its
  // masters alone (visit_gathered_masters).
  Status visit_gathered(const PieceVisit& visit, const std::vector<bool>* chunks, bool masters_only);
  // This rank's pieces in order (every piece on one rank), read or with write_back.
  Status visit_pieces(bool write_back, const PieceVisit& visit);
  // Copies one micro-batch to the device inputs/targets, ordered before the next compute work;
  // invalid_argument, before reading it, when the batch's (B, T) exceeds the model's buffers.
  // Returns its counted targets.
  StatusOr<int64_t> upload_batch(const BatchView& batch, size_t buffer);
  StatusOr<int64_t> upload_train_batch(const BatchView& batch, size_t buffer, uint64_t k, uint64_t step);
  // The step's micro-batches in the layer-major schedule (Transformer::step_layer_major).
  Status layer_major_micro_batches(const NextBatch& next, double loss_scale, StepResult& r);
  Status queue_loss_copy(uint64_t micro_batch);
  // Starts the step's gradient after its first forward: the last step's update lands (the forward
  // applied most of it), then the gradient it read is zeroed. The one place zero_grad is called.
  Status begin_gradient();
  // Across ranks: checks the run can be spread (see TrainerIo::comm) and spreads the model's gradients.
  Status join_ranks(Communicator& comm);
  // Across ranks: the step's loss (mean over the micro-batches of each one's mean, added in rank
  // order as one rank adds them) and counted tokens, from every rank's micro-batch.
  Status gather_losses(StepResult& r, uint64_t counted);

  // Constant after construction.
  Backend& backend_;
  Transformer& model_;
  const TrainOptions options_;
  const LrSchedule schedule_;
  // The gradient sink (CPU), the state and the optimizer; set on the model from create to the
  // destructor.
  OptimizerParts parts_;
  PinnedBuffer losses_;         // grad_accum CrossEntropyResults: each micro-batch's loss, read once per step
  uint64_t micro_batches_ = 1;      // this rank's a step: grad_accum alone, grad_accum / ranks across ranks
  bool layer_major_ = false;        // the step's schedule (runs_layer_major in trainer.cc)
  std::vector<int32_t*> inputs_;    // device (B, T) each: micro_batches_ of them layer-major, else 1
  std::vector<int32_t*> targets_;   // device (B, T) each, as inputs_
  std::unique_ptr<Event> uploaded_, computed_, loss_copied_;
  Communicator* comm_ = nullptr;  // across ranks (TrainerIo::comm), else null
  double* rank_losses_ = nullptr; // device: per rank (its micro-batches' mean losses, counted tokens), across ranks
  // State of the run.
  std::optional<LossScaler> scaler_;  // fp16 only
  uint64_t steps_done_ = 0;
  uint64_t updates_done_ = 0;
};

}  // namespace strata::model
