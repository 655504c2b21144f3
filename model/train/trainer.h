// Trainer: one optimizer step of a Transformer -- K micro-batches of forward and backward, the
// global gradient norm, optional clipping, then AdamW over fp32 master weights and moments where
// options.optimizer_device says:
// - on the CPU (offload/cpu_adam.h): each chunk's gradient leaves the device as soon as its
//   backward is done and accumulates in fp32 in pinned host memory (offload/gradient_offloader.h,
//   the same arithmetic whatever the placement of the weights); the norm is the sum of per-chunk
//   partials in chunk order; fp32 or 8-bit moments; the fp32 masters and moments of each chunk
//   are one image in an OptimizerPipeline (offload/optimizer_pipeline.h), homed in pinned memory or
//   on NVMe (options.optimizer_home), and the update is one walk through them: read(c + 1) |
//   AdamW(c) | write(c - 1); the updated weights (rounded to bf16/fp16 by the same pass for 16-bit
//   training) go to each chunk's home through the model's WeightSource (resident on the device,
//   pinned CPU or NVMe: the model's source decides);
// - on the device beside resident weights (the backend's adam_update op, fp32 moments, gradients
//   accumulated in the working precision in the model's DeviceGrads; nothing crosses PCIe).
// fp16 training scales the loss (model/train/loss_scaler.h) and checks for overflow once per optimizer
// step, after all K micro-batches. Not a data loader and not a CLI; where chunks live is the
// model's WeightSource's business.
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
#include "model/hf/safetensors.h"
#include "model/train/train_options.h"
#include "model/net/transformer.h"
#include "offload/cpu_adam.h"
#include "offload/gradient_offloader.h"
#include "offload/nvme_store.h"
#include "offload/optimizer_pipeline.h"
#include "offload/trace.h"
#include "runtime/backend.h"
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

// One named buffer of a chunk's optimizer state, as a checkpoint stores it. fp32 moments:
// "m.<chunk>", "v.<chunk>" F32, the chunk's padded fp32 bytes. 8-bit moments: "m_code.<chunk>" I8
// and "v_code.<chunk>" U8 (one byte per padded fp32 slot of the chunk), "m_scale.<chunk>",
// "v_scale.<chunk>" F32 (the block scales of the chunk's tensors, in order). A piece of the state
// (model/plan/placement.h) holds `bytes` of it from byte `offset` on; `data` points into the piece's
// image during a visit (null when only the names and sizes are wanted).
struct OptimizerBuffer {
  std::string name;
  SafeDType dtype = SafeDType::f32;
  std::byte* data = nullptr;
  uint64_t bytes = 0;
  uint64_t offset = 0;
};
// The whole buffers of chunk `chunk` whose state, as one image, is laid out as `layout` (offload/
// optimizer_pipeline.h), pointing into `image` when given (offsets 0).
std::vector<OptimizerBuffer> optimizer_buffers(size_t chunk, const OptimizerStateLayout& layout,
                                               std::byte* image = nullptr);
// The shares of its chunk's buffers (same order) that piece `piece`, laid out as `layout`, holds,
// pointing into `image` when given.
std::vector<OptimizerBuffer> optimizer_buffers(const StatePiece& piece, const OptimizerStateLayout& layout,
                                               std::byte* image = nullptr);

// What a Trainer borrows besides the model: both optional, both must outlive it.
struct TrainerIo {
  TraceRecorder* trace = nullptr;  // a span per transfer, accumulation and Adam chunk
  NvmeStore* store = nullptr;      // required for options.optimizer_home nvme: the optimizer state's extents
};

