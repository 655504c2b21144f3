// The world a plan is for and a rank's share of a run (world.h).
#include "model/plan/world.h"

#include <cmath>

#include <fmt/format.h>

#include "kernels/cpu/half.h"
#include "runtime/align.h"

namespace strata::model {

Status check_world(const World& w) {
  if (w.ranks == 0) return error(Code::invalid_argument, "--ranks must be at least 1 (the GPUs of the run), not 0");
  if (w.nodes == 0) return error(Code::invalid_argument, "--nodes must be at least 1 (the machines of the run), not 0");
  if (w.nodes > w.ranks)
    return error(Code::invalid_argument, "--nodes {} is more than --ranks {}: every node runs at least one rank; pass "
                 "--nodes {} or fewer", w.nodes, w.ranks, w.ranks);
  if (w.ranks % w.nodes != 0) {
    const uint32_t per = (w.ranks + w.nodes - 1) / w.nodes;
    return error(Code::invalid_argument,
                 "--ranks {} over --nodes {} is not the same number of ranks on every node; pass --ranks {} ({} per "
                 "node) or a --nodes that divides {}",
                 w.ranks, w.nodes, per * w.nodes, per, w.ranks);
  }
  const std::pair<double, const char*> rates[] = {{w.intra_node, "--rate-intra-node"},
                                                  {w.inter_node, "--rate-inter-node"}};
  for (const auto& [rate, flag] : rates)
    if (!(rate > 0) || !std::isfinite(rate))
      return error(Code::invalid_argument, "{} must be a rate above 0 (GB/s), not {}", flag, rate / 1e9);
  return Status::ok();
}

Status check_world_batch(const World& w, uint64_t grad_accum) {
  if (w.ranks == 0 || grad_accum % w.ranks == 0) return Status::ok();
  const uint64_t up = (grad_accum + w.ranks - 1) / w.ranks * w.ranks;
  return error(Code::invalid_argument,
               "--grad-accum {} is the step's micro-batches over all ranks (micro-batch i runs on rank i) and must be "
               "a multiple of --ranks {}; pass --grad-accum {} ({} per rank)",
               grad_accum, w.ranks, up, up / w.ranks);
}

// ===== What `strata train` runs across ranks today: update HERE as training grows. =====
// model/train builds a run across ranks as ZeRO-2 (--zero-stage 2, the default: every rank holds the
// whole weights, resident or paged from its own pinned memory or NVMe, and homes 1/N of every
// chunk's gradient sum and optimizer state, on its device or in its host memory / NVMe where its CPU
// updates it) or ZeRO-3 (--zero-stage 3, the optimizer on the CPU: the weights 1/N a rank too,
// gathered when the model needs a chunk); fp32 or 8-bit moments with either optimizer (8-bit where
// no shard cut splits a block: q8_block_split) (docs/ARCHITECTURE.md, "Training across ranks").
TrainAcrossRanks train_across_ranks_today(const TrainOptions& o) {
  const bool zero3 = o.optimizer_home != Tier::device;
  return {.text = "train across ranks runs ZeRO-3 with the optimizer on the CPU (--zero-stage 3: the weights, the "
                  "gradient sums and the optimizer state 1/N a rank, each chunk gathered one chunk ahead of the compute) and "
                  "ZeRO-2 with either optimizer (the whole weights on each rank, resident or paged); fp32 or 8-bit "
                  "moments with either (8-bit where no rank's shard cuts a tensor's 256-element block)",
          .verdict = zero3 ? "train runs it across ranks as planned with --zero-stage 3"
                           : "train runs it across ranks with the gradient and optimizer state partitioned as "
                             "planned, but the whole weights on every GPU (ZeRO-3 needs the optimizer on the CPU)"};
}

uint64_t shard_bytes(uint64_t bytes, uint32_t ranks, uint64_t unit) {
  return round_up((bytes + ranks - 1) / ranks, unit);
}

TierManagerOptions sharded(TierManagerOptions o, uint32_t ranks) {
  if (ranks > 1)
    for (uint64_t& b : o.chunk_bytes) b = shard_bytes(b, ranks, kHostPage);
  return o;
}

GradientOffloaderOptions sharded(GradientOffloaderOptions o, uint32_t ranks) {
  if (ranks > 1)
    for (uint64_t& b : o.chunk_bytes) b = shard_bytes(b, ranks, kernels::float_format_size(o.format));
  return o;
}

OptimizerPipelineOptions sharded(OptimizerPipelineOptions o, uint32_t ranks) {
  if (ranks <= 1) return o;
  for (uint64_t& e : o.fp32_elements) e = shard_bytes(e, ranks);
  for (uint64_t& s : o.scale_count) s = shard_bytes(s, ranks);
  return o;
}

NetworkTraffic network_traffic(uint64_t acquired, uint64_t reduced_fp32, const World& w) {
  NetworkTraffic t;
  if (w.ranks <= 1) return t;
  const uint64_t n = w.ranks, local = w.ranks_per_node();
  // Per collective of C bytes: (local - 1)/N of it from the node, (N - local)/N from off it.
  const auto from = [n](uint64_t bytes, uint64_t others) { return bytes / n * others + bytes % n * others / n; };
  t.gathered = from(acquired, n - 1);
  t.reduced = from(reduced_fp32, n - 1);
  t.intra_node = from(acquired, local - 1) + from(reduced_fp32, local - 1);
  t.inter_node = from(acquired, n - local) + from(reduced_fp32, n - local);
  return t;
}

std::string world_summary(const World& w) {
  return fmt::format("{} rank{} on {} node{} ({} per node)", w.ranks, w.ranks == 1 ? "" : "s", w.nodes,
                     w.nodes == 1 ? "" : "s", w.ranks_per_node());
}

}  // namespace strata::model
