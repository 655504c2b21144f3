// The world a plan is for: N ranks on M nodes and the links between them (the GPUs of a node over
// NVLink, the nodes over InfiniBand/RoCE), and a rank's share of a run under ZeRO-3 -- each rank
// homes 1/N of every chunk (working weights, fp32 master, moments, fp32 gradient sums) in its own
// tiers, gathers a chunk's N shards into a device slot to use it and reduces each gradient into
// the owners' shards. Pure arithmetic: the planner (planner.h) plans one rank's share with it. Not
// the Communicator (runtime/communicator.h) and not what `strata train` builds today
// (train_across_ranks_today says that).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/train/train_options.h"
#include "offload/gradient_offloader.h"
#include "offload/optimizer_pipeline.h"
#include "offload/tier_manager.h"
#include "runtime/status.h"

namespace strata::model {

// Rates are bytes/s per direction per GPU (a rank), the way the links are sold per GPU.
//  - intra_node: H100 SXM's NVLink 4, 18 links x 25 GB/s = 450 GB/s each way (NVIDIA quotes 900 GB/s
//    bidirectional per GPU: the H100 datasheet; a p2p test measures about 380 GB/s, NVIDIA/nccl#1264).
//  - inter_node: one 400 Gb/s InfiniBand/RoCE NIC per GPU (a DGX H100's 8 ConnectX-7) = 50 GB/s.
// A PCIe-only box: intra_node at its PCIe figure (e.g. 25e9); the CPU backend: the rates of the
// transport MPI uses.
struct World {
  uint32_t ranks = 1;  // N: GPUs (or CPU-backend processes) in the run
  uint32_t nodes = 1;  // M: machines; ranks / nodes on each
  double intra_node = 450e9;
  double inter_node = 50e9;
  uint32_t ranks_per_node() const { return nodes == 0 ? 0 : ranks / nodes; }
  bool single() const { return ranks == 1; }
};

// invalid_argument naming the flag: ranks or nodes of 0, more nodes than ranks, ranks not a
// multiple of nodes (what to pass instead), a rate <= 0 or not finite.
Status check_world(const World& world);
// invalid_argument unless grad_accum (the step's micro-batches over all ranks; micro-batch i runs
// on rank i mod N) is a multiple of the ranks.
Status check_world_batch(const World& world, uint64_t grad_accum);

// ===== What `strata train` runs across ranks today: update HERE as training grows. =====
// `text`: the one line every plan prints; `verdict`: what that means for the placement planned.
struct TrainAcrossRanks {
  std::string_view text;
  std::string_view verdict;
};
TrainAcrossRanks train_across_ranks_today(const TrainOptions& placement);

// A rank's shard of `bytes`: ceil(bytes / ranks), rounded up to `unit` (an element, a page).
uint64_t shard_bytes(uint64_t bytes, uint32_t ranks, uint64_t unit = 1);

// The allocators' options for a rank's shards: every chunk's (or piece's) size divided by the ranks,
// rounded up (tier manager: to 4 KiB; gradient offloader: to an element of its format; optimizer:
// elements and block scales). ranks 1 returns them unchanged.
TierManagerOptions sharded(TierManagerOptions options, uint32_t ranks);
GradientOffloaderOptions sharded(GradientOffloaderOptions options, uint32_t ranks);
OptimizerPipelineOptions sharded(OptimizerPipelineOptions options, uint32_t ranks);

// Bytes a rank receives per step from the other ranks (it sends as many: the links are full duplex,
// so this is each direction's load). The flat view over all N ranks: a collective on a chunk of C
// bytes brings a rank (N - 1)/N of it, (N/M - 1)/N from the ranks on its node and (N - N/M)/N from
// the others, as an all-to-all moves it -- the reduce-scatter as designed (each owner receives
// every rank's contribution for its ordered sum). The same total, routed by a ring or a node-aware
// all-gather, crosses the node boundary once per shard: up to N/M times fewer inter-node bytes, so
// the inter-node figure is the all-to-all's, an upper bound for the gathers.
struct NetworkTraffic {
  uint64_t gathered = 0;  // the all-gathers of the chunks the forwards and backwards acquire
  uint64_t reduced = 0;   // the reduce-scatters of the widened fp32 gradients into their owners
  uint64_t intra_node = 0, inter_node = 0;  // gathered + reduced, by where it comes from
};
// `acquired`: whole-chunk bytes a rank's step acquires; `reduced_fp32`: fp32 gradient bytes it
// releases (a whole chunk's per release).
NetworkTraffic network_traffic(uint64_t acquired, uint64_t reduced_fp32, const World& world);

// "16 ranks on 2 nodes (8 per node)".
std::string world_summary(const World& world);

}  // namespace strata::model
