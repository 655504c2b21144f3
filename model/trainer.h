// Trainer: one optimizer step of a resident Transformer -- zero_grad, K micro-batches of forward
// and backward (gradients accumulated at 1/K), the global gradient norm on the device, optional
// clipping, gradients copied to the host, AdamW on the CPU (offload/cpu_adam.h) over fp32 master
// weights and moments in pinned host memory, updated weights copied back. fp32 only: mixed
// precision (bf16/fp16 working weights, loss scaling) comes with the next step of the model issue.
// Not a data loader, not a CLI and not an offloader: every chunk stays on the device.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "model/batch_loader.h"
#include "model/lr_schedule.h"
#include "model/train_options.h"
#include "model/transformer.h"
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
  double grad_norm = 0;    // global L2 norm of the accumulated gradient, before clipping
  double clip_scale = 1;   // the multiplier applied to the gradient (1 without clipping)
  uint64_t tokens = 0;     // counted target tokens of the step
};

// ok if this trainer can run `options`: dtype fp32 ("this build trains in fp32 only: pass --dtype
// fp32"), fp32 Adam moments, grad_accum >= 1, usable Adam hyper-parameters and LR schedule; else
// invalid_argument saying what to pass instead. create() runs it; a CLI runs it before any setup.
Status check_trainer_options(const TrainOptions& options);

// Thread-safety: one thread drives a Trainer (as the Transformer). Lifetime: the backend, model,
// pinned pool and thread pool (may be null: Adam then runs on the calling thread) outlive it.
class Trainer {
 public:
  // Reads the model's current weights from the device as the fp32 masters (so load or init the
  // model first) and zeroes the moments. Errors: check_trainer_options's; the pool's or arena's
  // out_of_memory for the host copies or the device scalars.
  static StatusOr<std::unique_ptr<Trainer>> create(Backend& backend, Transformer& model, PinnedPool& pinned,
                                                   ThreadPool* pool, const TrainOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer step over options.grad_accum micro-batches from `next`. Returns once the
  // updated weights are on the device. Errors from the batch source, the model or the backend
  // are returned as they are; the step is then incomplete (weights may be partly updated).
  StatusOr<StepResult> step(const NextBatch& next);
  // Mean loss over `batches` micro-batches from `next` with the current weights; no gradients.
  StatusOr<double> evaluate(const NextBatch& next, uint64_t batches);

  // Checkpoints: the Adam moments of layout chunk `chunk` (its padded bytes, fp32), and their
  // restoration together with the step count (before the next step; the masters are re-read
  // from the device, so load the checkpoint's weights into the model first). restore_optimizer
  // is invalid_argument when a chunk's size differs from the layout's.
  std::span<const std::byte> first_moment(size_t chunk) const;
  std::span<const std::byte> second_moment(size_t chunk) const;
  Status restore_optimizer(uint64_t steps_done, const std::vector<std::span<const std::byte>>& m,
                           const std::vector<std::span<const std::byte>>& v);

  uint64_t steps_done() const { return steps_done_; }
  const TrainOptions& options() const { return options_; }
  const LrSchedule& lr_schedule() const { return schedule_; }
  // Pinned host bytes this trainer holds (masters, gradients, moments).
  uint64_t host_bytes() const;

 private:
  Trainer(Backend& backend, Transformer& model, ThreadPool* pool, const TrainOptions& options, LrSchedule schedule);
  Status allocate(PinnedPool& pinned);
  // Copies one micro-batch to the device inputs/targets, ordered before the next compute work.
  Status upload_batch(const BatchView& batch);
  // forward of the uploaded batch; returns its loss (synchronizes the compute stream).
  StatusOr<kernels::CrossEntropyResult> forward_uploaded(const BatchView& batch);
  Status queue_loss_copy(uint64_t micro_batch);
  StatusOr<double> grad_norm();
  Status copy_chunks(bool to_device, std::byte* host, ParamState state);
  Status adam_update(double lr, double clip_scale);

  Backend& backend_;
  Transformer& model_;
  ThreadPool* pool_;
  const TrainOptions options_;
  const LrSchedule schedule_;
  std::vector<uint64_t> chunk_offsets_;      // host byte offset of each layout chunk
  std::vector<std::byte*> device_params_;    // each chunk's device base (weights)
  std::vector<std::byte*> device_grads_;     // each chunk's device base (gradients)
  PinnedBuffer masters_, grads_, m_, v_, scalars_;
  PinnedBuffer losses_;         // grad_accum CrossEntropyResults: each micro-batch's loss, read once per step
  int32_t* inputs_ = nullptr;   // device (B, T)
  int32_t* targets_ = nullptr;  // device (B, T)
  float* norm_sq_ = nullptr;    // device scalar
  std::unique_ptr<Event> uploaded_, computed_, loss_copied_, grads_ready_, params_sent_;
  uint64_t steps_done_ = 0;
};

}  // namespace strata::model
