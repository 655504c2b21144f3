// The one place a run chooses its optimizer (offload/optimizer.h): options.optimizer_home cpu or nvme
// builds a GradientOffloader (the model's gradients streamed to host memory), the OptimizerState
// (pinned or NVMe) and a CpuOptimizer over them; device builds the OptimizerState (the host
// mirrors) and a DeviceOptimizer over the model's resident weights and DeviceGrads. Built apart
// from the Trainer, so a run can build, size and own them itself (Trainer::create takes them).
// Nothing here is wired into the model: the trainer sets the model's gradient sink and optimizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "model/net/transformer.h"
#include "model/train/optimizer_state.h"
#include "model/train/train_options.h"
#include "offload/gradient_exchange.h"
#include "offload/gradient_offloader.h"
#include "offload/nvme_store.h"
#include "offload/optimizer.h"
#include "offload/shard_gather.h"
#include "offload/split_grads.h"
#include "offload/trace.h"
#include "runtime/backend.h"
#include "runtime/communicator.h"
#include "runtime/pinned_pool.h"
#include "runtime/thread_pool.h"

namespace strata::model {

// The gradient sink of an optimizer on the CPU: gradient slots on the device (two for the layers,
// one each for the embedding and the head chunks) and fp32 accumulators in pinned memory, spilled
// to NVMe where options say so (gradient_options, model/plan/placement.h). `host_bytes`: the pinned
// bytes it took. Errors: invalid_argument for an NVMe spill without a store; GradientOffloader::
// create's.
StatusOr<std::unique_ptr<GradientOffloader>> make_gradient_offloader(Backend& backend, PinnedPool& pinned,
                                                                     const ParamLayout& layout,
                                                                     const TrainOptions& options,
                                                                     std::string_view model_name, ThreadPool* pool,
                                                                     TraceRecorder* trace, NvmeStore* store,
                                                                     uint64_t* host_bytes = nullptr);

// The ShardGather round of a partitioned CPU optimizer over `layout` at `ranks`: a rank's padded
// shard of the widest chunk, at most 32 MiB (its device buffer is ranks x this).
uint64_t weight_gather_round(const ParamLayout& layout, int ranks);

// A run's optimizer and what it owns. Members are destroyed bottom up: the optimizer before the
// state and the gradients it borrows.
struct OptimizerParts {
  std::unique_ptr<GradientOffloader> gradients;  // optimizer on the CPU; null on the device
  // A split update (split_optimizer.h): the device part's gradients (the resident layers'), and
  // the model's sink routing each chunk to them or to `gradients` (the paged chunks').
  std::unique_ptr<DeviceGrads> device_gradients;
  std::unique_ptr<SplitGrads> split;
  // Across ranks with the optimizer on the CPU: the model's gradient sink, which exchanges each
  // chunk's gradient and hands this rank's shards to `gradients` (over shards then).
  std::unique_ptr<GradientExchange> exchange;
  uint64_t gradient_host_bytes = 0;              // pinned bytes of `gradients`
  std::unique_ptr<ShardGather> gather;           // across ranks, CPU: the updated weights' all-gather
  std::unique_ptr<OptimizerState> state;         // the state (CPU) or its host mirrors (device)
  std::unique_ptr<Optimizer> optimizer;
  // The sink the model's backward writes into (the exchange, the split, else the offloader; null on
  // the device).
  GradSink* sink() const {
    if (exchange) return exchange.get();
    if (split) return split.get();
    return gradients.get();
  }
};

// Builds the optimizer options.optimizer_home names for `model` (borrowed, with the backend,
// pool, thread pool, trace and store: all outlive the parts). The state's masters are not set
// (Trainer::create fills them). Errors: invalid_argument for the device optimizer over paged
// weights (model.resident_weights() null) or without the model's device gradients, for an NVMe
// home or spill without a store; the builders' out_of_memory and no_space.
// Across ranks (`comm` of 2 or more ranks) the CPU optimizer's parts are this rank's: the
// GradientExchange over an offloader of its shards, the state of its shards (OptimizerState's
// ranks) and the ShardGather of the updated weights. The device optimizer's partition is the
// model's DeviceGrads' (spread_over_ranks, before this call).
// A split update (options.split_update, one rank): `resident_part` is the resident source of the
// model's SplitWeights, holding the chunks device_update_mask marks (its chunk i the i-th); the parts
// are a DeviceOptimizer over them with their own DeviceGrads, a CpuOptimizer over the other chunks
// with a GradientOffloader of theirs, one OptimizerState of every chunk, and the SplitGrads sink.
// A split that keeps no layer resident is the CPU optimizer. invalid_argument across ranks or
// without `resident_part` (or one holding other chunks).
StatusOr<OptimizerParts> make_optimizer(Backend& backend, Transformer& model, PinnedPool& pinned, ThreadPool* pool,
                                        const TrainOptions& options, TraceRecorder* trace, NvmeStore* store,
                                        Communicator* comm = nullptr, ResidentWeights* resident_part = nullptr);

}  // namespace strata::model
