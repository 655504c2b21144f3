// Planner: the memory fit of a training run before anything is allocated. The bytes of every state
// (working weights, gradients, fp32 masters, Adam moments, activations, staging buffers) on every
// tier (the device arena, pinned CPU memory, NVMe), the placement chosen within a machine's budgets,
// a simple overlapped step-time model, and, when nothing fits, what would (bytes missing per tier,
// 8-bit moments, checkpointing, a smaller micro-batch). Every size comes from the functions the
// allocators use (placement.h, the offload layers' *_bytes), so a prediction is what `strata train`
// allocates. Pure: no I/O and no detection of the machine (tools/strata/cmd_plan.cc does that).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/net/model_config.h"
#include "model/plan/world.h"
#include "model/train/train_options.h"
#include "offload/tier.h"
#include "runtime/status.h"

namespace strata::model {

// The plan's tiers are offload/tier.h's; its tables and JSON call the device "gpu" (a budget of the
// machine, --gpu-mem), the rest by tier_name.
std::string_view plan_tier_name(Tier tier);  // "gpu", "cpu", "nvme"

// What the bytes hold. masters: fp32 master weights; moments: Adam m and v (fp32, or 8-bit codes
// and their block scales); staging: buffers a state streams through when its home is a slower
// tier (weight update and NVMe staging, gradient spill and D2H buffers, optimizer staging);
// other: the batch buffers and the loss results.
enum class PlanState : uint8_t { weights, gradients, masters, moments, activations, staging, other };
inline constexpr size_t kPlanStates = 7;
std::string_view plan_state_name(PlanState state);  // "weights", "gradients", ..., "other"

// Bytes by tier and state. gpu: the arena blocks estimate_device_bytes predicts (what --gpu-mem
// bounds); cpu: the pinned pool's blocks (what --cpu-mem bounds), each rounded to the pool's 4 KiB;
// nvme: the NvmeStore reservation (nvme_reservation).
struct PlanBytes {
  std::array<std::array<uint64_t, kPlanStates>, kTiers> bytes{};
  uint64_t& at(Tier t, PlanState s) { return bytes[size_t(t)][size_t(s)]; }
  uint64_t at(Tier t, PlanState s) const { return bytes[size_t(t)][size_t(s)]; }
  uint64_t tier(Tier t) const;  // the sum over states
};

// The NvmeStore capacity `strata train` asks for (model/train/train_offload.cc), by what it holds:
// every weight chunk's extent with a slack of 1/8 stripe unit each plus one stripe unit (nvme
// weights), every optimizer state image and every fp32 gradient sum with 4 KiB each for a drive's
// larger alignment (optimizer or gradients on nvme). 0 for what is not on NVMe.
struct NvmeReservation {
  uint64_t weights = 0, optimizer = 0, gradients = 0;
  uint64_t total() const { return weights + optimizer + gradients; }
};
// ranks > 1: a rank's, its shards of every chunk (world.h's sharded options).
NvmeReservation nvme_reservation(const ModelConfig& config, const TrainOptions& options, uint64_t stripe_unit,
                                 uint32_t ranks = 1);
// A training run's rank `rank` of options.ranks (ZeRO-2, or 3 with options.zero_stage): exactly what
// its NVMe store holds -- its padded weight shards (ZeRO-3; ZeRO-2 pages a whole copy), its pieces of
// the optimizer state (rank_state_pieces) and its padded gradient shards (gradient_shard_options).
// options.ranks <= 1: nvme_reservation.
NvmeReservation run_nvme_reservation(const ModelConfig& config, const TrainOptions& options, uint64_t stripe_unit,
                                     int rank);

// Bytes of every state on every tier for one run (options' placement, shape and precision). When
// options.evaluates(), a second batch ring for the held-out data (strata train's validation loader).
// A world of N > 1 ranks (ZeRO-3): one rank's -- the run of its grad_accum / N micro-batches (the
// options' grad_accum is the step's over all ranks) with every chunk's homes (working weights,
// gradient sums, masters, moments, on whichever tier) divided by N, rounded up, and the device's
// working set whole: the slots a paged run takes (a gathered chunk is whole; no layer stays
// resident), the gradient slots, two fp32 buffers of the largest chunk for the reduce-scatter (the
// widened release sent, its N shards received), the activations and batches.
PlanBytes plan_bytes(const ModelConfig& config, const TrainOptions& options, const World& world = {});

// The options of one rank's share of a run across `world`: grad_accum / N micro-batches, and (N > 1)
// no resident layers; `options` itself for one rank.
TrainOptions rank_options(const TrainOptions& options, const World& world);

// Rates of the step-time model. Defaults describe a workstation (one PCIe 4.0 x16 GPU of about
// 100 dense 16-bit TFLOP/s achieved, one PCIe 4.0 NVMe drive, an AVX-512 CPU): assumed, not measured.
struct PlanRates {
  double flops = 0;           // device FLOP/s at the run's precision; 0: default_flops(dtype)
  double pcie = 25e9;         // bytes/s host <-> device, each direction (the copy streams overlap)
  double nvme_read = 6e9;     // bytes/s, all NVMe paths together
  double nvme_write = 4e9;    // bytes/s, all NVMe paths together
  double adam = 1e9;          // parameters/s of the CPU AdamW (every thread)
  // The device is this machine's CPU (the CPU backend): the compute, the host<->"device" copies,
  // the CPU AdamW and the checksums of the NVMe bytes run on the same cores, so their times add.
  bool shared_cores = false;
  double crc = 5e9;  // bytes/s of CRC-32C on one core (NvmeStore checksums every byte it writes and reads)
};
double default_flops(DType dtype);  // 100e12 for bf16/fp16, 25e12 for fp32

// Bytes a step moves (grad_accum micro-batches and one update). h2d: paged weights fetched for the
// forward and the backward of every micro-batch (2 x weights x K), resident weights uploaded once
// after a CPU update, the batches; d2h: each micro-batch's gradients to a CPU optimizer. nvme:
// NVMe-homed weights read like the fetches and written once, spilled gradient sums written per
// micro-batch and read K times (K - 1 in-step, 1 by the update), optimizer images read and
// written once.
// A world of N > 1 ranks (ZeRO-3), one rank's, over its k = grad_accum / N micro-batches: each
// chunk is acquired (all-gathered) as often as a paged run of k micro-batches fetches it, from the
// rank's own shard (h2d when that home is pinned memory or NVMe) and the others' (`network`); each
// micro-batch's gradient of every chunk, widened to fp32 (offload/device_grads.cc widens before the
// exchange), is reduce-scattered into its owners; a CPU optimizer takes the rank's fp32 shard of
// each micro-batch's sum d2h and writes its updated weight shard back (h2d with the weights on the
// GPU); NVMe moves the rank's shards as one rank's run moves the whole.
struct StepTraffic {
  uint64_t h2d = 0, d2h = 0, nvme_read = 0, nvme_write = 0;
  NetworkTraffic network;  // 0 for one rank
};
StepTraffic plan_traffic(const ModelConfig& config, const TrainOptions& options, const World& world = {});

// The step-time model. compute = model FLOPs (flops.h; x 4/3 with activation checkpointing, which
// recomputes every forward) / flops; pcie = max(h2d, d2h) / pcie; nvme = read / nvme_read +
// write / nvme_write (one set of drives for both); adam = parameters / adam with the optimizer on
// the CPU, else 0. forward = the first micro-batch's forward: compute / grad_accum x 1/3 (the
// backward is twice the forward), x 1/4 with checkpointing (the backward also recomputes it).
// On a GPU the transfers overlap the compute (prefetch, write-behind): step = max(compute path,
// pcie, nvme). The compute path: with overlap_optimizer the previous step's update runs chunk by
// chunk ahead of the first forward, which waits for each chunk's update (the clipped update needs
// the whole backward's norm, so it cannot start earlier): max(forward, adam) + (compute -
// forward). Without overlap_optimizer the update runs after the step's transfers too: step =
// max(compute, pcie, nvme) + adam. With shared_cores (the CPU backend) the compute, the copies,
// AdamW and crc = NVMe bytes / crc are the same cores' work, and the NVMe time adds to them too:
// the CPU-backend runs of bench/NOTES.md measure it so (a read is issued when a staging buffer is
// free, which waits for the compute): step = compute + pcie + adam + crc + nvme. bottleneck: the
// largest part.
// A world of N > 1 ranks: one rank's step (its k micro-batches' compute; pcie per GPU, each GPU its
// own link), the node's NVMe and CPU AdamW shared by its ranks (nvme and adam x ranks per node),
// and the links: intra_node = network.intra_node / world.intra_node, inter_node likewise. The
// gathers are prefetched like transfers and the reduce-scatters trail the backward, so on a GPU
// they overlap the compute as pcie does: step = max(compute path, pcie, nvme, intra_node,
// inter_node); with shared_cores they add.
struct StepTime {
  double compute_s = 0, pcie_s = 0, nvme_s = 0, adam_s = 0;
  double crc_s = 0;      // shared_cores only: the CRC-32C of every NVMe byte
  double forward_s = 0;  // the part of compute_s the overlapped update can hide under
  double intra_node_s = 0, inter_node_s = 0;  // 0 for one rank
  double step_s = 0;
  // "compute", "pcie", "nvme", "cpu_adam", "crc32c", "intra_node" or "inter_node"
  std::string_view bottleneck = "compute";
};
StepTime plan_step_time(const ModelConfig& config, const TrainOptions& options, const PlanRates& rates,
                        const World& world = {});

// The machine planned for: budgets in bytes and rates.
struct Hardware {
  uint64_t gpu_bytes = 0;   // the device arena (--gpu-mem)
  uint64_t cpu_bytes = 0;   // pinned host memory (--cpu-mem)
  // cpu_bytes is a budget the user gave (--cpu-mem), which auto sizes may fill (the read cache of
  // NVMe-homed weights); false: it is what the machine has free, which they leave to others.
  bool cpu_bytes_given = true;
  uint64_t nvme_bytes = 0;  // NVMe space for swap files, all paths together; 0: no NVMe
  PlanRates rates;
  // The ranks and their links. N > 1: every budget above is one rank's (a GPU's; the node's pinned
  // memory and NVMe divided by its ranks), and so is every byte the plan gives.
  World world;
};
// invalid_argument naming the budget or rate: a 0 GPU or CPU budget, a rate <= 0 or not finite;
// check_world's.
Status check_hardware(const Hardware& hardware);

// The choices the user made (a flag, variable or file key); the planner makes the others.
struct PlanFixed {
  bool weights = false;        // offload_param
  bool optimizer = false;      // optimizer_device / offload_optimizer
  bool gradients = false;      // offload_grad
  bool checkpointing = false;  // activation_checkpointing
};

// One placement evaluated: the options a run would take, its bytes, traffic and time, and the
// bytes it needs beyond each budget (0: within).
struct PlanCandidate {
  TrainOptions options;
  ModelConfig model;  // the model as the run chunks it: the tiles it takes (with_tiling, tiling.h)
  PlanBytes bytes;
  StepTraffic traffic;
  StepTime time;
  std::array<uint64_t, kTiers> missing{};
  bool fits() const { return missing[0] == 0 && missing[1] == 0 && missing[2] == 0; }
};
// With the vocabulary and MLP tiles the placement gives the run (with_tiling, tiling.h, on
// hardware.gpu_bytes), as `strata train` resolves them: auto tiles a paged run only when its
// untiled device working set is over hardware.gpu_bytes, the fewest tiles that fit.
PlanCandidate evaluate_placement(const ModelConfig& config, const TrainOptions& options, const Hardware& hardware);
// The same for `tiled`, a model whose vocab_tile and mlp_tiles are already the run's.
PlanCandidate evaluate_tiled(const ModelConfig& tiled, const TrainOptions& options, const Hardware& hardware);

// Every placement of the unfixed choices: weights on gpu / cpu / nvme x optimizer on the device
// (resident weights, fp32 moments) / cpu / nvme x gradients cpu / nvme, each with activation
// checkpointing off and on; fixed choices keep base's value.
std::vector<TrainOptions> plan_placements(const TrainOptions& base, const PlanFixed& fixed);
// The read cache (options.param_cache, bytes) a run of NVMe-homed weights takes on `hardware`:
// options.param_cache when given (or the weights are not on NVMe); auto (-1): the whole buffers
// (tier_cache_chunks) that fit what the run's other pinned memory leaves of a given cpu budget, less
// a reserve of 1/64 of it; 0 when the budget was not given (hardware.cpu_bytes_given) or across
// ranks.
int64_t param_cache_for(const ModelConfig& config, const TrainOptions& options, const Hardware& hardware);
// The parameters a CPU optimizer updates in a run of `config` with `options`: every parameter,
// less those of a split update's resident layers (device_update_mask).
uint64_t cpu_updated_parameters(const ModelConfig& config, const TrainOptions& options);

// A change that would make (or help) a plan fit. `change`: the flags, each within its flag's range;
// `effect`: what it gives, in numbers; `fits`: the plan fits with it, predicted to take `step_s`.
struct PlanSuggestion {
  std::string change;
  std::string effect;
  bool fits = false;
  double step_s = 0;
};

struct Plan {
  ModelConfig config;
  uint64_t params = 0;
  Hardware hardware;
  // The fastest placement that fits (ties: the one keeping weights, then gradients, then optimizer
  // state on the fastest tiers, then checkpointing off). None fits: the one closest to fitting (the
  // fewest bytes missing on the GPU, then the CPU, then NVMe: the cheapest tier to add).
  PlanCandidate chosen;
  bool fits = false;
  // Empty when it fits. Else: per tier, the budget some placement fits; then the changes that fit
  // (tiles, 8-bit moments, checkpointing, a smaller micro-batch), fastest predicted step first,
  // then those that only help; then all of them together when none fits alone.
  std::vector<PlanSuggestion> suggestions;
  // A plan that fits only tiled (auto tiles): the untiled ways that fit too, each with its step
  // time -- the best untiled placement (checkpointing, where it is not fixed, among its choices)
  // and a smaller micro-batch of the same tokens -- so the report weighs tiling against them. The
  // search itself weighs tiling against checkpointing; the batch shape it never changes (a run's
  // checkpoints and data order are the user's shape's), so a faster smaller micro-batch is shown
  // here, not chosen.
  std::vector<PlanSuggestion> untiled_alternatives;
};

// invalid_argument: check_hardware's, check_tiling's, a seq longer than the model's max_seq,
// micro_batch, seq or grad_accum of 0, check_world_batch's.
StatusOr<Plan> make_plan(const ModelConfig& config, const TrainOptions& base, const Hardware& hardware,
                         const PlanFixed& fixed);

// "weights nvme, optimizer nvme, gradients nvme, activation checkpointing on".
std::string placement_summary(const TrainOptions& options);
// placement_summary, and when the candidate is tiled its tiles and their flags: "..., activation
// checkpointing off, every layer's MLP in 3 tiles per weight (--mlp-tiles 3)".
std::string candidate_summary(const PlanCandidate& candidate);

// What would make the device working set of a run of `config` (tiled as the run is) with
// `options`' placement fit `hardware.gpu_bytes`, for `strata train`'s refusal of a placement the
// user gave: the tiling with the fewest tiles that fits (or the finest, when none does: the tiled
// minimum), --activation-checkpointing, a smaller micro-batch of the same tokens, paged weights
// (resident ones), all of these together, and the --gpu-mem the run needs as it is; each with the
// device bytes it needs and its predicted step time, the ones that fit first, fastest first.
std::vector<PlanSuggestion> device_suggestions(const ModelConfig& config, const TrainOptions& options,
                                               const Hardware& hardware);
// The placement's flags for `strata train`: "--offload-param nvme --offload-optimizer nvme ...".
std::string placement_flags(const TrainOptions& options);

}  // namespace strata::model
