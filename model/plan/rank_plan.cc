// One rank's share of a run across ranks (rank_plan.h).
#include "model/plan/rank_plan.h"

#include <algorithm>
#include <memory>

#include "kernels/cpu/grad_accumulate.h"
#include "model/train/device_optimizer.h"
#include "model/train/optimizer_factory.h"
#include "model/train/step_schedule.h"
#include "offload/gradient_offloader.h"
#include "offload/optimizer_pipeline.h"
#include "runtime/align.h"

namespace strata::model {
namespace {

// The arena's 256-byte blocks (placement.cc aligns each allocation so).
uint64_t arena_block(uint64_t bytes) { return round_up(bytes, 256); }

}  // namespace

DeviceBytes rank_device_bytes(const ModelConfig& config, const TrainOptions& o, uint32_t ranks) {
  TrainOptions paged = o;
  paged.weight_home = Tier::cpu;
  paged.resident_layers = 0;
  if (paged.optimizer_home == Tier::device) paged.optimizer_home = Tier::cpu;
  DeviceBytes d = estimate_device_bytes(config, paged);  // the working set: slots, activations, batches
  const std::shared_ptr<const ParamLayout> working = shared_param_layout(config, dtype_size(o.dtype)).value();
  const ParamLayout& layout = *working;
  uint64_t largest_f32 = 0, partials = 0, sums = 0;
  for (const ChunkSpec& c : layout.chunks) {
    const uint64_t elements = c.bytes / layout.element_bytes;
    largest_f32 = std::max(largest_f32, elements * sizeof(float));
    sums += arena_block(shard_bytes(elements, ranks) * sizeof(float));
    partials += (shard_bytes(elements, ranks) + kernels::kSumSquaresBlock - 1) / kernels::kSumSquaresBlock;
    if (o.weight_home == Tier::device) d.weights += arena_block(shard_bytes(c.bytes, ranks, layout.element_bytes));
  }
  d.gradients += 2 * arena_block(largest_f32);
  if (o.optimizer_home == Tier::device) {
    d.gradients += sums + arena_block(partials * sizeof(double));
    // Several micro-batches a rank: the later rounds' receive buffer (DeviceGrads::spread_over_ranks).
    if (ranks > 1 && o.grad_accum > 1) d.gradients += arena_block(largest_f32);  // o: a rank's (rank_options)
    // The device optimizer's shards as it allocates them (its segments of each chunk's shard, and
    // the buffer it gathers a chunk's updated weights through), and the gather of a checkpoint's
    // partitioned state (make_optimizer).
    d.optimizer = DeviceOptimizer::device_bytes(layout, o.dtype, int(ranks), 256, {}, o.adam_states);
    if (ranks > 1) d.optimizer += arena_block(uint64_t(ranks) * weight_gather_round(layout, int(ranks)));
  }
  return d;
}

WeightFetches weight_fetches(const ModelConfig& config, const ParamLayout& layout, const TrainOptions& o,
                             uint64_t paged) {
  const uint64_t k = o.grad_accum;
  // Forward and backward fetch every paged chunk, per micro-batch; layer-major once for all K
  // (Transformer::step_layer_major), but for the tiles (vocabulary and MLP), still per micro-batch.
  const bool layer_major = o.step_schedule == StepSchedule::layer_major && k > 1;
  const uint64_t passes = layer_major ? 1 : k;
  uint64_t per_micro_batch = 0;  // layer-major: the tiles' bytes fetched every micro-batch
  if (layer_major)
    for (const ChunkSpec& c : layout.chunks)
      if (c.tiles > 1) per_micro_batch += c.bytes;
  WeightFetches f{.fetched = paged * passes + per_micro_batch * (k - passes)};
  // MLP tiles under checkpointing: a layer's backward fetches its first weight's tiles twice, for
  // the recomputation and for the backward (two tile slots cannot keep them; the last layer is
  // not recomputed).
  if (paged > 0 && o.activation_checkpointing)
    for (const ChunkSpec& c : layout.chunks)
      if (c.kind == ChunkKind::mlp_in && c.layer != config.n_layer - 1) f.refetched += c.bytes;
  return f;
}

uint64_t batch_bytes(const TrainOptions& o) { return 2 * o.micro_batch * o.seq * sizeof(int32_t) * o.grad_accum; }

StepTraffic rank_traffic(const ModelConfig& config, const TrainOptions& r, const World& world) {
  StepTraffic t;
  const uint32_t n = world.ranks;
  const std::shared_ptr<const ParamLayout> working = shared_param_layout(config, dtype_size(r.dtype)).value();
  const std::shared_ptr<const ParamLayout> masters = shared_param_layout(config, sizeof(float)).value();
  const ParamLayout& layout = *working;
  const uint64_t k = r.grad_accum, weights = layout.total_bytes();
  const uint64_t acquired = weight_fetches(config, layout, r, weights).acquired(k);  // every chunk is gathered
  const uint64_t own = shard_bytes(acquired, n), own_weights = shard_bytes(weights, n);
  const uint64_t grads_f32 = masters->total_bytes();  // a micro-batch's widened release
  t.network = network_traffic(acquired, grads_f32 * k, world);
  t.h2d = batch_bytes(r);
  if (r.weight_home != Tier::device) t.h2d += own;  // its shard of each gathered chunk, from its home
  if (r.cpu_optimizer()) {
    t.d2h += shard_bytes(grads_f32, n) * k;                   // its fp32 shard of each micro-batch's sum
    if (r.weight_home == Tier::device) t.h2d += own_weights;  // the updated shard, uploaded once
  }
  if (r.weight_home == Tier::nvme) {
    t.nvme_read += own;
    t.nvme_write += own_weights;
  }
  if (r.cpu_optimizer() && r.grad_home == Tier::nvme) {
    const uint64_t sums = gradient_offloader_nvme_bytes(sharded(gradient_options(layout, r, config.name), n));
    t.nvme_write += sums * k;
    t.nvme_read += sums * k;
  }
  if (r.optimizer_home == Tier::nvme) {
    const uint64_t images = optimizer_pipeline_nvme_bytes(sharded(optimizer_state_options(*masters, r), n));
    t.nvme_read += images;
    t.nvme_write += images;
  }
  return t;
}

}  // namespace strata::model
