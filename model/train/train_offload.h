// The offload side of one `strata train` run: with --offload-param cpu or nvme, the paging weight
// source (offload/tier_manager.h) the model takes its chunks from -- homed in pinned memory, or in
// NVMe swap files under --nvme-path through the configured I/O engine; with --resident-layers
// (resolved before: train_placement.h), those layers resident beside it (offload/split_weights.h)
// -- and, with --trace, the
// Chrome trace recorder every stream's spans go to. Also the per-step transfer figures for the
// progress line and --metrics, and the device-memory preflight. Built after the backend and the
// pinned pool, before the model; destroyed after the trainer and the model.
// Thread-safety: the training thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "model/train/metrics_log.h"
#include "model/net/model_config.h"
#include "model/net/param_layout.h"
#include "model/plan/planner.h"
#include "model/train/train_options.h"
#include "model/train/trainer.h"
#include "offload/io_engine.h"
#include "offload/nvme_store.h"
#include "offload/resident_weights.h"
#include "offload/shard_gather.h"
#include "offload/sharded_weights.h"
#include "offload/split_weights.h"
#include "offload/tier_manager.h"
#include "offload/trace.h"
#include "runtime/backend.h"
#include "runtime/communicator.h"
#include "runtime/config.h"
#include "runtime/pinned_pool.h"

namespace strata::model {

// out_of_memory before anything is allocated when the run's device bytes (model/plan/placement.h) of
// `config` (tiled as the run is) exceed the arena: the breakdown, the budget, its tiling, and what
// would fit, one change a line with its device bytes and the step time `rates` predict
// (model::device_suggestions: the tiles that fit, paging, checkpointing, a smaller micro-batch,
// all together, the --gpu-mem it needs). Logs the plan otherwise.
Status check_device_budget(const model::ModelConfig& config, const model::TrainOptions& o, const Backend& backend,
                           const model::PlanRates& rates);

class TrainOffload {
 public:
  // Opens the I/O engine and NVMe store when weights or optimizer state are homed on NVMe
  // (capacity for every weight chunk and every state image; no_space naming the paths when they
  // cannot hold it) and the TierManager (weights homed on cpu/nvme), or nothing (resident).
  // Across ranks with the weights partitioned (o.partitions_weights(), ZeRO-3; `comm` the run's),
  // the weights are this rank's shards -- resident (a ResidentWeights of shards) or paged (a
  // TierManager of shards) -- behind a ShardedWeights that gathers each chunk on acquire.
  static StatusOr<std::unique_ptr<TrainOffload>> create(const Config& config, const model::TrainOptions& o,
                                                        const model::ModelConfig& model, Backend& backend,
                                                        PinnedPool& pinned, Communicator* comm = nullptr);
  ~TrainOffload();
  TrainOffload(const TrainOffload&) = delete;
  TrainOffload& operator=(const TrainOffload&) = delete;

  // null: the model keeps its weights resident. With resident layers: the source routing each chunk
  // to its home (offload/split_weights.h), else the TierManager.
  WeightSource* weights() {
    if (sharded_) return sharded_.get();
    return split_ ? static_cast<WeightSource*>(split_.get()) : tiers_.get();
  }
  // The layers --resident-layers keeps on the device (the split weights' resident source; null:
  // none): a split update's device part updates them (TrainerIo::resident_part).
  ResidentWeights* resident_layers() { return resident_.get(); }
  TraceRecorder* trace() { return trace_.get(); }   // null without --trace
  NvmeStore* store() { return store_.get(); }       // null when nothing is homed on NVMe
  const TierManager* tiers() const { return tiers_.get(); }
  uint64_t nvme_bytes() const { return store_ ? store_->capacity() : 0; }

  // The transfers since the last call (the previous step), as rates over `step_s`; nullopt when
  // nothing is paged and no gradient streams (optimizer on the device).
  std::optional<model::TransferMetrics> step_transfers(const model::Trainer& trainer, double step_s);
  // The end-of-run lines: fetches, hits, prefetches, traces replayed, total compute wait (and
  // under ZeRO-3 the gathers: how many ahead, the compute's wait on them); empty when resident.
  std::vector<std::string> summary(double run_s) const;
  // Writes the --trace file (no-op without one); errors name the path.
  Status write_trace(const std::string& path) const;

 private:
  TrainOffload(PinnedPool& pinned) : pinned_(pinned) {}
  Status keep_layers_resident(const model::TrainOptions& o, const model::ModelConfig& model,
                              const model::ParamLayout& layout, Backend& backend);
  Status partition_weights(const model::TrainOptions& o, const model::ModelConfig& model,
                           const model::ParamLayout& layout, Backend& backend, Communicator& comm);

  PinnedPool& pinned_;
  std::unique_ptr<TraceRecorder> trace_;
  std::unique_ptr<IoEngine> engine_;
  bool pool_registered_ = false;
  std::unique_ptr<NvmeStore> store_;
  std::unique_ptr<TierManager> tiers_;      // the paged chunks
  std::unique_ptr<ResidentWeights> resident_;  // --resident-layers' chunks (null: none)
  std::unique_ptr<SplitWeights> split_;        // both as one source (null: no resident layer)
  // ZeRO-3: this rank's shards resident (with tiers_ for paged shards), their gather, the source.
  std::unique_ptr<ResidentWeights> resident_shards_;
  std::unique_ptr<ShardGather> gather_;
  std::unique_ptr<Communicator> ahead_comm_;  // the gathers ahead's (a duplicate of the run's), or null
  std::unique_ptr<ShardedWeights> sharded_;
  TierStats last_tiers_;
  uint64_t last_d2h_ = 0;
  // NVMe bytes of the optimizer state and the spilled gradients at the last call.
  uint64_t last_state_read_ = 0, last_state_written_ = 0, last_grad_read_ = 0, last_grad_written_ = 0;
};

}  // namespace strata::model
