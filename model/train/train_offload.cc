// TrainOffload (train_offload.h): paged weights, NVMe store and trace of a `strata train` run.
#include "model/train/train_offload.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "model/plan/placement.h"
#include "model/plan/planner.h"
#include "model/plan/tiling.h"
#include "model/train/optimizer_factory.h"
#include "offload/config_keys.h"
#include "offload/io_engine_factory.h"
#include "runtime/units.h"

namespace strata::model {

using model::TrainOptions;

Status check_device_budget(const model::ModelConfig& config, const TrainOptions& o, const Backend& backend,
                           const model::PlanRates& rates) {
  const model::DeviceBytes d = model::estimate_device_bytes(config, o);
  const uint64_t budget = backend.memory().capacity;
  const std::string plan = fmt::format("weights {} ({}), gradients {}, activations {}{}, batch {}", format_size(d.weights),
                                       o.weight_home == Tier::device
                                           ? "resident"
                                           : fmt::format("{} slots, home {}{}", o.param_slots,
                                                         model::offload_value(o.weight_home),
                                                         o.resident_layers > 0
                                                             ? fmt::format(", {} layers resident", o.resident_layers)
                                                             : ""),
                                       format_size(d.gradients), format_size(d.activations),
                                       d.optimizer ? fmt::format(", optimizer {}", format_size(d.optimizer)) : "",
                                       format_size(d.batch));
  if (d.total() <= budget) {
    spdlog::info("device memory: {} of {} ({})", format_size(d.total()), format_size(budget), plan);
    return Status::ok();
  }
  std::string fixes;
  for (const model::PlanSuggestion& s : model::device_suggestions(config, o, {.gpu_bytes = budget, .rates = rates}))
    fixes += fmt::format("\n  {}: {}", s.change, s.effect);
  return error(Code::out_of_memory, "{} needs {} of device memory but the budget (--gpu-mem) is {}: {}; {}. What would "
               "fit, the fastest first, then what would help:{}",
               config.name, format_size(d.total()), format_size(budget), plan, model::tiling_summary(config), fixes);
}

StatusOr<std::unique_ptr<TrainOffload>> TrainOffload::create(const Config& config, const TrainOptions& o,
                                                             const model::ModelConfig& model, Backend& backend,
                                                             PinnedPool& pinned, Communicator* comm) {
  std::unique_ptr<TrainOffload> t(new TrainOffload(pinned));
  if (!o.trace_path.empty()) t->trace_ = std::make_unique<TraceRecorder>();
  STRATA_ASSIGN_OR_RETURN(model::ParamLayout layout, model::build_param_layout(model, dtype_size(o.dtype)));
  const bool paged = o.weight_home != Tier::device;
  const bool nvme = o.weight_home == Tier::nvme;
  const OptimizerPipelineOptions po =
      model::optimizer_state_options(model::build_param_layout(model, sizeof(float)).value(), o);
  const bool states_on_nvme = po.home == Tier::nvme;
  const GradientOffloaderOptions go = model::gradient_options(layout, o, model.name);
  const bool grads_on_nvme = o.cpu_optimizer() && go.home == Tier::nvme;
  if (nvme || states_on_nvme || grads_on_nvme) {
    const std::vector<std::string>& paths = config.get_list("nvme_path");
    STRATA_ASSIGN_OR_RETURN(IoEngineConfig ec, io_engine_config(config));
    STRATA_ASSIGN_OR_RETURN(IoEngineChoice choice, make_io_engine(ec, paths));
    if (!choice.fallback_reason.empty()) spdlog::warn("nvme: {}", choice.fallback_reason);
    t->engine_ = std::move(choice.engine);
    register_pinned_pool(*t->engine_, pinned);
    t->pool_registered_ = true;
    NvmeStoreOptions so;
    so.paths = paths;
    // The weight extents, optimizer images and gradient sums, as `strata plan` predicts them.
    // Across ranks: this rank's shards and pieces only (the last ranks' are shorter or empty).
    so.capacity = model::run_nvme_reservation(model, o, so.stripe_unit, comm ? comm->rank() : 0).total();
    STRATA_ASSIGN_OR_RETURN(t->store_, NvmeStore::create(*t->engine_, so));
    if (states_on_nvme)
      spdlog::info("offload: optimizer state homed on nvme ({} in {} images: {} chunks, pieces of at most {} "
                   "parameters; {} pinned staging buffers of {})",
                   format_size(optimizer_pipeline_nvme_bytes(po)), po.fp32_elements.size(), layout.chunks.size(),
                   o.sub_group_size, po.staging, format_size(optimizer_pipeline_pinned_bytes(po) / po.staging));
    if (grads_on_nvme)
      spdlog::info("offload: gradients spill to nvme ({} of fp32 sums, accumulated through {} pinned buffers)",
                   format_size(gradient_offloader_nvme_bytes(go)), go.spill_buffers);
  }
  const bool partitioned = o.partitions_weights() && comm != nullptr;
  if (partitioned && o.resident_layers > 0)
    return error(Code::invalid_argument, "--zero-stage 3 gathers every chunk from the ranks' shards: no layer stays "
                 "whole on a device; pass --resident-layers 0");
  if (!paged) {
    if (partitioned) STRATA_RETURN_IF_ERROR(t->partition_weights(o, model, layout, backend, *comm));
    return t;
  }
  TierManagerOptions to = model::run_weight_options(layout, o, model.name);
  if (partitioned) to.chunk_bytes = weight_shard_bytes(to.chunk_bytes, layout.element_bytes, comm->size());
  STRATA_ASSIGN_OR_RETURN(t->tiers_, TierManager::create(backend, pinned, t->store_.get(), t->trace_.get(), to));
  const TierStats s = t->tiers_->stats();
  const uint32_t layer_slots = to.group_names.empty() || to.group_names[0] != "layers" ? 0 : to.group_slots[0];
  spdlog::info("offload: weights homed on {} ({} pinned{}), paged through {} of device slots ({} for the layers), "
               "prefetch window {}",
               nvme ? "nvme" : "cpu", format_size(s.pinned_bytes),
               nvme ? fmt::format(", {} on {}", format_size(s.nvme_bytes), fmt::join(config.get_list("nvme_path"), ", "))
                    : "",
               format_size(s.device_bytes), layer_slots, format_size(t->tiers_->prefetch_window()));
  if (nvme && !partitioned) {
    const uint64_t smallest = tier_cache_bytes(to, 1, t->store_->alignment());
    if (to.cache_chunks > 0)
      spdlog::info("offload: a pinned read cache of {} of the {} paged chunks ({} in buffers of the size most chunks have, "
                   "then the larger chunks'; --param-cache {}) keeps weights read from or written to NVMe in RAM, beside the {} "
                   "staging buffers of {}",
                   to.cache_chunks, to.chunk_bytes.size(), format_size(tier_cache_bytes(to, to.cache_chunks, t->store_->alignment())),
                   config.get_size_or_auto("param_cache").has_value()
                       ? format_size(uint64_t(o.param_cache))
                       : fmt::format("auto: what --cpu-mem leaves, {}", format_size(uint64_t(o.param_cache))),
                   to.nvme_staging, format_size(tier_staging_buffer_bytes(to, t->store_->alignment())));
    else if (o.param_cache > 0 && o.across_ranks())
      spdlog::info("offload: no read cache of the NVMe-homed weights (--param-cache {} is not used by a run through "
                   "a communicator, across ranks or with --comm local|nccl): every chunk not in a staging buffer is "
                   "read from NVMe when it is needed", format_size(uint64_t(o.param_cache)));
    else
      spdlog::info("offload: no read cache of the NVMe-homed weights ({}): every chunk not in a staging buffer is "
                   "read from NVMe when it is needed; --param-cache SIZE (or --cpu-mem with auto) keeps chunks in RAM",
                   o.param_cache > 0 ? fmt::format("--param-cache {} is less than the smallest chunk's buffer, {}",
                                                   format_size(uint64_t(o.param_cache)), format_size(smallest))
                   : config.get_size_or_auto("param_cache").has_value()
                       ? std::string("--param-cache 0")
                       : std::string("auto: no --cpu-mem budget given, or none left in it"));
  }
  if (partitioned) {
    STRATA_RETURN_IF_ERROR(t->partition_weights(o, model, layout, backend, *comm));
    return t;
  }
  STRATA_RETURN_IF_ERROR(t->keep_layers_resident(o, model, layout, backend));
  return t;
}

// ZeRO-3: this rank's shard of every chunk in the paging tiers built above (their chunks are the
// shards) or resident on the device, behind the source that gathers a chunk when the model
// acquires it.
Status TrainOffload::partition_weights(const TrainOptions& o, const model::ModelConfig& model,
                                       const model::ParamLayout& layout, Backend& backend, Communicator& comm) {
  const int ranks = comm.size();
  std::vector<uint64_t> whole;
  std::vector<std::string> names;
  for (const model::ChunkSpec& c : layout.chunks) {
    whole.push_back(c.bytes);
    names.push_back(c.name + " shard");
  }
  const std::vector<uint64_t> shards = weight_shard_bytes(whole, layout.element_bytes, ranks);
  WeightSource* inner = tiers_.get();
  if (inner == nullptr) {
    STRATA_ASSIGN_OR_RETURN(resident_shards_, ResidentWeights::create(backend, pinned_, shards, names, model.name));
    inner = resident_shards_.get();
  }
  STRATA_ASSIGN_OR_RETURN(gather_, ShardGather::create(backend, comm, model::weight_gather_round(layout, ranks),
                                                       model.name + " weight reads"));
  const GradientOffloaderOptions groups = model::gradient_slot_options(layout, o.dtype, model.name);
  // The gathers ahead run on a communicator of their own (the run's reduces the gradients on the
  // compute stream meanwhile); without one, each chunk is gathered when the model acquires it.
  StatusOr<std::unique_ptr<Communicator>> ahead = comm.duplicate();
  if (ahead.is_ok()) {
    ahead_comm_ = std::move(*ahead);
  } else {
    if (ahead.status().code() != Code::unavailable) return ahead.status();
    spdlog::warn("weights: each chunk is gathered when the model needs it, not ahead of it: {}", ahead.status());
  }
  STRATA_ASSIGN_OR_RETURN(sharded_, ShardedWeights::create(backend, comm, *inner, *gather_, pinned_,
                                                           {.chunk_bytes = whole,
                                                            .element_bytes = layout.element_bytes,
                                                            .chunk_group = groups.chunk_group,
                                                            .group_slots = groups.group_slots,
                                                            .group_names = groups.group_names,
                                                            .name = model.name + " weights"},
                                                           ahead_comm_.get()));
  uint64_t mine = 0;
  for (uint64_t b : shards) mine += b;
  spdlog::info("weights: partitioned over {} rank{} (--zero-stage 3): this rank homes {} ({}), and each chunk is "
               "all-gathered into a device slot {} ({} of slots)",
               ranks, ranks == 1 ? "" : "s", format_size(mine), tiers_ ? "paged" : "resident on the device",
               ahead_comm_ ? "one chunk ahead of the compute, on a second communicator (the order recorded in the "
                             "first step)"
                           : "when the model needs it",
               format_size(ShardedWeights::slot_bytes({.chunk_bytes = whole,
                                                       .element_bytes = layout.element_bytes,
                                                       .chunk_group = groups.chunk_group,
                                                       .group_slots = groups.group_slots},
                                                      ranks, 256)));
  return Status::ok();
}

// The layers --resident-layers keeps on the device (resolved before: train_placement.h), one
// block each for the whole run, and the source that routes each chunk to its home.
Status TrainOffload::keep_layers_resident(const TrainOptions& o, const model::ModelConfig& model,
                                          const model::ParamLayout& layout, Backend& backend) {
  const std::vector<bool> mask = model::resident_chunk_mask(layout, o.resident_layers);
  const model::MaskedChunks kept = model::masked_chunks(layout, mask);
  if (kept.bytes.empty()) {
    spdlog::info("offload: every layer pages (--resident-layers {})",
                 o.resident_layers == 0 ? "0" : "auto: no layer fits the device budget beside the paged working set");
    if (o.split_update)
      spdlog::warn("optimizer: --optimizer-device split updates the resident layers on the device, and none is "
                   "resident: the whole update runs on the CPU");
    return Status::ok();
  }
  STRATA_ASSIGN_OR_RETURN(resident_, ResidentWeights::create(backend, pinned_, kept.bytes, kept.names, model.name));
  STRATA_ASSIGN_OR_RETURN(split_, SplitWeights::create(mask, *resident_, *tiers_));
  uint64_t total = 0;
  for (uint64_t b : kept.bytes) total += b;
  spdlog::info("offload: {} of {} layers resident on the device for the whole run ({}, spread over the depth; "
               "--resident-layers {}), the others paged",
               kept.bytes.size(), model.n_layer, format_size(total), o.resident_layers);
  if (o.split_update) {
    uint64_t params = 0;
    for (const model::ParamSpec& p : layout.params) params += mask[size_t(p.chunk)] ? p.elements : 0;
    spdlog::info("optimizer: split: the {} resident layers' update ({} parameters; their fp32 masters, moments and "
                 "gradient sums on the device) runs there, the paged chunks' on the CPU",
                 kept.bytes.size(), format_count(double(params)));
  }
  return Status::ok();
}

TrainOffload::~TrainOffload() {
  sharded_.reset();
  gather_.reset();
  resident_shards_.reset();
  split_.reset();
  resident_.reset();
  tiers_.reset();
  store_.reset();
  if (pool_registered_) pinned_.set_slab_listener(nullptr);
  engine_.reset();
}

std::optional<model::TransferMetrics> TrainOffload::step_transfers(const model::Trainer& trainer, double step_s) {
  const GradientOffloader* grads = trainer.gradients();
  if (!tiers_ && grads == nullptr) return std::nullopt;
  model::TransferMetrics m;
  const double seconds = step_s > 0 ? step_s : 1e-9;
  const auto gbps = [&](uint64_t bytes) { return double(bytes) / seconds / 1e9; };
  // NVMe traffic of the optimizer state and the spilled gradients (weights: the tiers, below).
  uint64_t nvme_read = 0, nvme_written = 0;
  const auto delta = [](uint64_t now, uint64_t& last) { return now - std::exchange(last, now); };
  const OptimizerPipelineStats state = trainer.state_stats();
  nvme_read += delta(state.read_bytes, last_state_read_);
  nvme_written += delta(state.write_bytes, last_state_written_);
  if (grads != nullptr) {
    const GradientOffloaderStats g = grads->stats();
    m.d2h_gbps = gbps(g.d2h_bytes - last_d2h_);
    last_d2h_ = g.d2h_bytes;
    nvme_read += delta(g.nvme_read_bytes, last_grad_read_);
    nvme_written += delta(g.nvme_write_bytes, last_grad_written_);
  }
  m.nvme_read_gbps = gbps(nvme_read);
  m.nvme_write_gbps = gbps(nvme_written);
  if (tiers_) {
    const TierStats s = tiers_->stats();
    m.h2d_gbps = gbps(s.h2d_bytes - last_tiers_.h2d_bytes);
    m.nvme_read_gbps += gbps(s.nvme_read_bytes - last_tiers_.nvme_read_bytes);
    m.nvme_write_gbps += gbps(s.nvme_write_bytes - last_tiers_.nvme_write_bytes);
    m.wait_s = s.compute_wait_seconds - last_tiers_.compute_wait_seconds;
    m.wait_fraction = step_s > 0 ? m.wait_s / step_s : 0.0;
    last_tiers_ = s;
  }
  return m;
}

std::vector<std::string> TrainOffload::summary(double run_s) const {
  std::vector<std::string> lines;
  if (sharded_) {
    const ShardedWeightsStats g = sharded_->stats();
    lines.push_back(fmt::format(
        "weights: {} chunks all-gathered, {} of them ahead of the compute ({} gathered ahead and not used), {} "
        "late; the compute waited {:.2f} s on gathers ahead ({:.1f}% of the run)",
        g.gathers, g.ahead, g.dropped, g.late, g.compute_wait_seconds,
        run_s > 0 ? 100.0 * g.compute_wait_seconds / run_s : 0.0));
  }
  if (!tiers_) return lines;
  const TierStats s = tiers_->stats();
  const uint64_t acquires = s.acquires();
  lines.push_back(fmt::format(
      "offload: {} acquires, {:.1f}% found resident or in flight ({} copies and {} NVMe reads issued ahead, {} "
      "fetched on demand), {:.1f}% arrived before the compute needed them ({} late), {} fetched ({}/s){}{}; access "
      "order recorded {}x, replayed {}x; compute waited {:.2f} s ({:.1f}% of the run)",
      acquires, acquires ? 100.0 * double(s.hits + s.staged_hits) / double(acquires) : 0.0, s.prefetches,
      s.prefetch_reads, s.misses,
      100.0 * arrived_in_time(acquires, s.late_arrivals),
      s.late_arrivals, format_size(s.h2d_bytes), format_size(run_s > 0 ? uint64_t(double(s.h2d_bytes) / run_s) : 0),
      s.nvme_read_bytes || s.nvme_write_bytes ? fmt::format(", nvme read {} written {}", format_size(s.nvme_read_bytes),
                                                            format_size(s.nvme_write_bytes))
                                              : "",
      s.cache_hits ? fmt::format(", {} chunks served from the read cache", s.cache_hits) : "",
      s.sequences_recorded, s.sequences_replayed, s.compute_wait_seconds,
      run_s > 0 ? 100.0 * s.compute_wait_seconds / run_s : 0.0));
  return lines;
}

Status TrainOffload::write_trace(const std::string& path) const {
  if (!trace_) return Status::ok();
  STRATA_RETURN_IF_ERROR(trace_->write(path));
  spdlog::info("trace: {} spans written to {} (open it in https://ui.perfetto.dev or chrome://tracing)",
               trace_->span_count(), path);
  return Status::ok();
}

}  // namespace strata::model
