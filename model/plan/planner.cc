// Planner (planner.h): bytes per state and tier from the allocators' own size functions, the
// step-time model, the placement search and the suggestions when nothing fits.
#include "model/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>

#include <fmt/format.h>

#include "kernels/cpu/ops_loss.h"
#include "model/data/batch_loader.h"
#include "model/net/flops.h"
#include "model/net/param_layout.h"
#include "model/plan/placement.h"
#include "model/plan/rank_plan.h"
#include "model/plan/tiling.h"
#include "model/train/device_optimizer.h"
#include "model/train/step_schedule.h"
#include "model/train/train_config_keys.h"
#include "offload/chunk_shard.h"
#include "offload/gradient_exchange.h"
#include "offload/gradient_offloader.h"
#include "offload/nvme_store.h"
#include "offload/optimizer_pipeline.h"
#include "offload/resident_weights.h"
#include "offload/sharded_weights.h"
#include "offload/tier_manager.h"
#include "runtime/align.h"
#include "runtime/units.h"

namespace strata::model {
namespace {

bool optimizer_on_nvme(const TrainOptions& o) { return o.optimizer_home == Tier::nvme; }
bool grads_on_nvme(const TrainOptions& o) { return o.cpu_optimizer() && o.grad_home == Tier::nvme; }

// Shared (param_layout.h): the candidates of one plan size the same few layouts many times.
std::shared_ptr<const ParamLayout> working_layout(const ModelConfig& c, const TrainOptions& o) {
  return shared_param_layout(c, dtype_size(o.dtype)).value();
}
std::shared_ptr<const ParamLayout> master_layout(const ModelConfig& c) {
  return shared_param_layout(c, sizeof(float)).value();
}
// The optimizer state's pipeline options for sizing (shared pieces, no labels).
OptimizerPipelineOptions state_options(const ModelConfig& c, const TrainOptions& o) {
  return optimizer_state_options(*shared_state_pieces(master_layout(c), o.sub_group_size), o, /*labels=*/false);
}

std::vector<uint64_t> chunk_bytes(const ParamLayout& layout) {
  std::vector<uint64_t> bytes;
  for (const ChunkSpec& c : layout.chunks) bytes.push_back(c.bytes);
  return bytes;
}

// Working bytes of the chunks a run keeps resident (each, and together) and of those it pages.
struct WeightShare {
  std::vector<uint64_t> resident_chunks;
  uint64_t resident = 0, paged = 0;
};
WeightShare weight_share(const ParamLayout& layout, const TrainOptions& o) {
  const std::vector<bool> resident = o.weight_home == Tier::device ? std::vector<bool>(layout.chunks.size(), true)
                                                                    : resident_chunk_mask(layout, o.resident_layers);
  WeightShare w{.resident_chunks = masked_chunks(layout, resident).bytes};
  for (uint64_t b : w.resident_chunks) w.resident += b;
  w.paged = layout.total_bytes() - w.resident;
  return w;
}

// fp32 master bytes of the optimizer's images (the rest of an image is moments and padding).
uint64_t master_bytes(const OptimizerPipelineOptions& po) {
  uint64_t total = 0;
  for (size_t i = 0; i < po.fp32_elements.size(); ++i) {
    const uint64_t scales = po.scale_count.empty() ? 0 : po.scale_count[i];
    total += optimizer_state_layout(po.states, po.fp32_elements[i], scales).master.bytes;
  }
  return total;
}

void add_device(PlanBytes& b, const ModelConfig& config, const TrainOptions& o, uint32_t ranks) {
  const DeviceBytes d = ranks > 1 ? rank_device_bytes(config, o, ranks) : estimate_device_bytes(config, o);
  b.at(Tier::device, PlanState::weights) = d.weights;
  b.at(Tier::device, PlanState::gradients) = d.gradients;
  b.at(Tier::device, PlanState::activations) = d.activations;
  b.at(Tier::device, PlanState::other) = d.batch;
  // estimate_device_bytes: m and v (or their 8-bit codes and scales), plus the fp32 masters of a
  // 16-bit model: on one rank what the same state takes beyond an fp32 model's, which has none.
  uint64_t masters = o.dtype == DType::f32 ? 0 : d.optimizer / 3;
  if (o.dtype != DType::f32 && d.optimizer > 0 && ranks == 1 && !o.across_ranks()) {
    const std::shared_ptr<const ParamLayout> layout = working_layout(config, o);
    std::vector<bool> updated = device_update_mask(*layout, o);
    if (!o.cpu_optimizer()) updated.clear();  // every chunk
    constexpr uint64_t kArenaAlign = 256;  // the arena's block alignment (estimate_device_bytes')
    masters = d.optimizer - DeviceOptimizer::device_bytes(*layout, DType::f32, 1, kArenaAlign, updated, o.adam_states);
  }
  b.at(Tier::device, PlanState::masters) = masters;
  b.at(Tier::device, PlanState::moments) = d.optimizer - masters;
}

// Across ranks (ranks > 1) the homes are the rank's shards (world.h's sharded options).
void add_pinned(PlanBytes& b, const ModelConfig& config, const TrainOptions& o, uint32_t ranks) {
  const std::shared_ptr<const ParamLayout> working = working_layout(config, o);
  const ParamLayout& layout = *working;
  // A training run's ZeRO-3 (o.ranks ranks, --zero-stage 3): the weights' homes are the rank's padded
  // shards (offload/sharded_weights.h), beside ShardedWeights' pinned whole-chunk update buffer.
  const bool run_shards = ranks == 1 && o.partitions_weights();
  if (run_shards) {
    uint64_t largest = 0;
    for (const ChunkSpec& c : layout.chunks) largest = std::max(largest, c.bytes);
    b.at(Tier::cpu, PlanState::staging) += round_up(largest, kHostPage);
  }
  if (o.weight_home == Tier::device) {
    std::vector<uint64_t> chunks = chunk_bytes(layout);
    if (ranks > 1)
      for (uint64_t& c : chunks) c = shard_bytes(c, ranks, kHostPage);
    if (run_shards) chunks = weight_shard_bytes(chunks, layout.element_bytes, o.ranks);
    b.at(Tier::cpu, PlanState::staging) += resident_weights_pinned_bytes(chunks);
  } else {
    TierManagerOptions wo = run_weight_options(layout, o, config.name);
    if (run_shards) wo.chunk_bytes = weight_shard_bytes(wo.chunk_bytes, layout.element_bytes, o.ranks);
    b.at(Tier::cpu, o.weight_home == Tier::cpu ? PlanState::weights : PlanState::staging) +=
        tier_pinned_bytes(sharded(wo, ranks));
    const WeightShare w = weight_share(layout, o);  // the resident layers' update staging
    if (!w.resident_chunks.empty())
      b.at(Tier::cpu, PlanState::staging) += resident_weights_pinned_bytes(w.resident_chunks);
  }
  // The gradient sums and the optimizer's state (a device optimizer's pinned mirrors too) are
  // partitioned by ZeRO-3's world and by a training run's ZeRO-2 ranks (o.ranks) alike.
  const uint32_t state_ranks = std::max<uint32_t>(ranks, uint32_t(std::max(o.ranks, 1)));
  if (o.cpu_optimizer()) {
    // The offloader's D2H staging buffer alone is what an nvme home with no spill buffers takes.
    const GradientOffloaderOptions go = sharded(gradient_options(layout, o, config.name), state_ranks);
    GradientOffloaderOptions d2h = go;
    d2h.home = Tier::nvme;
    d2h.spill_buffers = 0;
    const uint64_t staging = gradient_offloader_pinned_bytes(d2h), pinned = gradient_offloader_pinned_bytes(go);
    b.at(Tier::cpu, go.home == Tier::nvme ? PlanState::staging : PlanState::gradients) += pinned - staging;
    b.at(Tier::cpu, PlanState::staging) += staging;
  }
  // The optimizer's pinned images (also the mirrors of a device optimizer), or its staging ring.
  const OptimizerPipelineOptions po = sharded(state_options(config, o), state_ranks);
  const uint64_t pinned = optimizer_pipeline_pinned_bytes(po);
  if (po.home == Tier::nvme) {
    b.at(Tier::cpu, PlanState::staging) += pinned;
  } else {
    const uint64_t masters = master_bytes(po);
    b.at(Tier::cpu, PlanState::masters) += masters;
    b.at(Tier::cpu, PlanState::moments) += pinned - masters;
  }
  BatchLoaderOptions lo;
  lo.sampling.batch_size = uint32_t(o.micro_batch);
  lo.sampling.seq_len = uint32_t(o.seq);
  b.at(Tier::cpu, PlanState::other) += batch_loader_pinned_bytes(lo) * (o.evaluates() ? 2 : 1) +
                                           round_up(o.grad_accum * sizeof(kernels::CrossEntropyResult), kHostPage);
}

void add_nvme(PlanBytes& b, const ModelConfig& config, const TrainOptions& o, uint32_t ranks) {
  // A training run across ranks (o.ranks, ZeRO-2 or 3): rank 0's reservation, the largest.
  const NvmeReservation r = ranks == 1 && o.ranks > 1
                                ? run_nvme_reservation(config, o, NvmeStoreOptions{}.stripe_unit, 0)
                                : nvme_reservation(config, o, NvmeStoreOptions{}.stripe_unit, ranks);
  b.at(Tier::nvme, PlanState::weights) = r.weights;
  b.at(Tier::nvme, PlanState::gradients) = r.gradients;
  if (r.optimizer > 0) {
    const uint32_t state_ranks = ranks == 1 && o.ranks > 1 ? uint32_t(o.ranks) : ranks;
    const uint64_t masters = std::min(r.optimizer, master_bytes(sharded(state_options(config, o), state_ranks)));
    b.at(Tier::nvme, PlanState::masters) = masters;
    b.at(Tier::nvme, PlanState::moments) = r.optimizer - masters;
  }
}

}  // namespace

uint64_t cpu_updated_parameters(const ModelConfig& config, const TrainOptions& o) {
  const uint64_t all = parameter_count(config);
  if (!o.split_update || !o.paged_weights()) return all;
  const std::shared_ptr<const ParamLayout> working = working_layout(config, o);
  const std::vector<bool> on_device = device_update_mask(*working, o);
  uint64_t moved = 0;
  for (const ParamSpec& p : working->params)
    if (on_device[size_t(p.chunk)]) moved += p.elements;
  return all - std::min(all, moved);
}

std::string_view plan_tier_name(Tier tier) {
  switch (tier) {
    case Tier::device: return "gpu";
    case Tier::cpu: return "cpu";
    case Tier::nvme: return "nvme";
  }
  return "?";
}

std::string_view plan_state_name(PlanState state) {
  switch (state) {
    case PlanState::weights: return "weights";
    case PlanState::gradients: return "gradients";
    case PlanState::masters: return "masters";
    case PlanState::moments: return "moments";
    case PlanState::activations: return "activations";
    case PlanState::staging: return "staging";
    case PlanState::other: return "other";
  }
  return "?";
}

uint64_t PlanBytes::tier(Tier t) const {
  uint64_t total = 0;
  for (uint64_t v : bytes[size_t(t)]) total += v;
  return total;
}

NvmeReservation nvme_reservation(const ModelConfig& config, const TrainOptions& o, uint64_t stripe_unit,
                                 uint32_t ranks) {
  NvmeReservation r;
  const std::shared_ptr<const ParamLayout> working = working_layout(config, o);
  const ParamLayout& layout = *working;
  if (o.weight_home == Tier::nvme) {
    const std::vector<uint64_t> paged = run_weight_options(layout, o, config.name).chunk_bytes;
    uint64_t shards = 0;  // the rank's shards of the paged chunks (ranks 1: the chunks)
    for (uint64_t c : paged) shards += shard_bytes(c, ranks);
    r.weights = (ranks > 1 ? shards : weight_share(layout, o).paged) + paged.size() * (stripe_unit / 8) + stripe_unit;
  }
  if (optimizer_on_nvme(o)) {  // the state's pieces only then: cutting them is most of a candidate's sizing
    const OptimizerPipelineOptions po = sharded(state_options(config, o), ranks);
    r.optimizer = optimizer_pipeline_nvme_bytes(po) + po.fp32_elements.size() * 4096;
  }
  if (grads_on_nvme(o)) {
    const GradientOffloaderOptions go = sharded(gradient_options(layout, o, config.name), ranks);
    r.gradients = gradient_offloader_nvme_bytes(go) + go.chunk_bytes.size() * 4096;
  }
  return r;
}

NvmeReservation run_nvme_reservation(const ModelConfig& config, const TrainOptions& o, uint64_t stripe_unit, int rank) {
  const int ranks = std::max(o.ranks, 1);
  if (ranks == 1) return nvme_reservation(config, o, stripe_unit);
  NvmeReservation r;
  const std::shared_ptr<const ParamLayout> working = working_layout(config, o);
  const ParamLayout& layout = *working;
  if (o.weight_home == Tier::nvme) {
    if (o.partitions_weights()) {  // ZeRO-3: the rank's padded shard of every paged chunk
      const std::vector<uint64_t> paged = run_weight_options(layout, o, config.name).chunk_bytes;
      for (uint64_t c : paged) r.weights += shard_stride_bytes(c, layout.element_bytes, ranks);
      r.weights += paged.size() * (stripe_unit / 8) + stripe_unit;
    } else {  // ZeRO-2: each rank pages its whole copy
      r.weights = nvme_reservation(config, o, stripe_unit).weights;
    }
  }
  if (optimizer_on_nvme(o)) {
    const std::vector<StatePiece> pieces =
        rank_state_pieces(layout, *master_layout(config), o.sub_group_size, ranks, rank);
    const OptimizerPipelineOptions po = optimizer_state_options(pieces, o, /*labels=*/false);
    r.optimizer = optimizer_pipeline_nvme_bytes(po) + po.fp32_elements.size() * 4096;
  }
  if (grads_on_nvme(o)) {
    const GradientOffloaderOptions go = gradient_shard_options(gradient_options(layout, o, config.name), ranks);
    r.gradients = gradient_offloader_nvme_bytes(go) + go.chunk_bytes.size() * 4096;
  }
  return r;
}

TrainOptions rank_options(const TrainOptions& options, const World& world) {
  if (world.single()) return options;
  TrainOptions r = options;
  r.grad_accum = std::max<uint64_t>(options.grad_accum / world.ranks, 1);
  r.resident_layers = 0;
  r.split_update = false;  // one rank's (train refuses it across ranks)
  return r;
}

PlanBytes plan_bytes(const ModelConfig& config, const TrainOptions& options, const World& world) {
  const TrainOptions r = rank_options(options, world);
  PlanBytes b;
  add_device(b, config, r, world.ranks);
  add_pinned(b, config, r, world.ranks);
  add_nvme(b, config, r, world.ranks);
  return b;
}

double default_flops(DType dtype) { return dtype == DType::f32 ? 25e12 : 100e12; }

int64_t param_cache_for(const ModelConfig& config, const TrainOptions& options, const Hardware& h) {
  if (options.weight_home != Tier::nvme || options.param_cache >= 0) return options.param_cache;
  if (!h.cpu_bytes_given || !h.world.single() || options.ranks > 1) return 0;
  TrainOptions o = options;
  o.param_cache = 0;
  const uint64_t pinned = plan_bytes(config, o, h.world).tier(Tier::cpu);
  const uint64_t usable = h.cpu_bytes - h.cpu_bytes / 64;
  if (pinned >= usable) return 0;
  const std::shared_ptr<const ParamLayout> layout = working_layout(config, o);
  const TierManagerOptions wo = run_weight_options(*layout, o, config.name);
  return int64_t(tier_cache_bytes(wo, tier_cache_chunks(wo, usable - pinned)));
}

StepTraffic plan_traffic(const ModelConfig& config, const TrainOptions& options, const World& world) {
  if (!world.single()) return rank_traffic(config, rank_options(options, world), world);
  const TrainOptions& o = options;
  StepTraffic t;
  const std::shared_ptr<const ParamLayout> working = working_layout(config, o);
  const ParamLayout& layout = *working;
  const uint64_t weights = layout.total_bytes(), k = o.grad_accum;
  const WeightShare share = weight_share(layout, o);
  const WeightFetches f = weight_fetches(config, layout, o, o.weight_home != Tier::device ? share.paged : 0);
  t.h2d += f.acquired(k);
  // A split update keeps the resident layers' gradients and update on the device.
  const bool split = o.cpu_optimizer() && o.split_update && o.weight_home != Tier::device;
  if (o.cpu_optimizer() && !split) t.h2d += share.resident;  // the updated resident weights, uploaded once
  if (o.cpu_optimizer()) t.d2h += (split ? share.paged : weights) * k;  // each micro-batch's gradients
  t.h2d += batch_bytes(o);                         // inputs and targets
  if (o.weight_home == Tier::nvme) {
    // The read cache keeps C of the P paged chunks: each turn of a step's zig-zag (forward up,
    // backward down) finds the last C read still in RAM, about C of every P fetches (all of them
    // once C >= P). An estimate: the chunks differ in size and the turns in number.
    const TierManagerOptions wo = run_weight_options(layout, o, config.name);
    const double kept = std::min(1.0, double(wo.cache_chunks) / double(std::max<size_t>(wo.chunk_bytes.size(), 1)));
    t.nvme_read += uint64_t(double(f.acquired(k)) * (1.0 - kept));
    t.nvme_write += share.paged;
  }
  if (grads_on_nvme(o)) {
    const uint64_t sums = gradient_offloader_nvme_bytes(gradient_options(layout, o, config.name));
    t.nvme_write += sums * k;
    t.nvme_read += sums * k;
  }
  if (optimizer_on_nvme(o)) {
    const uint64_t images = optimizer_pipeline_nvme_bytes(state_options(config, o));
    t.nvme_read += images;
    t.nvme_write += images;
  }
  return t;
}

StepTime plan_step_time(const ModelConfig& config, const TrainOptions& options, const PlanRates& rates,
                        const World& world) {
  StepTime s;
  const TrainOptions o = rank_options(options, world);  // one rank's share: options itself for one rank
  const StepTraffic t = plan_traffic(config, options, world);
  const double flops = rates.flops > 0 ? rates.flops : default_flops(o.dtype);
  // The node's drives and CPU serve its ranks: a rank's NVMe bytes and Adam parameters take a
  // (ranks per node)-th of their rates. One rank: x 1 and / 1, exact.
  const double node_share = double(world.ranks_per_node());
  s.compute_s = training_flops_per_step(config, o) * (o.activation_checkpointing ? 4.0 / 3.0 : 1.0) / flops;
  s.pcie_s = double(std::max(t.h2d, t.d2h)) / rates.pcie;
  s.nvme_s = (double(t.nvme_read) / rates.nvme_read + double(t.nvme_write) / rates.nvme_write) * node_share;
  // The CPU's share of the update: every parameter, less a split update's resident layers (the
  // device's AdamW over them is memory-bound at device bandwidth, ~40 bytes a parameter: well under
  // 1% of a step, not modelled).
  s.adam_s = o.cpu_optimizer() ? double(cpu_updated_parameters(config, o)) / double(world.ranks) * node_share /
                                     rates.adam
                               : 0.0;
  s.forward_s = s.compute_s / double(o.grad_accum) * (o.activation_checkpointing ? 0.25 : 1.0 / 3.0);
  s.intra_node_s = double(t.network.intra_node) / world.intra_node;
  s.inter_node_s = double(t.network.inter_node) / world.inter_node;
  if (rates.shared_cores) {
    s.crc_s = double(t.nvme_read + t.nvme_write) / rates.crc;
    s.step_s = s.compute_s + s.pcie_s + s.adam_s + s.crc_s + s.nvme_s + s.intra_node_s + s.inter_node_s;
  } else {
    const bool overlapped = !o.cpu_optimizer() || o.overlap_optimizer;
    const double path = overlapped ? std::max(s.forward_s, s.adam_s) + (s.compute_s - s.forward_s) : s.compute_s;
    s.step_s = std::max({path, s.pcie_s, s.nvme_s, s.intra_node_s, s.inter_node_s}) + (overlapped ? 0.0 : s.adam_s);
  }
  const std::pair<double, std::string_view> parts[] = {
      {s.compute_s, "compute"},        {s.pcie_s, "pcie"},  {s.nvme_s, "nvme"}, {s.adam_s, "cpu_adam"},
      {s.crc_s, "crc32c"},             {s.intra_node_s, "intra_node"}, {s.inter_node_s, "inter_node"}};
  s.bottleneck = std::max_element(std::begin(parts), std::end(parts), [](const auto& a, const auto& b) {
                   return a.first < b.first;
                 })->second;
  return s;
}

Status check_hardware(const Hardware& h) {
  if (h.gpu_bytes == 0)
    return error(Code::invalid_argument, "the GPU memory budget is 0; pass --gpu-mem SIZE (e.g. 24GiB)");
  if (h.cpu_bytes == 0)
    return error(Code::invalid_argument, "the pinned CPU memory budget is 0; pass --cpu-mem SIZE (e.g. 128GiB)");
  const std::pair<double, const char*> rates[] = {{h.rates.pcie, "--rate-pcie"},
                                                  {h.rates.nvme_read, "--rate-nvme-read"},
                                                  {h.rates.nvme_write, "--rate-nvme-write"},
                                                  {h.rates.adam, "--rate-adam"}};
  for (const auto& [rate, flag] : rates)
    if (!(rate > 0) || !std::isfinite(rate))
      return error(Code::invalid_argument, "{} must be a rate above 0, not {}", flag, rate);
  if (h.rates.flops < 0 || !std::isfinite(h.rates.flops))
    return error(Code::invalid_argument, "--rate-flops must be above 0, not {}", h.rates.flops);
  return check_world(h.world);
}

PlanCandidate evaluate_placement(const ModelConfig& untiled, const TrainOptions& options, const Hardware& h) {
  // The tiles the run would take with this placement. A tiling check_tiling refuses was refused
  // before (make_plan, choose_train_placement); the whole model stands in for it here.
  const StatusOr<ModelConfig> tiled = with_tiling(untiled, options, h.gpu_bytes);
  ModelConfig whole = untiled;
  whole.vocab_tile = whole.mlp_tiles = 0;
  return evaluate_tiled(tiled.is_ok() ? *tiled : whole, options, h);
}

PlanCandidate evaluate_tiled(const ModelConfig& config, const TrainOptions& options, const Hardware& h) {
  PlanCandidate c;
  c.options = options;
  // Across ranks every chunk is sharded and gathered: no layer stays resident (rank_options).
  c.options.resident_layers = h.world.single() ? resident_layers_for(config, options, h.gpu_bytes) : 0;
  // The schedule the run takes with them (train resolves it again, logging why; plan_traffic needs
  // it), for a rank's micro-batches; across ranks every chunk is gathered as a paged run fetches it,
  // so the choice sees paged weights (and the paged working set, without the shards a rank homes
  // on its device).
  if (c.options.step_schedule == StepSchedule::automatic) {
    TrainOptions chooser = rank_options(c.options, h.world);
    if (!h.world.single()) chooser.weight_home = Tier::cpu;
    const StatusOr<ScheduleChoice> schedule = choose_step_schedule(config, chooser, 1, h.gpu_bytes);
    c.options.step_schedule = schedule.is_ok() ? schedule->schedule : StepSchedule::micro_batch_major;
  }
  c.options.param_cache = param_cache_for(config, c.options, h);  // what the pinned budget leaves
  c.model = config;
  c.bytes = plan_bytes(config, c.options, h.world);
  c.traffic = plan_traffic(config, c.options, h.world);
  c.time = plan_step_time(config, c.options, h.rates, h.world);
  const uint64_t budgets[kTiers] = {h.gpu_bytes, h.cpu_bytes, h.nvme_bytes};
  for (size_t t = 0; t < kTiers; ++t) {
    const uint64_t need = c.bytes.tier(Tier(t));
    c.missing[t] = need > budgets[t] ? need - budgets[t] : 0;
  }
  return c;
}

std::vector<TrainOptions> plan_placements(const TrainOptions& base, const PlanFixed& fixed) {
  const auto choices = [](bool is_fixed, auto given, std::initializer_list<decltype(given)> all) {
    return is_fixed ? std::vector<decltype(given)>{given} : std::vector<decltype(given)>(all);
  };
  std::vector<TrainOptions> out;
  for (Tier w : choices(fixed.weights, base.weight_home, {Tier::device, Tier::cpu, Tier::nvme}))
    for (Tier opt : choices(fixed.optimizer, base.optimizer_home, {Tier::device, Tier::cpu, Tier::nvme}))
      for (Tier g : choices(fixed.gradients, base.grad_home, {Tier::cpu, Tier::nvme}))
        for (bool ckpt : choices(fixed.checkpointing, base.activation_checkpointing, {false, true})) {
          // The device optimizer updates resident weights with fp32 moments and keeps the gradients.
          if (opt == Tier::device && w != Tier::device) continue;
          if (opt == Tier::device && g == Tier::nvme && !fixed.gradients) continue;
          // --optimizer-device split asks for paged weights (with resident layers updated on the device).
          if (base.split_update && fixed.optimizer && w == Tier::device) continue;
          TrainOptions o = base;
          o.weight_home = w;
          o.optimizer_home = opt;
          o.grad_home = opt == Tier::device ? Tier::cpu : g;
          o.activation_checkpointing = ckpt;
          // A split update (the resident layers' on the device) only beside paged weights and on
          // one rank; open unless --optimizer-device fixed it.
          const bool can_split = w != Tier::device && opt != Tier::device && !base.across_ranks();
          o.split_update = can_split && base.split_update;
          out.push_back(o);
          if (can_split && !fixed.optimizer && !base.split_update) {
            o.split_update = true;
            out.push_back(o);
          }
        }
  return out;
}

namespace {

// How far a placement keeps state from the fastest tier, the most-used state weighing most:
// weights (fetched twice per micro-batch) 4, gradients (once per micro-batch) 2, optimizer state
// (once per step) 1; per tier: device 0, cpu 1, nvme 2.
int placement_rank(const TrainOptions& o) {
  const int w = o.weight_home == Tier::device ? 0 : o.weight_home == Tier::cpu ? 1 : 2;
  const int g = !o.cpu_optimizer() ? 0 : o.grad_home == Tier::cpu ? 1 : 2;
  const int opt = !o.cpu_optimizer() ? 0 : o.optimizer_home == Tier::cpu ? 1 : 2;
  return 4 * w + 2 * g + opt;
}

// a before b: the faster (times within 1e-9 relative are equal), then the lower rank, then
// checkpointing off, then no split update.
bool better_fit(const PlanCandidate& a, const PlanCandidate& b) {
  const double ta = a.time.step_s, tb = b.time.step_s;
  if (std::abs(ta - tb) > 1e-9 * std::max(ta, tb)) return ta < tb;
  return std::tuple(placement_rank(a.options), a.options.activation_checkpointing, a.options.split_update) <
         std::tuple(placement_rank(b.options), b.options.activation_checkpointing, b.options.split_update);
}

// a before b when neither fits: fewer bytes missing on the GPU, then the CPU, then NVMe.
bool closer(const PlanCandidate& a, const PlanCandidate& b) {
  if (a.missing != b.missing) return a.missing < b.missing;
  return better_fit(a, b);
}

struct Search {
  std::vector<PlanCandidate> all;
  PlanCandidate chosen;
  bool fits = false;
};

// The fastest candidate of `all` that fits, else the closest to fitting.
Search pick(std::vector<PlanCandidate> all) {
  Search s;
  s.all = std::move(all);
  const PlanCandidate* best = nullptr;
  for (const PlanCandidate& c : s.all)
    if (c.fits() && (best == nullptr || better_fit(c, *best))) best = &c;
  s.fits = best != nullptr;
  if (!s.fits)
    for (const PlanCandidate& c : s.all)
      if (best == nullptr || closer(c, *best)) best = &c;
  if (best != nullptr) s.chosen = *best;
  return s;
}

Search search(const ModelConfig& config, const TrainOptions& base, const Hardware& h, const PlanFixed& fixed) {
  std::vector<PlanCandidate> all;
  for (const TrainOptions& o : plan_placements(base, fixed)) {
    // Across ranks no layer stays resident (rank_options): a split update would be the CPU one.
    if (!h.world.single() && o.split_update && !base.split_update) continue;
    all.push_back(evaluate_placement(config, o, h));
  }
  return pick(std::move(all));
}

// search with the tiles auto would cut, whatever tiling base gives (with_tiling's fewest that fit,
// as fewest_fitting_tiles): what tiling would do for a run given whole MLPs or too few tiles.
Search search_auto_tiles(const ModelConfig& config, TrainOptions base, const Hardware& h, const PlanFixed& fixed) {
  base.vocab_tile = base.mlp_tiles = -1;
  return search(config, base, h, fixed);
}

// SI sizes, as drives are sold: "760.3 GB", "12.5 MB".
std::string gb(uint64_t bytes) {
  return bytes >= 1000000000 ? fmt::format("{:.1f} GB", double(bytes) / 1e9) : fmt::format("{:.1f} MB", double(bytes) / 1e6);
}
// A size for a flag, rounded up: "1261GB", "530MB".
std::string flag_size(uint64_t bytes) {
  return bytes >= 10000000000 ? fmt::format("{}GB", (bytes + 999999999) / 1000000000)
                              : fmt::format("{}MB", (bytes + 999999) / 1000000);
}

std::string shortfall(const PlanCandidate& c) {
  std::string out;
  for (size_t t = 0; t < kTiers; ++t)
    if (c.missing[t] > 0)
      out += fmt::format("{}{} short by {}", out.empty() ? "" : ", ", plan_tier_name(Tier(t)), gb(c.missing[t]));
  return out;
}

// The outcome of a changed input, for a suggestion's effect.
std::string outcome(const Search& s) {
  if (s.fits)
    return fmt::format("fits with {} (gpu {}, cpu {}, nvme {}; step about {:.3g} s)", candidate_summary(s.chosen),
                       gb(s.chosen.bytes.tier(Tier::device)), gb(s.chosen.bytes.tier(Tier::cpu)),
                       gb(s.chosen.bytes.tier(Tier::nvme)), s.chosen.time.step_s);
  return "still does not fit: " + shortfall(s.chosen);
}

// A suggestion whose outcome is `s`.
PlanSuggestion found(std::string change, std::string effect, const Search& s) {
  return {std::move(change), std::move(effect), s.fits, s.fits ? s.chosen.time.step_s : 0.0};
}

// Per tier: the least it must hold for some placement that fits the other two budgets.
void add_tier_suggestions(const Search& s, const Hardware& h, std::vector<PlanSuggestion>& out) {
  for (size_t t = 0; t < kTiers; ++t) {
    const PlanCandidate* best = nullptr;
    for (const PlanCandidate& c : s.all) {
      const bool others_fit = (t == 0 || c.missing[0] == 0) && (t == 1 || c.missing[1] == 0) && (t == 2 || c.missing[2] == 0);
      if (others_fit && (best == nullptr || c.bytes.tier(Tier(t)) < best->bytes.tier(Tier(t)))) best = &c;
    }
    if (best == nullptr) continue;
    // Across ranks --cpu-mem and --nvme-mem are a node's: its ranks' budgets together.
    const uint64_t per_node = t == 0 ? 1 : h.world.ranks_per_node();
    const uint64_t need = best->bytes.tier(Tier(t)) * per_node, missing = best->missing[t] * per_node;
    const std::string with =
        candidate_summary(*best) + (per_node > 1 ? fmt::format(" ({} ranks per node)", per_node) : "");
    if (t == 0)
      out.push_back({fmt::format("--gpu-mem {}", flag_size(need)),
                     fmt::format("a GPU budget of {} ({} more) fits with {}", gb(need), gb(missing), with), true,
                     best->time.step_s});
    else if (t == 1)
      out.push_back({fmt::format("--cpu-mem {}", flag_size(need)),
                     fmt::format("{} of pinned CPU memory ({} more) fits with {}", gb(need), gb(missing), with), true,
                     best->time.step_s});
    else
      out.push_back({"--nvme-path DIR",
                     fmt::format("add an NVMe path with {} free: the plan needs {} of NVMe and {} is there (for a "
                                 "described machine: --nvme-mem {}), with {}",
                                 gb(missing), gb(need), gb(h.nvme_bytes * per_node), flag_size(need), with),
                     true, best->time.step_s});
  }
}

// The smaller micro-batches of the same tokens per step that the flags take: micro_batch / d and
// grad_accum x d for each divisor d > 1 of micro_batch while grad_accum x d <= kMaxGradAccum, the
// largest micro-batch first.
std::vector<TrainOptions> smaller_micro_batches(const TrainOptions& base) {
  std::vector<TrainOptions> out;
  for (uint64_t d = 2; d <= base.micro_batch && base.grad_accum * d <= uint64_t(kMaxGradAccum); ++d) {
    if (base.micro_batch % d != 0) continue;
    TrainOptions o = base;
    o.micro_batch = base.micro_batch / d;
    o.grad_accum = base.grad_accum * d;
    out.push_back(o);
  }
  return out;
}

// The largest smaller micro-batch that fits and its search; a search that does not fit when none does.
std::pair<TrainOptions, Search> smaller_micro_batch(const ModelConfig& config, const TrainOptions& base,
                                                    const Hardware& h, const PlanFixed& fixed) {
  for (const TrainOptions& o : smaller_micro_batches(base)) {
    Search s = search(config, o, h, fixed);
    if (s.fits) return {o, std::move(s)};
  }
  return {base, Search{}};
}

std::string micro_batch_flags(const TrainOptions& o) {
  return fmt::format("--micro-batch {} --grad-accum {}", o.micro_batch, o.grad_accum);
}

// Flags joined by spaces, the empty ones left out.
std::string joined(std::initializer_list<std::string> flags) {
  std::string out;
  for (const std::string& f : flags)
    if (!f.empty()) out += (out.empty() ? "" : " ") + f;
  return out;
}

// Fits first, the fastest predicted step first; the order of equals kept.
void fastest_first(std::vector<PlanSuggestion>& ways) {
  std::stable_sort(ways.begin(), ways.end(), [](const PlanSuggestion& a, const PlanSuggestion& b) {
    if (a.fits != b.fits) return a.fits;
    return a.fits && a.step_s < b.step_s;
  });
}

std::vector<PlanSuggestion> suggestions(const ModelConfig& config, const TrainOptions& base, const Hardware& h,
                                        const PlanFixed& fixed, const Search& s) {
  std::vector<PlanSuggestion> out;
  add_tier_suggestions(s, h, out);
  std::vector<PlanSuggestion> ways;  // each change alone
  TrainOptions all = base;
  PlanFixed all_fixed = fixed;
  // Tiles: the fewest that fit, where the given tiling does not cut them (auto's: s).
  const Search t = base.vocab_tile < 0 && base.mlp_tiles < 0 ? s : search_auto_tiles(config, base, h, fixed);
  const std::string tiles = tiling_flags(t.chosen.model, base);
  if (!tiles.empty() && (t.fits || closer(t.chosen, s.chosen)))
    ways.push_back(found(tiles, fmt::format("{}, each tile a chunk the device holds two of at a time: {}",
                                            tiling_summary(t.chosen.model), outcome(t)),
                         t));
  if (base.adam_states == AdamStates::f32) {
    TrainOptions o = base;
    o.adam_states = AdamStates::q8;
    o.optimizer = "adamw8bit";
    PlanFixed f = fixed;
    const Search q = search(config, o, h, f);
    ways.push_back(found("--optimizer-type adamw8bit",
                         "8-bit moments (6 bytes of optimizer state per parameter, not 12): " + outcome(q), q));
    all = o;
    all_fixed = f;
  }
  if (fixed.checkpointing && !base.activation_checkpointing) {
    TrainOptions o = base;
    o.activation_checkpointing = true;
    const Search c = search(config, o, h, fixed);
    ways.push_back(
        found("--activation-checkpointing", "keep only each layer's input for the backward: " + outcome(c), c));
    all.activation_checkpointing = true;
  }
  const std::vector<TrainOptions> smaller = smaller_micro_batches(base);
  if (const auto [o, m] = smaller_micro_batch(config, base, h, fixed); m.fits)
    ways.push_back(found(micro_batch_flags(o),
                         fmt::format("the same {} tokens per step in smaller micro-batches: {}", o.tokens_per_step(),
                                     outcome(m)),
                         m));
  fastest_first(ways);
  const bool one_fits = std::any_of(ways.begin(), ways.end(), [](const PlanSuggestion& w) { return w.fits; });
  out.insert(out.end(), ways.begin(), ways.end());
  if (one_fits) return out;
  if (!smaller.empty()) {
    all.micro_batch = smaller.back().micro_batch;
    all.grad_accum = smaller.back().grad_accum;
  }
  const Search a = search_auto_tiles(config, all, h, all_fixed);
  const std::string change =
      joined({all.adam_states != base.adam_states ? "--optimizer-type adamw8bit" : "",
              all.activation_checkpointing != base.activation_checkpointing ? "--activation-checkpointing" : "",
              tiling_flags(a.chosen.model, base), all.micro_batch != base.micro_batch ? micro_batch_flags(all) : ""});
  if (a.fits && !change.empty())  // else the per-tier figures above say what is missing
    out.push_back(found(change, "all of these together: " + outcome(a), a));
  return out;
}

// A plan that auto tiled: the untiled plans that fit too (Plan::untiled_alternatives).
std::vector<PlanSuggestion> untiled_alternatives(const ModelConfig& config, const TrainOptions& base,
                                                 const Hardware& h, const PlanFixed& fixed,
                                                 const PlanCandidate& tiled) {
  const bool mlp = base.mlp_tiles < 0 && tiled.model.mlp_tiles > 1;
  const bool vocab = base.vocab_tile < 0 && tiled.model.vocab_tile > 0;
  if (!mlp && !vocab) return {};
  TrainOptions whole = base;
  whole.vocab_tile = std::max<int64_t>(base.vocab_tile, 0);
  whole.mlp_tiles = std::max<int64_t>(base.mlp_tiles, 0);
  const std::string untile = joined({mlp ? "--mlp-tiles 0" : "", vocab ? "--vocab-tile 0" : ""});
  std::vector<PlanSuggestion> out;
  if (const Search u = search(config, whole, h, fixed); u.fits) {
    // The flags of what changes: the placement's, or only checkpointing.
    const TrainOptions& a = u.chosen.options;
    TrainOptions homes = a;  // a's homes with the tiled plan's checkpointing
    homes.activation_checkpointing = tiled.options.activation_checkpointing;
    const bool moved = placement_flags(homes) != placement_flags(tiled.options);
    const bool ckpt = !moved && a.activation_checkpointing != tiled.options.activation_checkpointing;
    out.push_back(found(joined({untile, moved ? placement_flags(a) : "", ckpt ? "--activation-checkpointing" : ""}),
                        outcome(u), u));
  }
  if (const auto [o, m] = smaller_micro_batch(config, whole, h, fixed); m.fits)
    out.push_back(found(joined({untile, micro_batch_flags(o)}),
                        fmt::format("the same {} tokens per step in smaller micro-batches: {}", o.tokens_per_step(),
                                    outcome(m)),
                        m));
  fastest_first(out);
  return out;
}

// "96MiB": a --gpu-mem that holds `bytes`, rounded up to whole MiB.
std::string gpu_mem_flag(uint64_t bytes) { return fmt::format("--gpu-mem {}MiB", (bytes + (1ull << 20) - 1) >> 20); }

}  // namespace

StatusOr<Plan> make_plan(const ModelConfig& config, const TrainOptions& base, const Hardware& hardware,
                         const PlanFixed& fixed) {
  STRATA_RETURN_IF_ERROR(check_hardware(hardware));
  STRATA_RETURN_IF_ERROR(check_tiling(config, base));
  if (base.micro_batch == 0 || base.seq == 0 || base.grad_accum == 0)
    return error(Code::invalid_argument, "micro_batch, seq and grad_accum must be at least 1 (got {}, {}, {})",
                 base.micro_batch, base.seq, base.grad_accum);
  if (int64_t(base.seq) > config.max_seq)
    return error(Code::invalid_argument, "--seq {} is longer than {}'s {} positions; pass --seq {} or less", base.seq,
                 config.name, config.max_seq, config.max_seq);
  STRATA_RETURN_IF_ERROR(check_world_batch(hardware.world, base.grad_accum));
  Search s = search(config, base, hardware, fixed);
  if (s.all.empty())
    return error(Code::invalid_argument, "no placement satisfies the choices given ({}); drop one of --offload-param, "
                 "--offload-optimizer, --optimizer-device, --offload-grad", placement_summary(base));
  Plan plan;
  plan.config = config;
  plan.params = parameter_count(config);
  plan.hardware = hardware;
  plan.fits = s.fits;
  if (!s.fits)
    plan.suggestions = suggestions(config, base, hardware, fixed, s);
  else
    plan.untiled_alternatives = untiled_alternatives(config, base, hardware, fixed, s.chosen);
  plan.chosen = std::move(s.chosen);
  return plan;
}

std::vector<PlanSuggestion> device_suggestions(const ModelConfig& config, const TrainOptions& o, const Hardware& h) {
  const uint64_t budget = h.gpu_bytes;
  // A change: the run with `with`'s options, tiled as given or as with_tiling says for them.
  const auto change = [&](std::string flags, std::string what, const ModelConfig& tiled, const TrainOptions& with) {
    const uint64_t need = estimate_device_bytes(tiled, with).total();
    const double step = plan_step_time(tiled, with, h.rates).step_s;
    const std::string room = need <= budget ? fmt::format("within the {} budget", format_size(budget))
                                            : fmt::format("{} over the {} budget", format_size(need - budget),
                                                          format_size(budget));
    return PlanSuggestion{std::move(flags),
                          fmt::format("{}: needs {} of device memory ({}); step about {:.3g} s", what,
                                      format_size(need), room, step),
                          need <= budget, step};
  };
  const auto retiled = [&](const TrainOptions& with) {
    const StatusOr<ModelConfig> t = with_tiling(config, with, budget);
    return t.is_ok() ? *t : config;
  };
  const uint64_t now = estimate_device_bytes(config, o).total();
  std::vector<PlanSuggestion> ways;
  TrainOptions all = o;
  const Tiling fewest = fewest_fitting_tiles(config, o, budget);
  ModelConfig tiled = config;
  tiled.vocab_tile = fewest.vocab_tile;
  tiled.mlp_tiles = fewest.mlp_tiles;
  const std::string tiles = tiling_flags(tiled, o);
  if (!tiles.empty() && fewest.device_bytes < now)
    ways.push_back(change(tiles, (fewest.fits ? "" : "the finest tiling, ") + tiling_summary(tiled), tiled, o));
  if (o.weight_home == Tier::device) {
    TrainOptions paged = o;
    paged.weight_home = Tier::cpu;
    if (paged.optimizer_home == Tier::device) paged.optimizer_home = Tier::cpu;
    ways.push_back(change("--offload-param cpu", "pages the weights through the device (nvme: from disk)",
                          retiled(paged), paged));
    all = paged;
  }
  if (!o.activation_checkpointing) {
    TrainOptions ckpt = o;
    ckpt.activation_checkpointing = true;
    ways.push_back(change("--activation-checkpointing", "keep only each layer's input for the backward", retiled(ckpt),
                          ckpt));
    all.activation_checkpointing = true;
  }
  const std::vector<TrainOptions> smaller = smaller_micro_batches(o);
  for (const TrainOptions& m : smaller) {
    const PlanSuggestion s = change(micro_batch_flags(m), fmt::format("the same {} tokens per step in smaller "
                                                                      "micro-batches", m.tokens_per_step()),
                                    retiled(m), m);
    if (!s.fits && &m != &smaller.back()) continue;
    ways.push_back(s);
    break;
  }
  fastest_first(ways);
  const bool one_fits = std::any_of(ways.begin(), ways.end(), [](const PlanSuggestion& w) { return w.fits; });
  if (!one_fits) {
    if (!smaller.empty()) {
      all.micro_batch = smaller.back().micro_batch;
      all.grad_accum = smaller.back().grad_accum;
    }
    // The run's own tiles when they fit with the rest, else the fewest that do (or the finest).
    ModelConfig together = config;
    if (estimate_device_bytes(config, all).total() > budget) {
      const Tiling t = fewest_fitting_tiles(config, all, budget);
      together.vocab_tile = t.vocab_tile;
      together.mlp_tiles = t.mlp_tiles;
    }
    const std::string flags =
        joined({all.weight_home != o.weight_home ? "--offload-param cpu" : "",
                all.activation_checkpointing != o.activation_checkpointing ? "--activation-checkpointing" : "",
                all.micro_batch != o.micro_batch ? micro_batch_flags(all) : "", tiling_flags(together, o)});
    const uint64_t least = estimate_device_bytes(together, all).total();
    if (!flags.empty() && least < now)
      ways.push_back(change(flags,
                            least <= budget ? "all of these together"
                                            : "all of these together (" + gpu_mem_flag(least) + " would hold it)",
                            together, all));
  }
  ways.push_back(change(gpu_mem_flag(now), "the run as it is", config, o));
  return ways;
}

std::string placement_summary(const TrainOptions& o) {
  const std::string_view weights = o.weight_home == Tier::device ? "gpu" : offload_value(o.weight_home);
  const std::string optimizer =
      !o.cpu_optimizer()                       ? std::string("gpu")
      : o.split_update && o.paged_weights() ? fmt::format("{} (the resident layers' on the gpu: split)",
                                                            offload_value(o.optimizer_home))
                                               : std::string(offload_value(o.optimizer_home));
  const std::string_view grads = !o.cpu_optimizer() ? "gpu" : o.grad_home == Tier::nvme ? "nvme" : "cpu";
  std::vector<std::string> notes;
  if (o.paged_weights() && o.resident_layers > 0) notes.push_back(fmt::format("{} layers resident", o.resident_layers));
  if (o.weight_home == Tier::nvme && o.param_cache > 0)
    notes.push_back(fmt::format("read cache {}", format_size(uint64_t(o.param_cache))));
  const std::string resident = notes.empty() ? "" : fmt::format(" ({})", fmt::join(notes, ", "));
  return fmt::format("weights {}{}, optimizer {}, gradients {}, activation checkpointing {}", weights, resident,
                     optimizer, grads, o.activation_checkpointing ? "on" : "off");
}

std::string candidate_summary(const PlanCandidate& c) {
  const std::string flags = tiling_flags(c.model, TrainOptions{});
  return flags.empty() ? placement_summary(c.options)
                       : fmt::format("{}, {} ({})", placement_summary(c.options), tiling_summary(c.model), flags);
}

std::string placement_flags(const TrainOptions& o) {
  std::string flags = fmt::format("--offload-param {} --offload-optimizer {}", offload_value(o.weight_home),
                                  offload_value(o.optimizer_home));
  if (o.paged_weights() && o.resident_layers >= 0) flags += fmt::format(" --resident-layers {}", o.resident_layers);
  if (o.weight_home == Tier::nvme && o.param_cache >= 0)
    flags += uint64_t(o.param_cache) % (1u << 20) == 0 ? fmt::format(" --param-cache {}MiB", o.param_cache >> 20)
                                                         : fmt::format(" --param-cache {}KiB", o.param_cache >> 10);
  if (o.cpu_optimizer()) flags += fmt::format(" --offload-grad {}", o.grad_home == Tier::nvme ? "nvme" : "cpu");
  if (o.cpu_optimizer() && o.split_update && o.paged_weights()) flags += " --optimizer-device split";
  if (o.activation_checkpointing) flags += " --activation-checkpointing";
  return flags;
}

}  // namespace strata::model