// Thread-safety: one thread drives a Trainer (as the Transformer). Lifetime: the backend, model,
// pinned pool and thread pool (may be null: Adam then runs on the calling thread) outlive it.
class Trainer {
 public:
  // The fp32 master weights are the model's take_fp32_source() when it has one (16-bit models
  // keep the exact values of their last load or init), else the device weights; the moments
  // start at zero. So load or init the model first. Errors: check_trainer_options's, a model
  // whose precision differs from options.dtype, an optimizer on the device with weights that are
  // not resident or a model without device gradients, the loss scaler's options (fp16), the pool's
  // or arena's out_of_memory for the host copies, the gradient slots or the device scalars.
  // With the optimizer on the CPU the model's gradients go to this trainer's GradientOffloader
  // (set as the model's sink until the trainer is destroyed). The optimizer state (fp32 masters
  // and moments) lives in an OptimizerPipeline: one image per chunk, in pinned memory or (options.
  // optimizer_home nvme) in extents of io.store, streamed through a few pinned staging buffers.
  // Errors also: invalid_argument for an nvme home without a store; the store's no_space.
  static StatusOr<std::unique_ptr<Trainer>> create(Backend& backend, Transformer& model, PinnedPool& pinned,
                                                   ThreadPool* pool, const TrainOptions& options,
                                                   TrainerIo io = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer step over options.grad_accum micro-batches from `next`. A non-finite gradient
  // skips the update (logged; fp16 also adjusts the loss scale). With the optimizer on the device,
  // or on the CPU without options.overlap_optimizer, returns once the updated weights are on the
  // device (queued there for the device optimizer). With overlap_optimizer the CPU update is
  // begun (its state read ahead) and applied chunk by chunk by the next pass over the model, just
  // before each chunk is acquired (so it runs under that forward), or by finish_update(): the
  // same bits either way. Errors from the batch source, the model or the backend are returned as
  // they are; the step is then incomplete (weights may be partly updated).
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
  // master(): a copy of the fp32 master of tensor `spec` of model().master_layout() (strata's
  // layout: spec.elements values); one walk over its chunk's pieces per call, for tests and
  // diagnostics.
  using PieceVisit = std::function<Status(size_t index, const StatePiece& piece, ChunkState& state)>;
  Status sync_host_state();
  Status visit_state(bool write_back, const PieceVisit& visit);
  StatusOr<std::vector<float>> master(const ParamSpec& spec);
  // Chunk c's state as if it were one image: the sizes of its checkpoint buffers.
  const OptimizerStateLayout& state_layout(size_t chunk) const { return chunk_layouts_[chunk]; }
  size_t state_chunks() const { return chunk_layouts_.size(); }
  const std::vector<StatePiece>& state_pieces() const { return pieces_; }
  const OptimizerStateLayout& piece_layout(size_t index) const { return states_->layout(index); }
  OptimizerPipelineStats state_stats() const { return states_->stats(); }
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
  const GradientOffloader* gradients() const { return offloader_.get(); }

 private:
  // The CPU optimizer's update of a finished step, deferred until its chunks are needed.
  struct PendingUpdate {
    double lr = 0;
    double grad_multiplier = 1;
    int64_t step = 0;  // Adam's bias-correction step
  };
  Trainer(Backend& backend, Transformer& model, ThreadPool* pool, const TrainOptions& options, LrSchedule schedule,
          TraceRecorder* trace);
  Status allocate(PinnedPool& pinned, NvmeStore* store);
  Status init_masters();
  // Copies one micro-batch to the device inputs/targets, ordered before the next compute work;
  // invalid_argument, before reading it, when the batch's (B, T) exceeds the model's buffers.
  Status upload_batch(const BatchView& batch);
  Status queue_loss_copy(uint64_t micro_batch);
  void build_tensor_refs();
  // AdamW over the tensors of piece `piece` on the CPU (thread pool), its state in `state`;
  // `grads` and `copy_out` are its chunk's (working layout).
  Status adam_update(const PendingUpdate& update, size_t piece, const ChunkState& state, const float* grads,
                     std::byte* copy_out);
  Status start_update(PendingUpdate update);  // begins the walk (reads ahead)
  Status apply_update(size_t through);         // updates every chunk <= through not yet updated
  Status update_piece(size_t p, ChunkState& state);
  // One walk over every piece that sets its masters to its chunk's fp32 values (master layout,
  // the chunk's padded slots, padding zero) from `produce`, called once per chunk: into the
  // piece's image when the chunk is one piece, else into one buffer of the chunk.
  using ChunkValues = std::function<Status(size_t chunk, float* values)>;
  Status fill_masters(const ChunkValues& produce, bool write_back);
  std::span<const size_t> pieces_of(size_t chunk) const;  // indices into pieces_ (a run of piece_order_)
  Status device_adam_update(double lr, double grad_multiplier);
  // The optimizer's device state <-> its host mirrors (optimizer on the device only).
  Status copy_device_state(bool to_device);

  Backend& backend_;
  Transformer& model_;
  ThreadPool* pool_;
  const TrainOptions options_;
  const LrSchedule schedule_;
  std::optional<LossScaler> scaler_;         // fp16 only
  std::vector<uint64_t> master_offsets_;     // device byte offset of each chunk, fp32 (optimizer on the device)
  // Where each tensor's share of a piece sits in the piece's image, and its gradient in the
  // chunk's working layout.
  struct TensorRef {
    uint64_t master_slot = 0;  // first fp32 slot in the piece (master, fp32 moments, 8-bit codes)
    uint64_t scale_at = 0;     // 8-bit: first block scale in the piece's scales
    uint64_t work_at = 0;      // first element in the chunk's working layout (gradient, copy-out)
    uint64_t n = 0;
    bool decay = false;
  };
  std::vector<std::vector<TensorRef>> tensor_refs_;  // per piece, layout order (built once)
  std::vector<StatePiece> pieces_;                   // the optimizer state's pieces, chunk by chunk
  std::vector<size_t> first_piece_;                  // per chunk (and one past the last): its first piece
  std::vector<size_t> piece_order_;                  // 0 .. pieces_.size() - 1: every walk's order
  std::vector<OptimizerStateLayout> chunk_layouts_;  // per chunk, as one image
  // The update in progress: the chunk whose gradient is read and whose update buffer is filled.
  struct ChunkUpdate {
    size_t chunk = SIZE_MAX;  // SIZE_MAX: none
    const float* grads = nullptr;
    std::byte* out = nullptr;
  } updating_;
  TraceRecorder* trace_;                     // may be null
  std::unique_ptr<GradientOffloader> offloader_;  // optimizer on the CPU
  uint64_t offloader_host_bytes_ = 0;
  std::unique_ptr<OptimizerPipeline> states_;  // masters + moments, one image per chunk
  std::optional<PendingUpdate> pending_;       // a step's update not yet applied to every chunk
  PinnedBuffer losses_;         // grad_accum CrossEntropyResults: each micro-batch's loss, read once per step
  int32_t* inputs_ = nullptr;   // device (B, T)
  int32_t* targets_ = nullptr;  // device (B, T)
  // Optimizer on the device: fp32 masters (16-bit training only; fp32 updates the model's
  // weights in place) and moments, each chunk at master_offsets_.
  std::byte* device_masters_ = nullptr;
  std::byte* device_m_ = nullptr;
  std::byte* device_v_ = nullptr;
  std::unique_ptr<Event> uploaded_, computed_, loss_copied_, params_sent_;
  uint64_t steps_done_ = 0;
  uint64_t updates_done_ = 0;
};

}  // namespace strata::model
