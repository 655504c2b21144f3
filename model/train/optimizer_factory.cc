// The choice of a run's optimizer (see optimizer_factory.h).
#include "model/train/optimizer_factory.h"

#include <algorithm>

#include "model/plan/placement.h"
#include "model/train/cpu_optimizer.h"
#include "model/train/device_optimizer.h"
#include "model/train/split_optimizer.h"
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

// The parts of a split update (see make_optimizer): `on_device` marks the chunks the device updates.
Status make_split_parts(Backend& backend, Transformer& model, PinnedPool& pinned, ThreadPool* pool,
                        const TrainOptions& options, TraceRecorder* trace, NvmeStore* store,
                        ResidentWeights& resident_part, const std::vector<bool>& on_device, OptimizerParts& parts) {
  const ParamLayout& layout = model.layout();
  const MaskedChunks kept = masked_chunks(layout, on_device);
  if (resident_part.chunk_count() != kept.bytes.size())
    return error(Code::invalid_argument, "a split update updates {} resident chunks on the device, but the resident "
                 "weights hold {}", kept.bytes.size(), resident_part.chunk_count());
  STRATA_ASSIGN_OR_RETURN(parts.gradients, make_gradient_offloader(backend, pinned, layout, options,
                                                                   model.config().name, pool, trace, store,
                                                                   &parts.gradient_host_bytes));
  STRATA_ASSIGN_OR_RETURN(parts.device_gradients,
                          DeviceGrads::create(backend, options.dtype, kept.bytes, kept.names, model.config().name));
  STRATA_ASSIGN_OR_RETURN(parts.split, SplitGrads::create(on_device, *parts.device_gradients, *parts.gradients));
  STRATA_ASSIGN_OR_RETURN(parts.state, OptimizerState::create(layout, model.master_layout(), options, pinned, store,
                                                              trace));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<DeviceOptimizer> device,
                          DeviceOptimizer::create(backend, resident_part, *parts.device_gradients, *parts.state, layout,
                                                  model.master_layout(), options, on_device));
  std::vector<bool> on_cpu(on_device.size());
  for (size_t c = 0; c < on_device.size(); ++c) on_cpu[c] = !on_device[c];
  auto cpu = std::make_unique<CpuOptimizer>(*parts.state, *parts.gradients, model.weights(), pool, options,
                                            layout.element_bytes, trace, nullptr, on_cpu);
  parts.optimizer = std::make_unique<SplitOptimizer>(std::move(device), std::move(cpu));
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
                                        Communicator* comm, ResidentWeights* resident_part) {
  OptimizerParts parts;
  const ParamLayout& layout = model.layout();
  const ParamLayout& masters = model.master_layout();
  if (options.split_update && options.optimizer_home != Tier::device) {
    if (comm != nullptr)
      return error(Code::invalid_argument, "a split update (--optimizer-device split) runs on one rank without a "
                   "communicator (its device part is not partitioned); across {} rank(s) pass --optimizer-device cpu",
                   comm->size());
    const std::vector<bool> on_device = device_update_mask(layout, options);
    if (std::find(on_device.begin(), on_device.end(), true) != on_device.end()) {
      if (resident_part == nullptr)
        return error(Code::invalid_argument, "a split update needs the resident part of the model's weights (the "
                     "layers --resident-layers keeps on the device)");
      STRATA_RETURN_IF_ERROR(make_split_parts(backend, model, pinned, pool, options, trace, store, *resident_part,
                                              on_device, parts));
      return parts;
    }
  }
  if (options.optimizer_home == Tier::device) {
    ResidentWeights* resident = model.resident_weights();
    if (resident == nullptr)
      return error(Code::invalid_argument, "the optimizer on the device updates resident weights in place, but the "
                   "model's weights are paged (offloaded); pass --optimizer-device cpu, or keep the weights resident");
    if (model.device_grads() == nullptr)
      return error(Code::invalid_argument, "the optimizer on the device needs the model's device gradients (create "
                   "the model with device_grads = true)");
    // Across ranks each rank mirrors only its shard of the state (the one its device updates); the
    // gather serves checkpoints (visit_state's reads, the transposed tensors' masters).
    Communicator* ranks = model.device_grads()->partitioned() ? model.device_grads()->communicator() : nullptr;
    STRATA_ASSIGN_OR_RETURN(parts.state, OptimizerState::create(layout, masters, options, pinned, store, trace,
                                                                ranks ? ranks->size() : 1, ranks ? ranks->rank() : 0));
    if (ranks != nullptr) {
      STRATA_ASSIGN_OR_RETURN(parts.gather, ShardGather::create(backend, *ranks, weight_gather_round(layout, ranks->size()),
                                                                model.config().name + " state"));
    }
    STRATA_ASSIGN_OR_RETURN(parts.optimizer, DeviceOptimizer::create(backend, *resident, *model.device_grads(),
                                                                     *parts.state, layout, masters, options));
    return parts;
  }
  if (comm != nullptr) {
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
