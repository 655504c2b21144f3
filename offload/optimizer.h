// The optimizer: the third chunk interface beside WeightSource (where working weights come from)
// and GradSink (where gradients go), offload/chunk_source.h. It says where and when each chunk's
// update runs. A step's update is begun once the step's gradient is complete (begin_update); it
// then lands chunk by chunk, each chunk's just before the model next acquires that chunk
// (prepare(c), called by the model's passes), or all at once (finish_update). Implementations
// (model/train/): CpuOptimizer (AdamW on the CPU over fp32 state in an OptimizerPipeline, pinned or
// NVMe, its gradient from a GradientOffloader, its new weights committed through the WeightSource)
// and DeviceOptimizer (the backend's adam_update over resident device weights, masters and
// moments); model/train/optimizer_factory.h chooses between them. Not the Adam arithmetic
// (kernels/), not the state's layout or checkpoint names (model/train/optimizer_state.h,
// model/ckpt/optimizer_buffers.h).
//
// Ordering: begin_update only with no update pending (after finish_update); prepare(c) in any order
// (each call applies what is left of the update up to chunk c: it never goes back); an update
// pending reads the step's accumulated gradient, so that gradient must not be reset (GradSink::
// begin_step) until finish_update returned: pending() says when it may not. The model's zero_grad
// refuses while pending() (model/net/transformer.h).
// Thread-safety: one thread (the one that drives the model and the trainer) calls every method.
// Lifetime: the optimizer outlives every model it is set on (Transformer::set_optimizer) until it
// is unset; what it borrows (weights, gradients, state) outlives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/status.h"

namespace strata {

// The update of one finished step.
struct UpdateStep {
  double lr = 0;               // the learning rate
  double grad_multiplier = 1;  // applied to every gradient element first (clip / loss scale)
  int64_t step = 0;            // Adam's bias-correction step: applied updates, this one included
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // "cpu" or "device": where the update runs (logs, tests).
  virtual std::string_view where() const = 0;

  // Begins the update of a finished step. It may have landed on return (the device optimizer
  // queues it on the compute stream, ordered before any later compute) or be pending until
  // prepare/finish_update apply it. failed_precondition while an update is pending.
  virtual Status begin_update(const UpdateStep& update) = 0;
  // Chunk c's pending update (and, for a source that fetches ahead, the next chunk's) has landed
  // in the weight source when this returns: call it just before acquiring chunk c. A no-op
  // without a pending update, or for the parts already applied. An error ends the update (the
  // chunks before the failing one are updated) and is returned.
  virtual Status prepare(size_t c) = 0;
  // Applies the rest of a pending update (a no-op without one); pending() is false afterwards,
  // whatever it returns.
  virtual Status finish_update() = 0;
  // An update has begun and not every chunk of it has landed: its gradient is still being read.
  virtual bool pending() const = 0;

  // The state's host images (model/train/optimizer_state.h) and where the optimizer keeps its
  // state: to_host copies the state down (waiting for the queued update), from_host up (ordered
  // before the next update). No-ops where the host images are the state (the CPU optimizer).
  virtual Status state_to_host() = 0;
  virtual Status state_from_host() = 0;
};

}  // namespace strata
