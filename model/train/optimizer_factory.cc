// The choice of a run's optimizer (see optimizer_factory.h).
#include "model/train/optimizer_factory.h"

#include <algorithm>

#include "model/plan/placement.h"
#include "model/train/cpu_optimizer.h"
#include "model/train/device_optimizer.h"
#include "offload/chunk_shard.h"

namespace strata::model {

StatusOr<std::unique_ptr<GradientOffloader>> make_gradient_offloader(Backend& backend, PinnedPool& pinned,
                                                                     const ParamLayout& layout,
                                                                     const TrainOptions& options,
                                                                     std::string_view model_name, ThreadPool* pool,
                                                                     TraceRecorder* trace, NvmeStore* store,
                                                                     uint64_t* host_bytes) {
  const GradientOffloaderOptions go = gradient_options(layout, options, std::string(model_name));
  if (go.home == Tier::nvme && store == nullptr)
    return error(Code::invalid_argument, "the gradients spill to NVMe but the trainer got no NVMe store; pass "
                 "--nvme-path DIR");
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<GradientOffloader> g,
                          GradientOffloader::create(backend, pinned, go, pool, trace,
                                                    go.home == Tier::nvme ? store : nullptr));
  if (host_bytes != nullptr) *host_bytes = gradient_offloader_pinned_bytes(go);
  return g;
}

namespace {

// The CPU optimizer's parts across ranks: this rank's shards of the gradient sums and the state.
Status make_rank_parts(Backend& backend, Transformer& model, PinnedPool& pinned, ThreadPool* pool,
                       const TrainOptions& options, TraceRecorder* trace, NvmeStore* store, Communicator& comm,
                       OptimizerParts& parts) {
  const ParamLayout& layout = model.layout();
  const int ranks = comm.size();
  const GradientOffloaderOptions whole = gradient_options(layout, options, model.config().name);
  const GradientOffloaderOptions shards = gradient_shard_options(whole, ranks);
  if (shards.home == Tier::nvme && store == nullptr)
    return error(Code::invalid_argument, "the gradients spill to NVMe but the trainer got no NVMe store; pass "
                 "--nvme-path DIR");
  STRATA_ASSIGN_OR_RETURN(parts.gradients, GradientOffloader::create(backend, pinned, shards, pool, trace,
                                                                     shards.home == Tier::nvme ? store : nullptr));
  parts.gradient_host_bytes = gradient_offloader_pinned_bytes(shards);
  STRATA_ASSIGN_OR_RETURN(parts.exchange, GradientExchange::create(backend, comm, *parts.gradients,
                                                                   {.chunks = whole,
                                                                    .releases = model.gradient_releases()}));
  STRATA_ASSIGN_OR_RETURN(parts.state, OptimizerState::create(layout, model.master_layout(), options, pinned, store,
                                                              trace, ranks, comm.rank()));
  STRATA_ASSIGN_OR_RETURN(parts.gather, ShardGather::create(backend, comm, weight_gather_round(layout, ranks),
                                                            model.config().name + " weights"));
  return Status::ok();
}

}  // namespace

uint64_t weight_gather_round(const ParamLayout& layout, int ranks) {
  constexpr uint64_t kMostRound = 32ull << 20;  // a rank's bytes per round: bounds the device buffer
  uint64_t widest = 0;
  for (const ChunkSpec& c : layout.chunks)
    widest = std::max(widest, shard_stride_bytes(c.bytes, layout.element_bytes, ranks));
  return std::min(widest, kMostRound);
}

StatusOr<OptimizerParts> make_optimizer(Backend& backend, Transformer& model, PinnedPool& pinned, ThreadPool* pool,
                                        const TrainOptions& options, TraceRecorder* trace, NvmeStore* store,
                                        Communicator* comm) {
  OptimizerParts parts;
  const ParamLayout& layout = model.layout();
  const ParamLayout& masters = model.master_layout();
  if (options.optimizer_home == Tier::device) {
    ResidentWeights* resident = model.resident_weights();
    if (resident == nullptr)
      return error(Code::invalid_argument, "the optimizer on the device updates resident weights in place, but the "
                   "model's weights are paged (offloaded); pass --optimizer-device cpu, or keep the weights resident");
    if (model.device_grads() == nullptr)
      return error(Code::invalid_argument, "the optimizer on the device needs the model's device gradients (create "
                   "the model with device_grads = true)");
    STRATA_ASSIGN_OR_RETURN(parts.state, OptimizerState::create(layout, masters, options, pinned, store, trace));
    STRATA_ASSIGN_OR_RETURN(parts.optimizer, DeviceOptimizer::create(backend, *resident, *model.device_grads(),
                                                                     *parts.state, layout, masters, options));
    return parts;
  }
  if (comm != nullptr && comm->size() > 1) {
    STRATA_RETURN_IF_ERROR(make_rank_parts(backend, model, pinned, pool, options, trace, store, *comm, parts));
  } else {
    STRATA_ASSIGN_OR_RETURN(parts.gradients, make_gradient_offloader(backend, pinned, layout, options,
                                                                     model.config().name, pool, trace, store,
                                                                     &parts.gradient_host_bytes));
    STRATA_ASSIGN_OR_RETURN(parts.state, OptimizerState::create(layout, masters, options, pinned, store, trace));
  }
  // Partitioned weights (ZeRO-3) take only this rank's shard of an update: nothing to gather then
  // (the gather still serves checkpoints).
  parts.optimizer = std::make_unique<CpuOptimizer>(*parts.state, *parts.gradients, model.weights(), pool, options,
                                                   layout.element_bytes, trace,
                                                   options.partitions_weights() ? nullptr : parts.gather.get());
  return parts;
}

}  // namespace strata::model
