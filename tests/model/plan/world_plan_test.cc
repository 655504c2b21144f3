// The planner across ranks (model/plan/world.h, planner.h's world arguments): a rank's homes are
// 1/N of every chunk's, its device working set is one rank's whole slots; its bytes per step on
// each link follow the ZeRO-3 formulas (all-gathers for every acquire, fp32 reduce-scatters per
// micro-batch, split by the ranks on and off its node), checked here against numbers worked out by
// hand from the layout's chunk bytes; a world that does not divide is refused saying what to pass.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/net/param_layout.h"
#include "model/plan/placement.h"
#include "model/plan/planner.h"
#include "model/plan/world.h"
#include "model/train/device_optimizer.h"
#include "model/train/optimizer_factory.h"
#include "offload/nvme_store.h"
#include "runtime/align.h"
#include "tests/model/tiled_training.h"

namespace strata::model::world_plan_test {
namespace {

// A small LLaMA (untied: one gradient release per chunk).
ModelConfig tiny_llama() { return tiled_training::small_model(Arch::llama, "world", 512, 6, 192); }

TrainOptions placed(Tier weights, Tier optimizer, Tier grads, uint64_t grad_accum) {
  TrainOptions o;
  o.dtype = DType::bf16;
  o.weight_home = weights;
  o.optimizer_home = optimizer;
  o.grad_home = grads;
  o.micro_batch = 2;
  o.seq = 32;
  o.grad_accum = grad_accum;
  o.resident_layers = 0;
  o.step_schedule = StepSchedule::micro_batch_major;
  o.lr_schedule = LrScheduleOptions{.peak_lr = 1e-3, .decay = LrDecay::constant};
  return o;
}

World world(uint32_t ranks, uint32_t nodes) { return World{.ranks = ranks, .nodes = nodes}; }

std::vector<uint64_t> chunk_sizes(const ModelConfig& c, size_t element_bytes) {
  std::vector<uint64_t> out;
  const ParamLayout layout = build_param_layout(c, element_bytes).value();  // outlives the loop
  for (const ChunkSpec& s : layout.chunks) out.push_back(s.bytes);
  return out;
}

TEST(WorldPlanTest, ShardsDivideTheHomesByTheRanks) {
  const ModelConfig c = tiny_llama();
  const TrainOptions o = placed(Tier::cpu, Tier::cpu, Tier::cpu, 4);
  const PlanBytes one = plan_bytes(c, rank_options(o, world(4, 1)));  // one rank of the same micro-batches
  const PlanBytes four = plan_bytes(c, o, world(4, 1));
  // The pinned weight homes: each chunk's quarter, rounded up to the pool's 4 KiB.
  uint64_t shards = 0;
  for (uint64_t b : chunk_sizes(c, 2)) shards += round_up((b + 3) / 4, kHostPage);
  ASSERT_GT(shards, 0u);
  EXPECT_EQ(four.at(Tier::cpu, PlanState::weights), shards);
  EXPECT_LT(four.at(Tier::cpu, PlanState::weights), one.at(Tier::cpu, PlanState::weights));
  // fp32 masters, moments and gradient sums: a quarter each, give or take the per-chunk rounding.
  for (PlanState s : {PlanState::masters, PlanState::moments, PlanState::gradients}) {
    const uint64_t whole = one.at(Tier::cpu, s), rank = four.at(Tier::cpu, s);
    EXPECT_GE(rank, whole / 4) << plan_state_name(s);
    EXPECT_LE(rank, whole / 4 + 16 * kHostPage * chunk_sizes(c, 2).size()) << plan_state_name(s);
  }
  // The device's working set is whole: the same slots and activations as one rank's paged run,
  // plus two fp32 buffers of the largest chunk for the reduce-scatter.
  const std::vector<uint64_t> bf16 = chunk_sizes(c, 2);
  const uint64_t largest = *std::max_element(bf16.begin(), bf16.end()) / 2 * 4;  // fp32 bytes
  EXPECT_EQ(four.at(Tier::device, PlanState::weights), one.at(Tier::device, PlanState::weights));
  EXPECT_EQ(four.at(Tier::device, PlanState::activations), one.at(Tier::device, PlanState::activations));
  EXPECT_EQ(four.at(Tier::device, PlanState::gradients),
            one.at(Tier::device, PlanState::gradients) + 2 * round_up(largest, 256));
  // On NVMe: the weight shards with the store's slack per extent; the optimizer images and
  // gradient sums under half of one rank's (a quarter, and 4 KiB per extent).
  const TrainOptions n = placed(Tier::nvme, Tier::nvme, Tier::nvme, 4);
  const PlanBytes n1 = plan_bytes(c, rank_options(n, world(4, 1))), n4 = plan_bytes(c, n, world(4, 1));
  const uint64_t unit = NvmeStoreOptions{}.stripe_unit;
  uint64_t extents = 0;
  for (uint64_t b : bf16) extents += (b + 3) / 4 + unit / 8;
  EXPECT_EQ(n4.at(Tier::nvme, PlanState::weights), extents + unit);
  for (PlanState s : {PlanState::masters, PlanState::moments, PlanState::gradients}) {
    EXPECT_GT(n4.at(Tier::nvme, s), 0u) << plan_state_name(s);
    EXPECT_LT(n4.at(Tier::nvme, s), n1.at(Tier::nvme, s) / 2) << plan_state_name(s);
  }
}

TEST(WorldPlanTest, WeightsOnTheDeviceAreShardsThereBesideWholeGatherSlots) {
  const ModelConfig c = tiny_llama();
  const TrainOptions o = placed(Tier::device, Tier::device, Tier::cpu, 8);
  const PlanBytes eight = plan_bytes(c, o, world(8, 2));
  TrainOptions paged = rank_options(o, world(8, 2));
  paged.weight_home = Tier::cpu;
  paged.optimizer_home = Tier::cpu;
  uint64_t shards = 0;
  for (uint64_t b : chunk_sizes(c, 2)) shards += round_up(round_up((b + 7) / 8, 2), 256);
  EXPECT_EQ(eight.at(Tier::device, PlanState::weights), estimate_device_bytes(c, paged).weights + shards);
  // AdamW on the device: its masters and moments are a rank's shards as DeviceOptimizer allocates
  // them (an eighth, and the buffer a chunk's updated weights are gathered through), beside the
  // gather of a checkpoint's partitioned state (make_optimizer), far under one rank's.
  const PlanBytes one = plan_bytes(c, rank_options(o, world(8, 2)));
  const uint64_t whole = one.at(Tier::device, PlanState::masters) + one.at(Tier::device, PlanState::moments);
  const uint64_t rank = eight.at(Tier::device, PlanState::masters) + eight.at(Tier::device, PlanState::moments);
  const ParamLayout layout = build_param_layout(c, dtype_size(o.dtype)).value();
  EXPECT_EQ(rank, DeviceOptimizer::device_bytes(layout, o.dtype, 8, 256) +
                      round_up(8 * weight_gather_round(layout, 8), 256));
  EXPECT_LT(rank, whole / 2);
  // Its pinned mirrors (for checkpoints) are the rank's shard too.
  const auto mirror = [](const PlanBytes& b) {
    return b.at(Tier::cpu, PlanState::masters) + b.at(Tier::cpu, PlanState::moments);
  };
  EXPECT_GT(mirror(one), 0u);
  EXPECT_LT(mirror(eight), mirror(one) / 4);
}

TEST(WorldPlanTest, TrafficIsTheGathersAndReduceScattersWorkedOutByHand) {
  const ModelConfig c = tiny_llama();
  const ParamLayout working = build_param_layout(c, 2).value(), masters = build_param_layout(c, 4).value();
  const uint64_t W = working.total_bytes(), F = masters.total_bytes();
  ASSERT_EQ(W % 4096, 0u);  // chunks are 4 KiB-padded: every figure below divides exactly
  // 4 ranks on 2 nodes (2 per node), 8 micro-batches: 2 per rank, each with a forward and a
  // backward gather of every chunk, each releasing every chunk's fp32 gradient.
  const TrainOptions o = placed(Tier::cpu, Tier::cpu, Tier::cpu, 8);
  const StepTraffic t = plan_traffic(c, o, world(4, 2));
  const uint64_t acquired = 2 * 2 * W, released = 2 * F;
  EXPECT_EQ(t.network.gathered, acquired * 3 / 4);
  EXPECT_EQ(t.network.reduced, released * 3 / 4);
  EXPECT_EQ(t.network.intra_node, acquired / 4 + released / 4);  // 1 other rank on its node of 4
  EXPECT_EQ(t.network.inter_node, acquired / 2 + released / 2);  // 2 ranks on the other node
  const uint64_t batches = 2 * 2 * 32 * 4 * 2;  // inputs and targets, int32, 2 micro-batches
  EXPECT_EQ(t.h2d, acquired / 4 + batches);      // its own shard of every gather, from pinned memory
  EXPECT_EQ(t.d2h, 2 * F / 4);                   // its fp32 shard of each micro-batch's sum
  EXPECT_EQ(t.nvme_read + t.nvme_write, 0u);
  // Weights on the GPU: no shard crosses PCIe for a gather; the CPU update uploads the shard once.
  const StepTraffic d = plan_traffic(c, placed(Tier::device, Tier::cpu, Tier::cpu, 8), world(4, 2));
  EXPECT_EQ(d.h2d, W / 4 + batches);
  EXPECT_EQ(d.network.gathered, t.network.gathered);
  // Weights on NVMe: the shard read for every gather, written once.
  const StepTraffic n = plan_traffic(c, placed(Tier::nvme, Tier::cpu, Tier::cpu, 8), world(4, 2));
  EXPECT_EQ(n.nvme_read, acquired / 4);
  EXPECT_EQ(n.nvme_write, W / 4);
  // One node: everything from the node's links.
  const StepTraffic one_node = plan_traffic(c, o, world(4, 1));
  EXPECT_EQ(one_node.network.intra_node, (acquired + released) * 3 / 4);
  EXPECT_EQ(one_node.network.inter_node, 0u);
}

TEST(WorldPlanTest, TheSlowestLinkLimitsTheStep) {
  const ModelConfig c = tiny_llama();
  const TrainOptions o = placed(Tier::device, Tier::device, Tier::cpu, 4);
  World w = world(4, 2);
  w.inter_node = 1e3;  // a very slow network
  const StepTraffic t = plan_traffic(c, o, w);
  const StepTime s = plan_step_time(c, o, PlanRates{}, w);
  EXPECT_DOUBLE_EQ(s.inter_node_s, double(t.network.inter_node) / 1e3);
  EXPECT_DOUBLE_EQ(s.intra_node_s, double(t.network.intra_node) / w.intra_node);
  EXPECT_EQ(s.bottleneck, "inter_node");
  EXPECT_DOUBLE_EQ(s.step_s, s.inter_node_s);
  // Links far faster than its compute: the step is one rank's micro-batch of compute.
  World fast_links = world(4, 2);
  fast_links.intra_node = fast_links.inter_node = 1e18;
  const StepTime fast = plan_step_time(c, o, PlanRates{}, fast_links);
  EXPECT_EQ(fast.bottleneck, "compute");
  EXPECT_DOUBLE_EQ(fast.compute_s, plan_step_time(c, rank_options(o, fast_links), PlanRates{}).compute_s);
  EXPECT_DOUBLE_EQ(fast.compute_s * 4, plan_step_time(c, o, PlanRates{}).compute_s);  // a quarter of the tokens
}

TEST(WorldPlanTest, AWorldThatDoesNotDivideIsRefusedSayingWhatToPass) {
  const Status uneven = check_world(world(16, 3));
  ASSERT_FALSE(uneven.is_ok());
  EXPECT_NE(uneven.message().find("--ranks 18 (6 per node)"), std::string::npos) << uneven.message();
  EXPECT_NE(check_world(world(2, 4)).message().find("--nodes 2 or fewer"), std::string::npos);
  EXPECT_FALSE(check_world(world(0, 1)).is_ok());
  World slow = world(2, 1);
  slow.intra_node = 0;
  EXPECT_NE(check_world(slow).message().find("--rate-intra-node"), std::string::npos);
  // Through the planner: the budgets' check and the batch's.
  Hardware h{.gpu_bytes = 1ull << 30, .cpu_bytes = 1ull << 30, .world = world(16, 3)};
  const ModelConfig c = tiny_llama();
  EXPECT_EQ(make_plan(c, placed(Tier::device, Tier::device, Tier::cpu, 16), h, {}).status().code(),
            Code::invalid_argument);
  h.world = world(4, 2);
  const StatusOr<Plan> odd = make_plan(c, placed(Tier::device, Tier::device, Tier::cpu, 6), h, {});
  ASSERT_FALSE(odd.is_ok());
  EXPECT_NE(odd.status().message().find("--grad-accum 8 (2 per rank)"), std::string::npos) << odd.status().message();
  EXPECT_TRUE(make_plan(c, placed(Tier::device, Tier::device, Tier::cpu, 8), h, {}).is_ok());
}

// One rank's plan is today's: tests/tools/plan_cli_test.cc compares `strata plan` with and
// without --ranks 1 --nodes 1, and the planner's own tests run unchanged.
TEST(WorldPlanTest, TheSearchAcrossRanksPlansARanksShare) {
  const ModelConfig c = tiny_llama();
  const TrainOptions o = placed(Tier::nvme, Tier::nvme, Tier::nvme, 3);
  EXPECT_EQ(plan_traffic(c, o, world(1, 1)).network.gathered, 0u);
  const ParamLayout masters = build_param_layout(c, 4).value();
  EXPECT_EQ(sharded(optimizer_state_options(masters, o), 1).fp32_elements,
            optimizer_state_options(masters, o).fp32_elements);
  // The search across 2 ranks on one node keeps no layer resident and reports a rank's bytes.
  const Hardware h{.gpu_bytes = 64ull << 20, .cpu_bytes = 1ull << 30, .nvme_bytes = 1ull << 30,
                   .world = world(2, 1)};
  const Plan p = make_plan(c, placed(Tier::cpu, Tier::cpu, Tier::cpu, 2), h, {.weights = true}).value();
  EXPECT_EQ(p.chosen.options.resident_layers, 0);
  EXPECT_EQ(p.chosen.bytes.bytes, plan_bytes(c, p.chosen.options, h.world).bytes);
}

TEST(WorldPlanTest, WhatTrainRunsAcrossRanksTodayIsOneLine) {
  const TrainAcrossRanks resident = train_across_ranks_today(placed(Tier::device, Tier::device, Tier::cpu, 2));
  // 8-bit moments with either optimizer: the device's placement reads as fp32's.
  TrainOptions q8 = placed(Tier::device, Tier::device, Tier::cpu, 2);
  q8.adam_states = AdamStates::q8;
  EXPECT_EQ(train_across_ranks_today(q8).verdict, resident.verdict);
  EXPECT_NE(resident.text.find("fp32 or 8-bit moments with either"), std::string::npos);
  EXPECT_NE(resident.verdict.find("but the whole weights on every GPU"), std::string::npos);
  EXPECT_NE(train_across_ranks_today(placed(Tier::cpu, Tier::cpu, Tier::cpu, 2)).verdict.find("--zero-stage 3"),
            std::string::npos);
}

}  // namespace
}  // namespace strata::model::world_plan_test
