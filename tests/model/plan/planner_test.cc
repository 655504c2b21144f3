// The planner (model/plan/planner.h) predicts what a run allocates. Measured: small models built on the
// CPU backend exactly as `strata train` builds them (paged weights, gradient offloader, optimizer
// pipeline, NVMe store over an in-memory engine, batch rings) take exactly the device arena and
// pinned bytes the plan predicts, and fit in the NVMe reservation it predicts. A table of
// presets up to llama-70b checks the figures against the allocators' own size functions and the
// bytes per parameter of mixed-precision AdamW (2 + 4 + 4 + 8, 8-bit moments 2). And the search:
// the fastest placement that fits, within every budget; what is missing when nothing fits.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "model/data/batch_loader.h"
#include "model/net/flops.h"
#include "model/plan/placement.h"
#include "model/plan/planner.h"
#include "model/train/train_config_keys.h"
#include "model/train/trainer.h"
#include "model/net/transformer.h"
#include "offload/mem_engine.h"
#include "offload/nvme_store.h"
#include "offload/resident_weights.h"
#include "offload/split_weights.h"
#include "offload/tier_manager.h"
#include "tests/model/model_test_files.h"

namespace strata::model {
namespace {

using testing::expect_value;

// Many small layers, as the transparency tests use, at a given width.
ModelConfig small(Arch arch, int64_t dim, int64_t layers) {
  ModelConfig c;
  c.name = arch == Arch::gpt2 ? "gpt2-plan" : "llama-plan";
  c.arch = arch;
  c.vocab = 512;
  c.max_seq = 64;
  c.dim = dim;
  c.n_layer = layers;
  c.n_head = 4;
  c.n_kv_head = arch == Arch::gpt2 ? 4 : 2;
  c.ffn_hidden = arch == Arch::gpt2 ? 4 * dim : 3 * dim;
  c.tied_head = arch == Arch::gpt2;
  return c;
}

struct Case {
  std::string name;
  ModelConfig config;
  DType dtype = DType::bf16;
  AdamStates states = AdamStates::f32;
  bool checkpointing = false;
  Tier weights = Tier::device;
  Tier optimizer = Tier::cpu;
  Tier grads = Tier::cpu;
  uint64_t micro_batch = 2, seq = 32, grad_accum = 1;
  int64_t resident_layers = 0;  // paged weights: layers kept on the device
  bool split = false;            // a split update: those layers update on the device
  int64_t param_cache = -1;      // NVMe-homed weights: the read cache's bytes (-1 auto: none here)
};

TrainOptions options_of(const Case& c) {
  TrainOptions o;
  o.dtype = c.dtype;
  o.adam_states = c.states;
  o.optimizer = c.states == AdamStates::q8 ? "adamw8bit" : "adamw";
  o.activation_checkpointing = c.checkpointing;
  o.weight_home = c.weights;
  o.optimizer_home = c.optimizer;
  o.grad_home = c.grads;
  o.micro_batch = c.micro_batch;
  o.seq = c.seq;
  o.grad_accum = c.grad_accum;
  o.resident_layers = c.resident_layers;
  o.split_update = c.split;
  o.param_cache = c.param_cache;
  o.lr_schedule = LrScheduleOptions{.peak_lr = 1e-3, .decay = LrDecay::constant};
  return o;
}

struct Measured {
  uint64_t gpu = 0, cpu = 0, nvme_used = 0, nvme_capacity = 0;
};

// Builds what `strata train` builds for `o` (model/train/run_setup.cc, train_offload.cc) and reads
// what the arena, the pinned pool and the NVMe store hold once everything is allocated.
Measured build_run(const ModelConfig& config, const TrainOptions& o, const std::string& swap_dir) {
  Measured m;
  auto backend = expect_value(make_backend(BackendOptions{.kind = BackendKind::cpu, .memory_budget = 512ull << 20}));
  auto pinned = expect_value(PinnedPool::create(PinnedPoolOptions{.slab_bytes = 4ull << 20, .allow_cuda = false}));
  auto pool = expect_value(ThreadPool::create(ThreadPoolOptions{.threads = 2, .pin = false, .name = "planner test"}));
  const ParamLayout layout = build_param_layout(config, dtype_size(o.dtype)).value();
  std::unique_ptr<IoEngine> engine;
  std::unique_ptr<NvmeStore> store;
  const NvmeReservation reservation = nvme_reservation(config, o, NvmeStoreOptions{}.stripe_unit);
  if (reservation.total() > 0) {
    engine = std::make_unique<MemEngine>();
    NvmeStoreOptions so;
    so.paths = {swap_dir};
    so.capacity = reservation.total();
    so.probe = [](const std::string& path) -> StatusOr<PathInfo> {
      return PathInfo{.path = path, .free_bytes = 1ull << 40, .o_direct = true};
    };
    store = expect_value(NvmeStore::create(*engine, so));
  }
  std::unique_ptr<TierManager> tiers;
  std::unique_ptr<ResidentWeights> resident;  // the resident layers of paged weights
  std::unique_ptr<SplitWeights> split;
  if (o.weight_home != Tier::device) {
    tiers = expect_value(
        TierManager::create(*backend, *pinned, store.get(), nullptr, run_weight_options(layout, o, config.name)));
    const std::vector<bool> kept = resident_chunk_mask(layout, o.resident_layers);
    const MaskedChunks chunks = masked_chunks(layout, kept);
    if (!chunks.bytes.empty()) {
      resident = expect_value(ResidentWeights::create(*backend, *pinned, chunks.bytes, chunks.names, config.name));
      split = expect_value(SplitWeights::create(kept, *resident, *tiers));
    }
  }
  WeightSource* weights = split ? static_cast<WeightSource*>(split.get()) : tiers.get();
  const bool on_device = o.optimizer_home == Tier::device;
  auto model = expect_value(Transformer::create(*backend, config,
                                                {.batch = int64_t(o.micro_batch), .seq_len = int64_t(o.seq),
                                                 .checkpoint_layers = o.activation_checkpointing, .dtype = o.dtype,
                                                 .device_grads = on_device},
                                                {.weights = weights, .pinned = pinned.get()}));
  EXPECT_TRUE(model->init(5).is_ok());
  auto trainer = expect_value(
      Trainer::create(*backend, *model, *pinned, pool.get(), o, {.store = store.get(), .resident_part = resident.get()}));
  // The training and validation batch rings over a buffer of tokens.
  std::vector<uint32_t> tokens(4 * o.micro_batch * (o.seq + 1), 1);
  const TokenDataset data = expect_value(TokenDataset::from_memory(
      "tokens", std::as_bytes(std::span(tokens)), {.kind = TokenFileKind::raw_u32, .vocab_size = uint32_t(config.vocab)}));
  BatchLoaderOptions lo;
  lo.sampling = {.batch_size = uint32_t(o.micro_batch), .seq_len = uint32_t(o.seq)};
  auto train_loader = expect_value(BatchLoader::create(data, *pinned, lo));
  auto val_loader = expect_value(BatchLoader::create(data, *pinned, lo));
  EXPECT_TRUE(o.evaluates());
  // The device gradients' fp32 sums come at the first step (after a spread over ranks, shards).
  if (DeviceGrads* grads = model->device_grads()) EXPECT_TRUE(grads->begin_step().is_ok());
  if (o.split_update) EXPECT_TRUE(model->grad_sink()->begin_step().is_ok());  // the split's DeviceGrads too
  m.gpu = backend->memory().in_use;
  m.cpu = pinned->stats().in_use;
  if (store) {
    m.nvme_capacity = store->capacity();
    m.nvme_used = store->capacity() - store->free_bytes();
  }
  return m;
}

class PlannerMeasuredTest : public ::testing::TestWithParam<Case> {};

TEST_P(PlannerMeasuredTest, PredictsWhatTheAllocatorsTake) {
  const Case& c = GetParam();
  const TrainOptions o = options_of(c);
  const PlanBytes plan = plan_bytes(c.config, o);
  testing::TempDir swap;
  const Measured m = build_run(c.config, o, swap.path());
  const uint64_t gpu = plan.tier(Tier::device), cpu = plan.tier(Tier::cpu), nvme = plan.tier(Tier::nvme);
  // To the byte: the same size functions the allocators use.
  EXPECT_EQ(gpu, m.gpu) << "gpu: the plan against the arena's bytes in use";
  EXPECT_EQ(cpu, m.cpu) << "cpu: the plan against the pinned pool's bytes in use";
  // The reservation holds every extent the run allocated, and is what the store reserved (rounded
  // up to a stripe unit).
  EXPECT_GE(nvme, m.nvme_used) << "nvme";
  EXPECT_LE(nvme, m.nvme_capacity) << "nvme";
  EXPECT_LT(m.nvme_capacity - nvme, NvmeStoreOptions{}.stripe_unit) << "nvme";
  EXPECT_EQ(nvme > 0, m.nvme_used > 0);
}

std::vector<Case> measured_cases() {
  const ModelConfig gpt2 = small(Arch::gpt2, 64, 8), llama = small(Arch::llama, 64, 8);
  return {
      {.name = "gpt2_fp32_resident_device_optimizer", .config = gpt2, .dtype = DType::f32, .optimizer = Tier::device},
      {.name = "gpt2_bf16_resident_device_optimizer", .config = gpt2, .optimizer = Tier::device},
      {.name = "gpt2_bf16_resident_cpu_optimizer", .config = gpt2},
      {.name = "llama_fp16_checkpointed_cpu_weights", .config = llama, .dtype = DType::f16, .checkpointing = true,
       .weights = Tier::cpu},
      {.name = "llama_bf16_q8_cpu_weights_k3", .config = llama, .states = AdamStates::q8, .weights = Tier::cpu,
       .grad_accum = 3},
      {.name = "gpt2_bf16_nvme_optimizer", .config = gpt2, .optimizer = Tier::nvme},
      {.name = "llama_bf16_cpu_weights_3_layers_resident", .config = llama, .weights = Tier::cpu,
       .resident_layers = 3},
      {.name = "gpt2_bf16_nvme_weights_7_layers_resident", .config = gpt2, .checkpointing = true,
       .weights = Tier::nvme, .resident_layers = 7},
      {.name = "gpt2_bf16_q8_resident_device_optimizer", .config = gpt2, .states = AdamStates::q8,
       .optimizer = Tier::device},
      {.name = "llama_bf16_cpu_weights_3_layers_split_update", .config = llama, .weights = Tier::cpu,
       .resident_layers = 3, .split = true},
      {.name = "llama_fp16_q8_nvme_weights_4_layers_split_update", .config = llama, .dtype = DType::f16,
       .states = AdamStates::q8, .weights = Tier::nvme, .optimizer = Tier::nvme, .resident_layers = 4, .split = true},
      {.name = "gpt2_fp32_nvme_everything_5_layers_split_update", .config = gpt2, .dtype = DType::f32,
       .checkpointing = true, .weights = Tier::nvme, .optimizer = Tier::nvme, .grads = Tier::nvme,
       .resident_layers = 5, .split = true},
      {.name = "llama_bf16_q8_nvme_everything", .config = llama, .states = AdamStates::q8, .checkpointing = true,
       .weights = Tier::nvme, .optimizer = Tier::nvme, .grads = Tier::nvme},
      {.name = "gpt2_fp32_nvme_weights_spilled_grads", .config = gpt2, .dtype = DType::f32, .weights = Tier::nvme,
       .grads = Tier::nvme, .micro_batch = 4, .seq = 16},
      {.name = "llama_bf16_nvme_weights_read_cache", .config = llama, .checkpointing = true, .weights = Tier::nvme,
       .param_cache = 3 << 20},
      {.name = "gpt2_tiny_preset_bf16", .config = model_preset("gpt2-tiny").value(), .checkpointing = true,
       .weights = Tier::cpu, .optimizer = Tier::nvme, .seq = 16},
  };
}

INSTANTIATE_TEST_SUITE_P(Placements, PlannerMeasuredTest, ::testing::ValuesIn(measured_cases()),
                         [](const auto& info) { return info.param.name; });

// Presets too large to build: every figure is the allocators' own size function, and the bytes
// per parameter are mixed-precision AdamW's (fp32 moments 8, 8-bit about 2; masters 4; fp32
// gradient sums 4; 16-bit working weights 2).
struct PresetCase {
  const char* preset;
  DType dtype;
  AdamStates states;
  bool checkpointing;
  Tier weights;
  Tier optimizer;
  Tier grads;
};

class PlannerPresetTest : public ::testing::TestWithParam<PresetCase> {};

TEST_P(PlannerPresetTest, FiguresAreTheAllocatorsOwnAndThePerParameterBytes) {
  const PresetCase& p = GetParam();
  const ModelConfig config = model_preset(p.preset).value();
  Case c{.name = p.preset, .config = config, .dtype = p.dtype, .states = p.states, .checkpointing = p.checkpointing,
         .weights = p.weights, .optimizer = p.optimizer, .grads = p.grads, .micro_batch = 4, .seq = 256};
  const TrainOptions o = options_of(c);
  const PlanBytes b = plan_bytes(config, o);
  EXPECT_EQ(b.tier(Tier::device), estimate_device_bytes(config, o).total());
  EXPECT_EQ(b.tier(Tier::nvme), nvme_reservation(config, o, NvmeStoreOptions{}.stripe_unit).total());
  const double params = double(parameter_count(config));
  const auto per_param = [&](Tier t, PlanState s) { return double(b.at(t, s)) / params; };
  const Tier opt_tier = p.optimizer == Tier::nvme ? Tier::nvme : Tier::cpu;
  const double moments = p.states == AdamStates::f32 ? 8.0 : 2.0 + 8.0 / double(kernels::kAdam8bitBlock);
  EXPECT_NEAR(per_param(opt_tier, PlanState::masters), 4.0, 0.04);
  EXPECT_NEAR(per_param(opt_tier, PlanState::moments), moments, 0.04);
  if (p.grads == Tier::nvme) EXPECT_NEAR(per_param(Tier::nvme, PlanState::gradients), 4.0, 0.04);
  if (p.grads == Tier::cpu) EXPECT_NEAR(per_param(Tier::cpu, PlanState::gradients), 4.0, 0.04);
  if (p.weights == Tier::nvme)
    EXPECT_NEAR(per_param(Tier::nvme, PlanState::weights), double(dtype_size(p.dtype)), 0.04);
  if (p.weights == Tier::cpu)
    EXPECT_NEAR(per_param(Tier::cpu, PlanState::weights), double(dtype_size(p.dtype)), 0.04);
  if (p.weights == Tier::device)
    EXPECT_NEAR(per_param(Tier::device, PlanState::weights), double(dtype_size(p.dtype)), 0.04);
  // Checkpointing keeps less than half the activations on the device (the logits stay).
  TrainOptions other = o;
  other.activation_checkpointing = !o.activation_checkpointing;
  const uint64_t with = plan_bytes(config, o.activation_checkpointing ? o : other).at(Tier::device, PlanState::activations);
  const uint64_t without = plan_bytes(config, o.activation_checkpointing ? other : o).at(Tier::device, PlanState::activations);
  EXPECT_LT(2 * with, without);
}

INSTANTIATE_TEST_SUITE_P(
    Presets, PlannerPresetTest,
    ::testing::Values(PresetCase{"gpt2-124m", DType::bf16, AdamStates::f32, false, Tier::device, Tier::cpu, Tier::cpu},
                      PresetCase{"gpt2-1.5b", DType::f16, AdamStates::q8, true, Tier::cpu, Tier::cpu, Tier::cpu},
                      PresetCase{"llama-7b", DType::bf16, AdamStates::f32, true, Tier::cpu, Tier::nvme, Tier::cpu},
                      PresetCase{"llama-13b", DType::f32, AdamStates::q8, false, Tier::nvme, Tier::nvme, Tier::nvme},
                      PresetCase{"llama-70b", DType::bf16, AdamStates::f32, true, Tier::nvme, Tier::nvme, Tier::nvme},
                      PresetCase{"llama-70b", DType::bf16, AdamStates::q8, true, Tier::nvme, Tier::nvme, Tier::nvme}));

Hardware workstation(uint64_t gpu_gib, uint64_t cpu_gib, uint64_t nvme_gb) {
  return Hardware{.gpu_bytes = gpu_gib << 30, .cpu_bytes = cpu_gib << 30, .nvme_bytes = nvme_gb * 1000000000ull};
}

TrainOptions bf16_run() {
  TrainOptions o;
  o.dtype = DType::bf16;
  return o;
}

TEST(PlannerTest, ASmallModelStaysWhollyOnTheDevice) {
  const Plan p = expect_value(make_plan(model_preset("gpt2-124m").value(), bf16_run(), workstation(24, 64, 0), {}));
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.chosen.options.weight_home, Tier::device);
  EXPECT_EQ(p.chosen.options.optimizer_home, Tier::device);
  EXPECT_FALSE(p.chosen.options.activation_checkpointing);
  EXPECT_TRUE(p.suggestions.empty());
  EXPECT_EQ(p.chosen.time.bottleneck, "compute");
}

// Paged weights use the budget their working set leaves: the layers that fit stay resident, spread
// over the depth, and are neither fetched nor written to a home (issue #24: llama-13b on a 24 GiB
// card used 41% of it with every layer paged).
TEST(PlannerTest, PagedWeightsFillTheDeviceBudgetWithResidentLayers) {
  TrainOptions o = bf16_run();
  o.adam_states = AdamStates::q8;
  o.optimizer = "adamw8bit";
  o.micro_batch = 8;
  o.seq = 1024;
  const Hardware h = workstation(24, 240, 0);
  const ModelConfig config = model_preset("llama-13b").value();
  const Plan p = expect_value(make_plan(config, o, h, {}));
  ASSERT_TRUE(p.fits);
  EXPECT_EQ(p.chosen.options.weight_home, Tier::cpu);
  const int64_t k = p.chosen.options.resident_layers;
  EXPECT_GT(k, 0);
  EXPECT_LT(k, config.n_layer);
  const uint64_t gpu = p.chosen.bytes.tier(Tier::device);
  EXPECT_GE(double(gpu), 0.8 * double(h.gpu_bytes));
  EXPECT_LE(gpu, h.gpu_bytes - h.gpu_bytes / 64);
  // The most that fits: one more layer would not.
  TrainOptions more = p.chosen.options;
  more.resident_layers = k + 1;
  EXPECT_GT(estimate_device_bytes(p.chosen.model, more).total(), h.gpu_bytes - h.gpu_bytes / 64);
  // Each resident layer leaves the fetches: the forward's and the backward's, less the upload of
  // its update (none when the split update runs it on the device, as the plan picks here: the
  // CPU's update is this run's bound).
  EXPECT_TRUE(p.chosen.options.split_update);
  TrainOptions none = p.chosen.options;
  none.resident_layers = 0;
  const ParamLayout layout = build_param_layout(p.chosen.model, 2).value();
  uint64_t kept = 0;
  const std::vector<bool> mask = resident_chunk_mask(layout, k);
  for (size_t c = 0; c < mask.size(); ++c) kept += mask[c] ? layout.chunks[c].bytes : 0;
  EXPECT_EQ(plan_traffic(p.chosen.model, none).h2d - plan_traffic(p.chosen.model, p.chosen.options).h2d, 2 * kept);
  TrainOptions cpu_update = p.chosen.options;
  cpu_update.split_update = false;
  EXPECT_EQ(plan_traffic(p.chosen.model, none).h2d - plan_traffic(p.chosen.model, cpu_update).h2d, kept);
  EXPECT_NE(placement_summary(p.chosen.options).find(fmt::format("({} layers resident)", k)), std::string::npos);
  EXPECT_NE(placement_flags(p.chosen.options).find(fmt::format("--resident-layers {}", k)), std::string::npos);
}

// NVMe-homed weights fill what a given pinned budget leaves with their read cache (whole buffers of
// the largest chunk, at most one per chunk), which cuts the planned NVMe reads; a budget that is
// only the machine's free memory, or a size given, is left as it is.
TEST(PlannerTest, ALeftoverPinnedBudgetBecomesTheReadCacheOfNvmeWeights) {
  const ModelConfig config = small(Arch::llama, 256, 16);
  TrainOptions o = options_of({.config = config, .checkpointing = true, .weights = Tier::nvme});
  TrainOptions none = o;
  none.param_cache = 0;
  const TierManagerOptions wo = run_weight_options(build_param_layout(config, 2).value(), none, config.name);
  const uint64_t buffer = tier_staging_buffer_bytes(wo);
  ASSERT_GT(buffer, 0u);
  Hardware h = workstation(24, 1, 100);
  const uint64_t base = evaluate_placement(config, none, h).bytes.tier(Tier::cpu);
  h.cpu_bytes = base + 5 * buffer + (base + 5 * buffer) / 60;  // room for 5 buffers beside the 1/64 reserve
  const PlanCandidate c = evaluate_placement(config, o, h);
  EXPECT_EQ(c.options.param_cache, int64_t(5 * buffer));
  EXPECT_LE(c.bytes.tier(Tier::cpu), h.cpu_bytes);
  EXPECT_EQ(c.bytes.tier(Tier::cpu), base + 5 * buffer);
  EXPECT_TRUE(c.fits());
  const PlanCandidate uncached = evaluate_placement(config, none, h);
  EXPECT_LT(c.traffic.nvme_read, uncached.traffic.nvme_read);
  EXPECT_EQ(c.traffic.nvme_write, uncached.traffic.nvme_write);
  EXPECT_LE(c.time.step_s, uncached.time.step_s);
  EXPECT_NE(placement_flags(c.options).find("--param-cache "), std::string::npos) << placement_flags(c.options);
  EXPECT_NE(placement_summary(c.options).find("read cache"), std::string::npos);
  // A budget with room for every chunk: one buffer each, and no weight read from NVMe.
  h.cpu_bytes = 64ull << 30;
  const PlanCandidate all = evaluate_placement(config, o, h);
  EXPECT_EQ(all.options.param_cache, int64_t(wo.chunk_bytes.size() * buffer));
  EXPECT_EQ(all.traffic.nvme_read, 0u);
  // The machine's free memory is not a budget to fill; a given size is kept; not on NVMe, untouched.
  h.cpu_bytes_given = false;
  EXPECT_EQ(evaluate_placement(config, o, h).options.param_cache, 0);
  h.cpu_bytes_given = true;
  TrainOptions given = o;
  given.param_cache = int64_t(buffer);
  EXPECT_EQ(evaluate_placement(config, given, h).options.param_cache, int64_t(buffer));
  TrainOptions cpu = o;
  cpu.weight_home = Tier::cpu;
  EXPECT_EQ(evaluate_placement(config, cpu, h).options.param_cache, -1);
}

// A run bound by the CPU update moves the update of the layers that fit beside the working set to
// the device (ZeRO-Offload++'s GPU/CPU split, sized by the budget, issue #24): the CPU's share
// shrinks by their parameters, the gradients of those layers stay on the device, and no placement
// without the split is as fast.
TEST(PlannerTest, ACpuBoundUpdateMovesTheResidentLayersUpdateToTheDevice) {
  TrainOptions o = bf16_run();
  o.micro_batch = 8;
  o.seq = 1024;
  o.activation_checkpointing = true;
  const ModelConfig config = model_preset("llama-7b").value();
  Hardware h = workstation(48, 240, 0);
  h.rates = PlanRates{.flops = 400e12, .pcie = 25e9, .nvme_read = 5e9, .nvme_write = 4e9, .adam = 2e9};
  const PlanFixed checkpointing{.checkpointing = true};
  const Plan p = expect_value(make_plan(config, o, h, checkpointing));
  ASSERT_TRUE(p.fits);
  const TrainOptions& chosen = p.chosen.options;
  EXPECT_TRUE(chosen.split_update);
  EXPECT_NE(chosen.weight_home, Tier::device);
  EXPECT_GT(chosen.resident_layers, 0);
  const uint64_t on_cpu = cpu_updated_parameters(p.chosen.model, chosen);
  EXPECT_LT(on_cpu, parameter_count(config));
  EXPECT_DOUBLE_EQ(p.chosen.time.adam_s, double(on_cpu) / h.rates.adam);
  // Planned bytes are the allocators' (PredictsWhatTheAllocatorsTake builds split runs): the split
  // layers' state fills the budget.
  EXPECT_LE(p.chosen.bytes.tier(Tier::device), h.gpu_bytes);
  EXPECT_GT(p.chosen.bytes.at(Tier::device, PlanState::moments), 0u);
  // Only the paged chunks' gradients leave the device.
  const ParamLayout layout = build_param_layout(p.chosen.model, 2).value();
  const std::vector<bool> kept = resident_chunk_mask(layout, chosen.resident_layers);
  uint64_t resident = 0;
  for (size_t c = 0; c < layout.chunks.size(); ++c) resident += kept[c] ? layout.chunks[c].bytes : 0;
  EXPECT_EQ(p.chosen.traffic.d2h, (layout.total_bytes() - resident) * o.grad_accum);
  // The same search without the split (the CPU optimizer fixed) is slower.
  TrainOptions cpu = o;
  const Plan whole = expect_value(make_plan(config, cpu, h, {.optimizer = true, .checkpointing = true}));
  ASSERT_TRUE(whole.fits);
  EXPECT_FALSE(whole.chosen.options.split_update);
  EXPECT_LT(p.chosen.time.step_s, whole.chosen.time.step_s);
}

TEST(PlannerTest, ResidentLayersAreSpreadOverTheDepthAndGivenCountsKept) {
  const ModelConfig config = small(Arch::llama, 64, 12);
  const ParamLayout layout = build_param_layout(config, 2).value();
  const std::vector<bool> mask = resident_chunk_mask(layout, 5);
  std::vector<int> layers;
  for (size_t c = 0; c < mask.size(); ++c)
    if (mask[c]) {
      EXPECT_EQ(layout.chunks[c].kind, ChunkKind::layer);
      layers.push_back(layout.chunks[c].layer);
    }
  EXPECT_EQ(layers, (std::vector<int>{2, 4, 7, 9, 11}));
  const std::vector<bool> all = resident_chunk_mask(layout, 40), none = resident_chunk_mask(layout, -1);
  EXPECT_EQ(std::count(all.begin(), all.end(), true), 12);  // at most every layer
  EXPECT_EQ(std::count(none.begin(), none.end(), true), 0);  // auto, unresolved: none
  TrainOptions o = bf16_run();
  o.weight_home = Tier::cpu;
  o.resident_layers = 3;
  EXPECT_EQ(resident_layers_for(config, o, 1ull << 40), 3);  // given: kept, whatever the budget
  o.resident_layers = -1;
  EXPECT_EQ(resident_layers_for(config, o, 1ull << 40), 12);  // auto, a roomy budget: every layer
  o.weight_home = Tier::device;
  EXPECT_EQ(resident_layers_for(config, o, 1ull << 40), 0);  // resident weights: nothing to split
  // A budget under the paged working set keeps none.
  o.weight_home = Tier::cpu;
  o.resident_layers = 0;
  const uint64_t working = estimate_device_bytes(config, o).total();
  o.resident_layers = -1;
  EXPECT_EQ(resident_layers_for(config, o, working), 0);
}

TEST(PlannerTest, Llama70bFitsADescribedWorkstationWithinEveryBudget) {
  const Hardware h = workstation(24, 128, 2000);
  const Plan p = expect_value(make_plan(model_preset("llama-70b").value(), bf16_run(), h, {}));
  ASSERT_TRUE(p.fits);
  EXPECT_LE(p.chosen.bytes.tier(Tier::device), h.gpu_bytes);
  EXPECT_LE(p.chosen.bytes.tier(Tier::cpu), h.cpu_bytes);
  EXPECT_LE(p.chosen.bytes.tier(Tier::nvme), h.nvme_bytes);
  EXPECT_EQ(p.chosen.options.weight_home, Tier::nvme);
  EXPECT_EQ(p.chosen.options.optimizer_home, Tier::nvme);
  EXPECT_EQ(p.chosen.time.bottleneck, "nvme");
  EXPECT_GT(p.params, 68'000'000'000ull);
}

TEST(PlannerTest, TooLittleNvmeSaysHowManyGigabytesAreMissing) {
  const ModelConfig config = model_preset("llama-70b").value();
  const Plan p = expect_value(make_plan(config, bf16_run(), workstation(24, 128, 500), {}));
  ASSERT_FALSE(p.fits);
  EXPECT_EQ(p.chosen.missing[size_t(Tier::device)], 0u);
  EXPECT_EQ(p.chosen.missing[size_t(Tier::cpu)], 0u);
  const uint64_t missing = p.chosen.missing[size_t(Tier::nvme)];
  EXPECT_EQ(missing, p.chosen.bytes.tier(Tier::nvme) - 500'000'000'000ull);
  // With that much more it fits.
  const Plan more = expect_value(make_plan(config, bf16_run(), workstation(24, 128, 500 + (missing + 999'999'999) / 1'000'000'000), {}));
  EXPECT_TRUE(more.fits);
  bool named = false;
  for (const PlanSuggestion& s : p.suggestions)
    named |= s.change == "--nvme-path DIR" &&
             s.effect.find(fmt::format("{:.1f} GB", double(missing) / 1e9)) != std::string::npos;
  EXPECT_TRUE(named) << "no suggestion names the missing NVMe gigabytes";
}

TEST(PlannerTest, EightBitMomentsOrASmallerMicroBatchAreSuggestedWithNumbers) {
  // llama-7b's fp32 masters, moments and gradient sums (16 bytes per parameter, 108 GB) do not
  // fit 96 GiB of pinned memory and there is no NVMe; with 8-bit moments (10 bytes) they do.
  TrainOptions o = bf16_run();
  o.micro_batch = 4;
  o.seq = 512;
  const Plan p = expect_value(make_plan(model_preset("llama-7b").value(), o, workstation(24, 96, 0), {}));
  ASSERT_FALSE(p.fits);
  bool q8 = false;
  for (const PlanSuggestion& s : p.suggestions) q8 |= s.change == "--optimizer-type adamw8bit" && s.fits;
  EXPECT_TRUE(q8);
  // A micro-batch too large for the device with checkpointing fixed off: a smaller one fits.
  TrainOptions big = bf16_run();
  big.micro_batch = 64;
  big.seq = 1024;
  const Plan b = expect_value(make_plan(model_preset("gpt2-124m").value(), big, workstation(16, 64, 0),
                                        PlanFixed{.checkpointing = true}));
  ASSERT_FALSE(b.fits);
  bool smaller = false;
  for (const PlanSuggestion& s : b.suggestions) smaller |= s.change.starts_with("--micro-batch") && s.fits;
  EXPECT_TRUE(smaller);
}

// The numbers after `flag` in every suggestion's change (e.g. each "--grad-accum N").
std::vector<uint64_t> flag_values(const std::vector<PlanSuggestion>& suggestions, const std::string& flag) {
  std::vector<uint64_t> values;
  for (const PlanSuggestion& s : suggestions)
    for (size_t at = s.change.find(flag + " "); at != std::string::npos; at = s.change.find(flag + " ", at + 1))
      values.push_back(std::stoull(s.change.substr(at + flag.size() + 1)));
  return values;
}

TEST(PlannerTest, NoSuggestionGoesPastItsFlagsRange) {
  // 1024 micro-batches of 1024 sequences on 4 GiB: no change alone fits, all of them together
  // do, in micro-batches of 16 x 65536, not of 1 x 1048576 (past --grad-accum's 65536).
  TrainOptions o = bf16_run();
  o.micro_batch = 1024;
  o.grad_accum = 1024;
  o.seq = 1024;
  const ModelConfig gpt2 = model_preset("gpt2-124m").value();
  const Plan p = expect_value(make_plan(gpt2, o, workstation(4, 64, 0), PlanFixed{.checkpointing = true}));
  ASSERT_FALSE(p.fits);
  ASSERT_FALSE(p.suggestions.empty());
  EXPECT_TRUE(p.suggestions.back().change.ends_with("--activation-checkpointing --micro-batch 16 --grad-accum 65536"))
      << p.suggestions.back().change;
  EXPECT_TRUE(p.suggestions.back().fits);
  const std::vector<uint64_t> accum = flag_values(p.suggestions, "--grad-accum");
  ASSERT_FALSE(accum.empty());
  for (const uint64_t k : accum) EXPECT_LE(k, uint64_t(kMaxGradAccum));
  for (const uint64_t b : flag_values(p.suggestions, "--micro-batch")) EXPECT_GE(b, 16u);
  // The device-only suggestions of a given placement too.
  const std::vector<PlanSuggestion> device = device_suggestions(gpt2, o, workstation(4, 64, 0));
  ASSERT_FALSE(flag_values(device, "--grad-accum").empty());
  for (const uint64_t k : flag_values(device, "--grad-accum")) EXPECT_LE(k, uint64_t(kMaxGradAccum));
}

TEST(PlannerTest, FixedChoicesAreKept) {
  TrainOptions o = bf16_run();
  o.weight_home = Tier::cpu;
  const Plan p = expect_value(make_plan(model_preset("gpt2-124m").value(), o, workstation(24, 64, 0), {.weights = true}));
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.chosen.options.weight_home, Tier::cpu);
  for (const TrainOptions& c : plan_placements(o, {.weights = true})) EXPECT_EQ(c.weight_home, Tier::cpu);
}

TEST(PlannerTest, StepTimeIsTheLargestPartAndNamesIt) {
  const ModelConfig config = model_preset("gpt2-124m").value();
  TrainOptions o = bf16_run();
  o.weight_home = Tier::cpu;
  o.overlap_optimizer = true;
  const PlanRates slow_pcie{.flops = 1e15, .pcie = 1e6};
  const StepTime t = plan_step_time(config, o, slow_pcie);
  EXPECT_EQ(t.bottleneck, "pcie");
  EXPECT_DOUBLE_EQ(t.step_s, t.pcie_s);
  const StepTraffic x = plan_traffic(config, o);
  EXPECT_DOUBLE_EQ(t.pcie_s, double(std::max(x.h2d, x.d2h)) / 1e6);
  o.overlap_optimizer = false;
  const StepTime serial = plan_step_time(config, o, slow_pcie);
  EXPECT_DOUBLE_EQ(serial.step_s, serial.pcie_s + serial.adam_s);
}

// The overlapped update hides only under the first micro-batch's forward (a third of its compute,
// a quarter with checkpointing); what it takes beyond that lengthens the step.
TEST(PlannerTest, TheOverlappedUpdateHidesUnderTheFirstForwardOnly) {
  const ModelConfig config = model_preset("gpt2-124m").value();
  TrainOptions o = bf16_run();
  o.overlap_optimizer = true;
  o.grad_accum = 2;
  o.activation_checkpointing = false;
  const double flops = training_flops_per_step(config, o);
  PlanRates r{.flops = flops, .pcie = 1e15, .nvme_read = 1e15, .nvme_write = 1e15};  // compute: 1 s
  r.adam = double(parameter_count(config)) / 0.1;  // 0.1 s: under the first forward (1/2 x 1/3 s)
  StepTime t = plan_step_time(config, o, r);
  EXPECT_DOUBLE_EQ(t.compute_s, 1.0);
  EXPECT_DOUBLE_EQ(t.forward_s, 1.0 / 6.0);
  EXPECT_DOUBLE_EQ(t.step_s, 1.0);
  EXPECT_EQ(t.bottleneck, "compute");
  r.adam = double(parameter_count(config)) / 0.5;  // 0.5 s: 1/3 s longer than the forward
  t = plan_step_time(config, o, r);
  EXPECT_NEAR(t.step_s, 1.0 + 0.5 - 1.0 / 6.0, 1e-12);
  o.activation_checkpointing = true;  // compute x 4/3, the forward a quarter of it
  t = plan_step_time(config, o, r);
  EXPECT_NEAR(t.compute_s, 4.0 / 3.0, 1e-12);
  EXPECT_NEAR(t.forward_s, 4.0 / 3.0 / 2.0 / 4.0, 1e-12);
  EXPECT_NEAR(t.step_s, 4.0 / 3.0 + 0.5 - t.forward_s, 1e-12);
  o.overlap_optimizer = false;  // after the step, whole
  t = plan_step_time(config, o, r);
  EXPECT_NEAR(t.step_s, 4.0 / 3.0 + 0.5, 1e-12);
}

// On the CPU backend the compute, the copies, AdamW and the NVMe bytes' checksums share the cores,
// and the NVMe time adds to them too: the step is the sum of the parts.
TEST(PlannerTest, OnSharedCoresThePartsAdd) {
  const ModelConfig config = model_preset("gpt2-124m").value();
  TrainOptions o = bf16_run();
  o.weight_home = Tier::nvme;
  o.overlap_optimizer = true;
  const PlanRates gpu{.flops = 1e12, .pcie = 5e9, .nvme_read = 2e9, .nvme_write = 1e9, .adam = 1e8};
  PlanRates cpu = gpu;
  cpu.shared_cores = true;
  cpu.crc = 4e9;
  const StepTime g = plan_step_time(config, o, gpu), c = plan_step_time(config, o, cpu);
  const StepTraffic x = plan_traffic(config, o);
  EXPECT_DOUBLE_EQ(c.compute_s, g.compute_s);
  EXPECT_DOUBLE_EQ(g.crc_s, 0.0);
  EXPECT_DOUBLE_EQ(c.crc_s, double(x.nvme_read + x.nvme_write) / 4e9);
  EXPECT_GT(c.crc_s, 0.0);
  EXPECT_DOUBLE_EQ(c.step_s, c.compute_s + c.pcie_s + c.adam_s + c.crc_s + c.nvme_s);
  EXPECT_GT(c.step_s, g.step_s);
  cpu.nvme_read = cpu.nvme_write = 1e6;  // a slow disk: the largest part
  const StepTime slow = plan_step_time(config, o, cpu);
  EXPECT_GT(slow.nvme_s, slow.compute_s);
  EXPECT_EQ(slow.bottleneck, "nvme");
}

TEST(PlannerTest, ImpossibleBudgetsAndShapesAreRefused) {
  const ModelConfig config = model_preset("gpt2-124m").value();
  EXPECT_EQ(make_plan(config, bf16_run(), workstation(0, 64, 0), {}).status().code(), Code::invalid_argument);
  EXPECT_EQ(make_plan(config, bf16_run(), workstation(24, 0, 0), {}).status().code(), Code::invalid_argument);
  Hardware h = workstation(24, 64, 0);
  h.rates.pcie = 0;
  EXPECT_NE(make_plan(config, bf16_run(), h, {}).status().message().find("--rate-pcie"), std::string::npos);
  TrainOptions o = bf16_run();
  o.seq = 4096;
  EXPECT_NE(make_plan(config, o, workstation(24, 64, 0), {}).status().message().find("--seq 4096"), std::string::npos);
}

}  // namespace
}  // namespace strata::model
