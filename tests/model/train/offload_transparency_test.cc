// The exactness contract of Offload I (docs/ARCHITECTURE.md, "Exactness"): where the working
// weights live -- resident on the device, homed in pinned CPU memory, or on NVMe and paged through
// a few device slots, or some layers resident and the rest paged -- changes no bit of training. Tiny GPT-2 and LLaMA models (many small
// layers, so the layers dominate the bytes) train 20 steps with clipping active in fp32, bf16 and
// fp16, with 1 and 3 micro-batches; the paged runs get a device budget under a third of the
// model's weights + gradients, so chunks really are evicted and fetched again. Losses, gradient
// norms and the final fp32 masters must equal the resident run's exactly; the arena's peak stays
// under the budget; the prefetcher replays its recorded trace from the second step on. And a
// failing NVMe read (EIO, or a torn earlier write caught by the CRC) stops the step with an error
// naming the chunk, never handing bad weights to the compute.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "model/ckpt/checkpoint.h"
#include "model/plan/placement.h"
#include "model/train/device_optimizer.h"
#include "model/train/trainer.h"
#include "model/net/transformer.h"
#include "offload/fault_engine.h"
#include "offload/io_engine_factory.h"
#include "offload/nvme_store.h"
#include "offload/resident_weights.h"
#include "offload/split_weights.h"
#include "offload/tier_manager.h"
#include "tests/model/model_run.h"

namespace strata::model {
namespace {

using testing::expect_value;

std::vector<char> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

constexpr int64_t kB = 2, kT = 16;
constexpr int kSteps = 20;
constexpr int kMatrixSteps = 10;  // of them, the placement matrix's (Transparency)

ModelConfig tiny(Arch arch) {
  ModelConfig c;
  c.name = arch == Arch::gpt2 ? "gpt2-paging" : "llama-paging";
  c.arch = arch;
  c.vocab = 128;
  c.max_seq = 32;
  c.dim = 64;
  c.n_layer = 12;
  c.n_head = 4;
  c.n_kv_head = arch == Arch::gpt2 ? 4 : 2;
  c.ffn_hidden = arch == Arch::gpt2 ? 256 : 160;
  c.tied_head = arch == Arch::gpt2;
  return c;
}

// Where the weights live: resident on the device, or paged from pinned memory or NVMe.
const char* home_name(Tier h) { return h == Tier::device ? "resident" : h == Tier::cpu ? "cpu" : "nvme"; }
// Where the optimizer state lives: on the device (the backend's AdamW beside resident weights),
// in pinned host memory, or on NVMe (streamed through the OptimizerPipeline's staging buffers).
std::string opt_name(Tier h) { return std::string(tier_name(h)); }

struct Placement {
  Tier weights = Tier::device;
  Tier optimizer = Tier::cpu;
  bool grads_on_nvme = false;  // the step's fp32 gradient sums spill to NVMe (the CPU optimizer reads them back)
  bool overlap = true;         // the CPU optimizer's update runs under the next forward
  // Parameters per optimizer piece (0: the default, which no chunk of these models exceeds): a
  // small one cuts every chunk's state into pieces, many tensors among them.
  uint64_t sub_group = 0;
  // Paged weights: layers kept on the device for the whole run (resident_chunk_mask), the others
  // paged (offload/split_weights.h).
  int64_t resident_layers = 0;
  StepSchedule schedule = StepSchedule::micro_batch_major;
  // A split update (model/train/split_optimizer.h): the resident layers update on the device, the
  // paged chunks on the CPU with their state where `optimizer` says.
  bool split = false;
  uint32_t cache_chunks = 0;  // NVMe-homed weights: the pinned read cache (TierManagerOptions::cache_chunks)
};
std::string placement_name(Placement p) {
  return std::string("weights ") + home_name(p.weights) + ", optimizer " + opt_name(p.optimizer) +
         (p.grads_on_nvme ? ", gradients nvme" : "") + (p.overlap ? "" : ", no overlap") +
         (p.sub_group != 0 ? ", pieces of " + std::to_string(p.sub_group) : "") +
         (p.resident_layers != 0 ? ", " + std::to_string(p.resident_layers) + " layers resident" : "") +
         (p.split ? ", split update" : "") +
         (p.cache_chunks != 0 ? ", read cache of " + std::to_string(p.cache_chunks) : "") + ", " +
         std::string(step_schedule_name(p.schedule));
}

struct Outcome {
  std::vector<double> losses, norms, clips;
  std::vector<float> masters;  // every parameter's fp32 master, layout order
  uint64_t arena_peak = 0;
  uint64_t budget = 0;
  uint64_t kept_bytes = 0;  // the resident layers' chunks of a paged run
  uint64_t split_bytes = 0;  // a split update: the device part's gradient sums and state
  TierStats tiers;
  std::vector<TierStats> step_tiers;  // paged: the weight tiers' stats after each step
  bool layer_major = false;           // the trainer ran layer-major steps
  uint64_t injected = 0;  // faults (or counted requests) the fault engine injected
};

// Deterministic token batches: the same for every placement.
struct Batches {
  explicit Batches(uint64_t seed, int64_t vocab) : rng(seed), vocab(vocab) {}
  StatusOr<BatchView> next() {
    inputs.resize(kB * kT);
    targets.resize(kB * kT);
    // Learnable rows (each token is the previous + 3, from a random start) with some ignored targets.
    for (int64_t b = 0; b < kB; ++b) {
      const uint64_t start = rng() % uint64_t(vocab);
      for (int64_t t = 0; t < kT; ++t) {
        const int64_t i = b * kT + t;
        inputs[i] = int32_t((start + 3 * uint64_t(t)) % uint64_t(vocab));
        targets[i] = (i % 7 == 3) ? -1 : int32_t((start + 3 * uint64_t(t + 1)) % uint64_t(vocab));
      }
    }
    BatchView v;
    v.inputs = inputs.data();
    v.targets = targets.data();
    v.batch_size = kB;
    v.seq_len = kT;
    return v;
  }
  std::mt19937_64 rng;
  int64_t vocab;
  std::vector<int32_t> inputs, targets;
};

// Weights + gradients of the model at the working precision: what a resident run keeps.
uint64_t resident_param_bytes(const ModelConfig& c, DType dt) {
  const ParamLayout layout = build_param_layout(c, dtype_size(dt)).value();
  return 2 * layout.total_bytes();
}

// What a run does besides training kSteps steps: stop after `stop_after` steps (0: never) and save
// a checkpoint into `save_dir`, or save one after step `save_at` and go on, or start from the
// checkpoint in `resume_dir`.
struct RunControl {
  int stop_after = 0;
  int save_at = 0;
  std::string save_dir;
  std::string resume_dir;
};

Outcome train(const ModelConfig& config, DType dtype, uint64_t grad_accum, Placement place,
              AdamStates states = AdamStates::f32, const std::vector<FaultRule>& faults = {},
              Status* failure = nullptr, const RunControl& control = {}) {
  const Tier home = place.weights;
  Outcome out;
  const uint64_t params = resident_param_bytes(config, dtype);
  const ParamLayout layout = build_param_layout(config, dtype_size(dtype)).value();
  const std::vector<bool> kept = resident_chunk_mask(layout, place.resident_layers);
  for (size_t c = 0; c < kept.size(); ++c) out.kept_bytes += kept[c] ? layout.chunks[c].bytes : 0;
  // Paged: a third of weights + gradients (the slots and activations must fit under it), and the
  // resident layers. Layer-major adds K - 1 residual streams, d residuals, tied stashes and batch
  // buffers.
  const uint64_t layer_major_bytes =
      place.schedule != StepSchedule::layer_major
          ? 0
          : Transformer::activation_bytes(config, {.batch = kB, .seq_len = kT, .dtype = dtype,
                                                   .micro_batches = int64_t(grad_accum)}) -
                Transformer::activation_bytes(config, {.batch = kB, .seq_len = kT, .dtype = dtype}) +
                2 * (grad_accum - 1) * 256 * ((kB * kT * sizeof(int32_t) + 255) / 256);
  out.budget = home == Tier::device ? 64ull << 20 : params / 3 + out.kept_bytes + layer_major_bytes;
  if (place.split) {  // the resident layers' gradient sums and optimizer state on the device too
    const MaskedChunks chunks = masked_chunks(layout, kept);
    out.split_bytes = DeviceGrads::device_bytes(dtype, chunks.bytes, std::vector<uint32_t>(chunks.bytes.size(), 1), 1,
                                                256) +
                      DeviceOptimizer::device_bytes(layout, dtype, 1, 256, kept, states);
    out.budget += out.split_bytes;
  }
  auto backend = expect_value(make_backend(BackendOptions{.kind = BackendKind::cpu, .memory_budget = out.budget}));
  auto pinned = expect_value(PinnedPool::create(PinnedPoolOptions{.slab_bytes = 4ull << 20, .allow_cuda = false}));
  auto pool = expect_value(ThreadPool::create(ThreadPoolOptions{.threads = 2, .pin = false, .name = "transparency"}));

  // NVMe homes live in swap files on the build's disk (O_DIRECT through io_uring, else posix).
  const std::string swap_dir = std::string(STRATA_BINARY_DIR) + "/test-scratch/transparency-" + std::to_string(::getpid());
  std::unique_ptr<IoEngine> engine;
  std::unique_ptr<NvmeStore> store;
  std::unique_ptr<TierManager> tiers;
  FaultEngine* fault_engine = nullptr;
  if (home == Tier::nvme || place.optimizer == Tier::nvme || place.grads_on_nvme) {
    std::filesystem::create_directories(swap_dir);
    engine = expect_value(make_io_engine({}, {swap_dir})).engine;
    if (!faults.empty()) {
      auto wrapped = std::make_unique<FaultEngine>(std::move(engine), FaultEngineOptions{.seed = 3, .rules = faults});
      fault_engine = wrapped.get();
      engine = std::move(wrapped);
    }
    NvmeStoreOptions so;
    so.paths = {swap_dir};
    // Weights, the optimizer's images (masters + moments: 3x the fp32 weights at most) and the
    // gradient sums (fp32).
    so.capacity = 2 * layout.total_bytes() + 5 * build_param_layout(config, 4).value().total_bytes() + (8ull << 20);
    so.stripe_unit = 64 << 10;
    store = expect_value(NvmeStore::create(*engine, so));
  }
  std::unique_ptr<ResidentWeights> resident;
  std::unique_ptr<SplitWeights> split;
  if (home != Tier::device) {
    TierManagerOptions to = paged_weight_options(layout, home == Tier::cpu ? Tier::cpu : Tier::nvme,
                                                 /*layer_slots=*/2, /*prefetch_bytes=*/0, /*nvme_staging=*/2,
                                                 config.name, kept);
    to.cache_chunks = place.cache_chunks;
    tiers = expect_value(TierManager::create(*backend, *pinned, home == Tier::nvme ? store.get() : nullptr, nullptr, to));
    if (out.kept_bytes > 0) {
      const MaskedChunks chunks = masked_chunks(layout, kept);
      resident = expect_value(ResidentWeights::create(*backend, *pinned, chunks.bytes, chunks.names, config.name));
      split = expect_value(SplitWeights::create(kept, *resident, *tiers));
    }
  }
  WeightSource* weights = split ? static_cast<WeightSource*>(split.get()) : tiers.get();
  const bool on_device = place.optimizer == Tier::device;
  auto model = expect_value(Transformer::create(
      *backend, config,
      {.batch = kB,
       .seq_len = kT,
       .checkpoint_layers = true,
       .dtype = dtype,
       .micro_batches = place.schedule == StepSchedule::layer_major ? int64_t(grad_accum) : 1,
       .device_grads = on_device},
      {.weights = weights, .pinned = pinned.get()}));
  if (control.resume_dir.empty()) {
    EXPECT_TRUE(model->init(7).is_ok());
  } else {
    EXPECT_TRUE(load_checkpoint_weights(control.resume_dir, *model).is_ok());
  }
  TrainOptions o;
  o.dtype = dtype;
  o.grad_accum = grad_accum;
  o.clip_grad_norm = 0.05;  // below the norms of this problem: every step clips
  o.adam_hyper = kernels::AdamHyper{.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  o.lr_schedule = LrScheduleOptions{.peak_lr = 3e-3, .decay = LrDecay::constant};
  o.loss_scaler.initial_scale = 1024.0;
  o.adam_states = states;
  o.optimizer_home = place.optimizer;
  o.optimizer_staging = 3;
  o.grad_home = place.grads_on_nvme ? Tier::nvme : Tier::cpu;
  o.overlap_optimizer = place.overlap;
  if (place.sub_group != 0) o.sub_group_size = place.sub_group;
  o.step_schedule = place.schedule;
  if (place.split) {
    o.split_update = true;
    o.weight_home = home;
    o.resident_layers = place.resident_layers;
  }
  auto trainer = expect_value(Trainer::create(*backend, *model, *pinned, pool.get(), o,
                                              {.store = store.get(), .resident_part = resident.get()}));
  // A split with no resident layer (MLP tiles keep none whole) is the CPU optimizer.
  EXPECT_EQ(trainer->optimizer().where(), place.split && out.kept_bytes > 0 ? "split" : on_device ? "device" : "cpu");
  out.layer_major = trainer->layer_major();
  Batches batches(11, config.vocab);
  const NextBatch next = [&]() { return batches.next(); };
  int first = 0;
  if (!control.resume_dir.empty()) {
    EXPECT_TRUE(load_checkpoint_optimizer(control.resume_dir, *trainer).is_ok());
    first = int(trainer->steps_done());
    for (int s = 0; s < first * int(grad_accum); ++s) (void)batches.next();  // the data the saved run used
  }
  const int last = control.stop_after > 0 ? control.stop_after : kSteps;
  for (int s = first; s < last; ++s) {
    StatusOr<StepResult> step = trainer->step(next);
    if (failure != nullptr && !step.is_ok()) {
      *failure = step.status();
      break;
    }
    const StepResult r = expect_value(std::move(step));
    out.losses.push_back(r.loss);
    out.norms.push_back(r.grad_norm);
    out.clips.push_back(r.clip_scale);
    if (tiers) out.step_tiers.push_back(tiers->stats());
    if (control.save_at == s + 1) {
      CheckpointState saved;
      saved.step = trainer->steps_done();
      saved.preset = config.name;
      EXPECT_TRUE(save_checkpoint(control.save_dir, *model, *trainer, saved).is_ok());
    }
  }
  if (fault_engine != nullptr) out.injected = fault_engine->injected_total();
  EXPECT_TRUE(backend->synchronize_all().is_ok());
  if (!control.save_dir.empty() && control.save_at == 0) {
    CheckpointState saved;
    saved.step = trainer->steps_done();
    saved.preset = config.name;
    EXPECT_TRUE(save_checkpoint(control.save_dir, *model, *trainer, saved).is_ok());
  }
  if (failure != nullptr && !failure->is_ok()) return out;
  EXPECT_TRUE(trainer->sync_host_state().is_ok());  // the device optimizer's masters come down
  for (const ParamSpec& p : model->master_layout().params) {
    const std::vector<float> m = expect_value(trainer->master(p));
    out.masters.insert(out.masters.end(), m.begin(), m.end());
  }
  out.arena_peak = backend->memory().peak;
  if (tiers) out.tiers = tiers->stats();
  return out;
}

struct Case {
  Arch arch;
  DType dtype;
  uint64_t grad_accum;
  AdamStates states = AdamStates::f32;
};

class Transparency : public ::testing::TestWithParam<Case> {};

void expect_same_training(const Outcome& got, const Outcome& want) {
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(got.norms, want.norms);
  ASSERT_EQ(got.masters.size(), want.masters.size());
  EXPECT_EQ(0, std::memcmp(got.masters.data(), want.masters.data(), got.masters.size() * sizeof(float)))
      << "final fp32 masters differ";
}

// The whole placement matrix of one (model, precision, micro-batches, moments) against the run
// with resident weights and the optimizer state in pinned memory: weights resident / cpu / nvme
// x optimizer state device (resident weights, fp32 moments: the only combination it runs) / cpu /
// nvme, the gradient sums spilled to NVMe in two of them, the optimizer state cut into pieces of
// 1000 parameters (every tensor of a layer cut, pieces spanning tensors) in two; every
// CPU-optimizer run but the reference overlaps the update with the next forward.
TEST_P(Transparency, EveryPlacementTrainsBitIdenticallyToResident) {
  const Case k = GetParam();
  const ModelConfig config = tiny(k.arch);
  // The first kMatrixSteps steps of the kSteps schedule: every placement's paths run every step
  // (fetches, prefetches replayed, updates under the next forward, spills), so more steps add time
  // (24 cases, most of the unit stage's), not paths.
  const RunControl matrix{.stop_after = kMatrixSteps};
  // The reference: every update applied between the steps.
  const Outcome resident = train(config, k.dtype, k.grad_accum, {Tier::device, Tier::cpu, false, /*overlap=*/false},
                                 k.states, {}, nullptr, matrix);
  ASSERT_EQ(resident.losses.size(), size_t(kMatrixSteps));
  // The problem is real: the loss falls and clipping is active.
  EXPECT_LT(resident.losses.back(), resident.losses.front());
  for (double c : resident.clips) EXPECT_LT(c, 1.0);
  std::vector<Placement> placements = {{Tier::device, Tier::cpu},       {Tier::device, Tier::nvme, true},
                                       {Tier::cpu, Tier::cpu},
                                       {Tier::cpu, Tier::nvme, false, true, 1000},
                                       {Tier::nvme, Tier::cpu},
                                       {.weights = Tier::nvme, .optimizer = Tier::nvme, .grads_on_nvme = true,
                                        .cache_chunks = 3},
                                       {Tier::nvme, Tier::cpu, false, true, 0, /*resident_layers=*/5}};
  // The optimizer on the device (its mirrors in pieces), and the split update: the resident layers
  // on the device, the rest on the CPU (state on NVMe in pieces, and the sums spilled, so the CPU
  // part walks and reads a subset of every store). 8-bit moments too: the backend's pass has the
  // CPU kernels' bits.
  placements.push_back({Tier::device, Tier::device, false, true, 1000});
  placements.push_back({.weights = Tier::cpu, .optimizer = Tier::cpu, .resident_layers = 5, .split = true});
  placements.push_back({.weights = Tier::nvme, .optimizer = Tier::nvme, .grads_on_nvme = true, .sub_group = 1000,
                        .resident_layers = 3, .split = true});
  for (Placement place : placements) {
    SCOPED_TRACE(placement_name(place));
    const Outcome run = train(config, k.dtype, k.grad_accum, place, k.states, {}, nullptr, matrix);
    expect_same_training(run, resident);
    if (place.weights == Tier::device) continue;
    EXPECT_LE(run.arena_peak, run.budget);
    EXPECT_LT((run.budget - run.kept_bytes - run.split_bytes) * 3, resident_param_bytes(config, k.dtype) + 3);
    // Paging happened (more fetches than chunks) and the trace was replayed from step 2 on.
    EXPECT_GT(run.tiers.h2d_bytes, uint64_t(kMatrixSteps) * run.tiers.device_bytes);
    EXPECT_EQ(run.tiers.sequences_recorded, 1u);
    EXPECT_EQ(run.tiers.sequences_replayed, uint64_t(kMatrixSteps - 1));
    EXPECT_GT(run.tiers.prefetches, 0u);
    if (place.cache_chunks > 0) {
      EXPECT_GT(run.tiers.cache_hits, 0u) << "the read cache served nothing";
    }
  }
}

// A checkpoint saved mid-run with weights and optimizer state on NVMe (streamed out piece by
// piece) resumes into the uninterrupted run bit for bit, into NVMe placement and into resident
// (whole chunks: the format does not depend on the pieces).
TEST(NvmeCheckpoint, AMidRunCheckpointResumesBitIdentically) {
  const ModelConfig config = tiny(Arch::llama);
  const std::string dir = std::string(STRATA_BINARY_DIR) + "/test-scratch/nvme-ckpt-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  for (AdamStates states : {AdamStates::f32, AdamStates::q8}) {
    SCOPED_TRACE(adam_states_name(states));
    const Placement nvme{Tier::nvme, Tier::nvme, true, true, /*sub_group=*/1000};
    const Outcome straight = train(config, DType::bf16, 3, nvme, states);
    train(config, DType::bf16, 3, nvme, states, {}, nullptr, {.stop_after = kSteps / 2, .save_at = 0, .save_dir = dir, .resume_dir = ""});
    for (Placement into : {nvme, Placement{Tier::device, Tier::cpu}}) {
      SCOPED_TRACE(placement_name(into));
      const Outcome resumed = train(config, DType::bf16, 3, into, states, {}, nullptr,
                                    {.stop_after = 0, .save_at = 0, .save_dir = "", .resume_dir = dir});
      const std::vector<double> tail(straight.losses.begin() + kSteps / 2, straight.losses.end());
      EXPECT_EQ(resumed.losses, tail);
      ASSERT_EQ(resumed.masters.size(), straight.masters.size());
      EXPECT_EQ(0, std::memcmp(resumed.masters.data(), straight.masters.data(), resumed.masters.size() * 4));
    }
    std::filesystem::remove_all(dir);
  }
}

// A split update's checkpoint is any placement's: saved mid-run from a split run (the device
// part's state brought down into its NVMe-homed mirrors) it resumes into the uninterrupted run
// bit for bit, as a split run and as resident weights with the CPU optimizer; a resident run's
// checkpoint resumes into a split run (the mirrors carried up to the device part).
TEST(NvmeCheckpoint, ASplitUpdatesCheckpointResumesBitIdentically) {
  const ModelConfig config = tiny(Arch::llama);
  const std::string dir = std::string(STRATA_BINARY_DIR) + "/test-scratch/split-ckpt-" + std::to_string(::getpid());
  const Placement split{.weights = Tier::nvme, .optimizer = Tier::nvme, .resident_layers = 3, .split = true};
  const Placement resident{Tier::device, Tier::cpu};
  const Outcome straight = train(config, DType::bf16, 1, resident);
  const std::vector<double> tail(straight.losses.begin() + kSteps / 2, straight.losses.end());
  for (const Placement& from : {split, resident}) {
    std::filesystem::remove_all(dir);
    train(config, DType::bf16, 1, from, AdamStates::f32, {}, nullptr,
          {.stop_after = kSteps / 2, .save_at = 0, .save_dir = dir, .resume_dir = ""});
    for (const Placement& into : {split, resident}) {
      if (!from.split && !into.split) continue;
      SCOPED_TRACE(placement_name(from) + " into " + placement_name(into));
      const Outcome resumed = train(config, DType::bf16, 1, into, AdamStates::f32, {}, nullptr,
                                    {.stop_after = 0, .save_at = 0, .save_dir = "", .resume_dir = dir});
      EXPECT_EQ(resumed.losses, tail);
      ASSERT_EQ(resumed.masters.size(), straight.masters.size());
      EXPECT_EQ(0, std::memcmp(resumed.masters.data(), straight.masters.data(), resumed.masters.size() * 4));
    }
  }
  std::filesystem::remove_all(dir);
}

// The checkpoint files are the same bytes whether the optimizer state is kept in pieces or whole
// chunks: GPT-2's transposed weights cut into pieces are gathered before their HF layout is
// written, the moments of each piece land at their offsets.
TEST(NvmeCheckpoint, PiecesWriteTheSameFilesAsWholeChunks) {
  const ModelConfig config = tiny(Arch::gpt2);
  const std::string base = std::string(STRATA_BINARY_DIR) + "/test-scratch/pieces-ckpt-" + std::to_string(::getpid());
  for (AdamStates states : {AdamStates::f32, AdamStates::q8}) {
    SCOPED_TRACE(adam_states_name(states));
    std::filesystem::remove_all(base);
    for (uint64_t sub_group : {uint64_t(0), uint64_t(1000)})
      train(config, DType::bf16, 1, {Tier::device, Tier::nvme, false, true, sub_group}, states, {}, nullptr,
            {.stop_after = 3, .save_at = 0, .save_dir = base + "/" + std::to_string(sub_group), .resume_dir = ""});
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      SCOPED_TRACE(file);
      const auto whole = read_file_bytes(base + "/0/" + file), pieces = read_file_bytes(base + "/1000/" + file);
      ASSERT_FALSE(whole.empty());
      EXPECT_TRUE(whole == pieces);
    }
  }
  std::filesystem::remove_all(base);
}

// Faults on the optimizer state's NVMe I/O mid-run (weights resident, so every request is the
// optimizer's): a persistent EIO or short read, a CRC mismatch after a torn write, and ENOSPC on a
// write stop the run with an error naming the chunk (and the swap file for read errors); the steps
// before it trained exactly as the clean run, and the checkpoint saved before the fault verifies
// and resumes into the clean run's losses bit for bit.
TEST(OptimizerStateFaults, AFailingStateTransferStopsTheRunAndTheLastCheckpointResumes) {
  const ModelConfig config = tiny(Arch::llama);
  const Placement place{Tier::device, Tier::nvme, false, /*overlap=*/false};
  // Count the requests of a clean run: a 0 us latency rule matches (and counts) every read, then
  // every write.
  const FaultRule count_reads{.kind = FaultKind::latency, .op = IoOp::read};
  const FaultRule count_writes{.kind = FaultKind::latency, .op = IoOp::write};
  const Outcome clean = train(config, DType::bf16, 1, place, AdamStates::f32, {count_reads});
  const Outcome clean_writes = train(config, DType::bf16, 1, place, AdamStates::f32, {count_writes});
  ASSERT_EQ(clean.losses.size(), size_t(kSteps));
  EXPECT_EQ(clean_writes.losses, clean.losses);
  // Each step's update reads and writes every chunk's image once; the init walk writes them too.
  ASSERT_EQ(clean.injected % kSteps, 0u);
  const uint32_t reads = uint32_t(clean.injected / kSteps);
  ASSERT_EQ(clean_writes.injected % (kSteps + 1), 0u);
  const uint32_t writes = uint32_t(clean_writes.injected / (kSteps + 1));
  // A checkpoint after step 5 (its save reads every chunk once more); the fault hits step 6's
  // update (a torn write: step 7's read of it). An ENOSPC rule also sees the store's reservation.
  constexpr int kSaved = 5;
  const uint32_t read_skip = (kSaved + 1) * reads + 1, write_skip = (kSaved + 1) * writes;
  struct Fault {
    const char* what;
    FaultRule rule;
    Code code;
    int trained;  // steps completed before the failing one
  };
  const Fault faults[] = {
      {"EIO on a read", {.kind = FaultKind::eio, .op = IoOp::read, .skip = read_skip}, Code::io_error, kSaved},
      {"short read", {.kind = FaultKind::short_transfer, .op = IoOp::read, .skip = read_skip},
       Code::io_error, kSaved},
      {"torn write", {.kind = FaultKind::torn_write, .op = IoOp::write, .skip = write_skip, .limit = 1},
       Code::corruption, kSaved + 1},
      {"ENOSPC on a write", {.kind = FaultKind::enospc, .op = IoOp::write, .skip = write_skip + 2},
       Code::no_space, kSaved},
  };
  const std::string dir = std::string(STRATA_BINARY_DIR) + "/test-scratch/opt-faults-" + std::to_string(::getpid());
  for (const Fault& f : faults) {
    SCOPED_TRACE(f.what);
    std::filesystem::remove_all(dir);
    Status failure;
    const Outcome o = train(config, DType::bf16, 1, place, AdamStates::f32, {f.rule}, &failure,
                            {.stop_after = 0, .save_at = kSaved, .save_dir = dir, .resume_dir = ""});
    EXPECT_EQ(failure.code(), f.code) << failure.to_string();
    EXPECT_NE(failure.message().find("chunk"), std::string::npos) << failure.to_string();
    if (f.code == Code::io_error || f.code == Code::corruption) {
      EXPECT_NE(failure.message().find("swap"), std::string::npos) << failure.to_string();
    }
    ASSERT_EQ(o.losses.size(), size_t(f.trained));
    EXPECT_TRUE(std::equal(o.losses.begin(), o.losses.end(), clean.losses.begin()));
    // The checkpoint taken before the fault verifies and resumes into the clean run.
    ASSERT_TRUE(verify_checkpoint(dir).is_ok());
    const Outcome resumed = train(config, DType::bf16, 1, place, AdamStates::f32, {}, nullptr,
                                  {.stop_after = 0, .save_at = 0, .save_dir = "", .resume_dir = dir});
    EXPECT_EQ(resumed.losses, std::vector<double>(clean.losses.begin() + kSaved, clean.losses.end()));
  }
  std::filesystem::remove_all(dir);
}

// Every read fails after the first few (more than the store's retries): step 1 stops with the
// store's error naming the chunk, extent and path.
TEST(PagedWeightFaults, AFailingNvmeReadStopsTheStepNamingTheChunk) {
  Status failure;
  const Outcome o = train(tiny(Arch::llama), DType::bf16, 1, {Tier::nvme, Tier::cpu}, AdamStates::f32,
                          {FaultRule{.kind = FaultKind::eio, .op = IoOp::read, .skip = 5}}, &failure);
  EXPECT_EQ(failure.code(), Code::io_error) << failure.to_string();
  EXPECT_NE(failure.message().find("chunk"), std::string::npos) << failure.to_string();
  EXPECT_TRUE(o.losses.empty()) << "no step completed on bad weights";
}

// An optimizer write is torn (only a prefix lands, success reported, as after a power cut): the
// next read of that chunk from NVMe fails its CRC on every retry and the step stops with corruption
// naming it, after exactly one good step. A chunk just updated is served from the staging buffer
// that wrote it (offload/tier_manager.h), so the read that finds the tear is the first one after
// that buffer moved on: without overlap, step 2's forward reads the embedding (the first write);
// with overlap, the forward uses the first layer's fresh bytes and step 2's backward reads it back
// (12 layers through 2 slots), the second write of the update.
TEST(PagedWeightFaults, ATornWriteIsCaughtByTheCrcOnTheNextRead) {
  const ModelConfig config = tiny(Arch::gpt2);
  const size_t chunks = build_param_layout(config, 2).value().chunks.size();
  for (const bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlapped update" : "update between steps");
    Status failure;
    const uint32_t torn = uint32_t(chunks) + (overlap ? 1 : 0);  // writes before it: the initial weights
    const Outcome o = train(config, DType::bf16, 1, {Tier::nvme, Tier::cpu, false, overlap}, AdamStates::f32,
                            {FaultRule{.kind = FaultKind::torn_write, .op = IoOp::write, .skip = torn, .limit = 1}},
                            &failure);
    EXPECT_EQ(failure.code(), Code::corruption) << failure.to_string();
    EXPECT_NE(failure.message().find("chunk"), std::string::npos) << failure.to_string();
    EXPECT_EQ(o.losses.size(), 1u) << "step 1 trains; step 2 needs the torn chunk";
  }
}

// The layer-major schedule (Transformer::step_layer_major: each chunk acquired once per pass for
// all K micro-batches) trains bit for bit as the micro-batch-major one, 3 steps: GPT-2 (the tied
// table's head and embedding contributions: its stashed head gradients, also per vocabulary tile,
// and MLP tiles) and LLaMA, fp32 and bf16, K = 2 and 3, weights resident (optimizer on the CPU and
// on the device: DeviceGrads), paged from cpu, and from nvme with the optimizer state and the
// gradient sums on nvme too. The reference: micro-batch-major, resident (the matrix above makes
// every placement of it the same bits).
TEST(LayerMajor, TrainsBitIdenticallyToMicroBatchMajor) {
  struct LayerMajorCase {
    Arch arch;
    DType dtype;
    uint64_t grad_accum;
    int64_t vocab_tile = 0, mlp_tiles = 0;  // 0: whole
  };
  const LayerMajorCase cases[] = {{Arch::gpt2, DType::f32, 2},
                                  {Arch::gpt2, DType::bf16, 3},
                                  {Arch::llama, DType::f32, 3},
                                  {Arch::llama, DType::bf16, 2},
                                  {Arch::gpt2, DType::bf16, 2, kVocabTileBlock, 2}};
  const RunControl three{.stop_after = 3};
  for (const LayerMajorCase& k : cases) {
    ModelConfig config = tiny(k.arch);
    if (k.vocab_tile > 0) {
      config.vocab = 2 * k.vocab_tile;  // two tiles of the tied table
      config.vocab_tile = k.vocab_tile;
    }
    config.mlp_tiles = k.mlp_tiles;
    SCOPED_TRACE(fmt::format("{} {} K={} vocab tile {} mlp tiles {}", config.name, dtype_name(k.dtype), k.grad_accum,
                             k.vocab_tile, k.mlp_tiles));
    const Outcome reference = train(config, k.dtype, k.grad_accum, {Tier::device, Tier::cpu}, AdamStates::f32, {},
                                    nullptr, three);
    ASSERT_EQ(reference.losses.size(), 3u);
    EXPECT_FALSE(reference.layer_major);
    for (Placement place : {Placement{Tier::device, Tier::cpu}, Placement{Tier::device, Tier::device},
                            Placement{Tier::cpu, Tier::cpu}, Placement{Tier::nvme, Tier::nvme, true},
                            Placement{Tier::nvme, Tier::cpu, false, true, 0, /*resident_layers=*/5},
                            Placement{.weights = Tier::cpu, .optimizer = Tier::cpu, .resident_layers = 5,
                                      .split = true}}) {
      place.schedule = StepSchedule::layer_major;
      SCOPED_TRACE(placement_name(place));
      const Outcome run = train(config, k.dtype, k.grad_accum, place, AdamStates::f32, {}, nullptr, three);
      EXPECT_TRUE(run.layer_major);
      expect_same_training(run, reference);
    }
  }
}

// The traffic the schedule is for (issue #24): weights on NVMe, K = 4, the update overlapped with
// the next forward (the CLI's default). Per step (steps 2 and 3, after the recorded first one),
// layer-major reads at most 2.05x the weights from NVMe and writes at most 1.0x (the update's
// write of every chunk); micro-batch-major reads each layer for every micro-batch's backward.
// The counters are deterministic: the prefetcher replays the same recorded order every step.
TEST(LayerMajor, WeightsCrossNvmeAboutTwiceAStep) {
  const ModelConfig config = tiny(Arch::gpt2);
  const uint64_t weights = build_param_layout(config, dtype_size(DType::bf16)).value().total_bytes();
  const RunControl three{.stop_after = 3};
  TierStats per_step[2];
  for (StepSchedule schedule : {StepSchedule::micro_batch_major, StepSchedule::layer_major}) {
    SCOPED_TRACE(step_schedule_name(schedule));
    Placement place{Tier::nvme, Tier::cpu};
    place.schedule = schedule;
    const Outcome run = train(config, DType::bf16, 4, place, AdamStates::f32, {}, nullptr, three);
    ASSERT_EQ(run.step_tiers.size(), 3u);
    TierStats& s = per_step[schedule == StepSchedule::layer_major];
    s.nvme_read_bytes = (run.step_tiers[2].nvme_read_bytes - run.step_tiers[0].nvme_read_bytes) / 2;
    s.nvme_write_bytes = (run.step_tiers[2].nvme_write_bytes - run.step_tiers[0].nvme_write_bytes) / 2;
    s.h2d_bytes = (run.step_tiers[2].h2d_bytes - run.step_tiers[0].h2d_bytes) / 2;
    s.prefetches = (run.step_tiers[2].prefetches - run.step_tiers[0].prefetches) / 2;
    s.misses = (run.step_tiers[2].misses - run.step_tiers[0].misses) / 2;
    std::printf("%s: per step %.3fx the weights read from NVMe, %.3fx written, %.3fx to the device, %llu fetches "
                "ahead, %llu misses\n", std::string(step_schedule_name(schedule)).c_str(),
                double(s.nvme_read_bytes) / double(weights), double(s.nvme_write_bytes) / double(weights),
                double(s.h2d_bytes) / double(weights), (unsigned long long)s.prefetches, (unsigned long long)s.misses);
  }
  const TierStats& layer_major = per_step[1];
  const TierStats& micro_batch_major = per_step[0];
  EXPECT_LE(double(layer_major.nvme_read_bytes), 2.05 * double(weights));
  EXPECT_LE(double(layer_major.nvme_write_bytes), 1.0 * double(weights));
  EXPECT_LE(double(layer_major.h2d_bytes), 2.05 * double(weights));
  EXPECT_GT(layer_major.prefetches, 0u);
  EXPECT_GT(micro_batch_major.h2d_bytes, 3 * layer_major.h2d_bytes);
  EXPECT_GT(micro_batch_major.nvme_read_bytes, layer_major.nvme_read_bytes);
}

// The pinned read cache of NVMe-homed weights: with a buffer for every chunk, no weight is read from
// NVMe after the first step (the written and read copies stay in RAM), the writes stay once a step,
// and the run trains the bits of the run without a cache.
TEST(ReadCache, ACacheOfEveryChunkReadsNoWeightsFromNvmeAndTrainsTheSameBits) {
  const ModelConfig config = tiny(Arch::llama);
  const uint64_t weights = build_param_layout(config, dtype_size(DType::bf16)).value().total_bytes();
  const RunControl three{.stop_after = 3};
  Placement place{Tier::nvme, Tier::cpu};
  const Outcome uncached = train(config, DType::bf16, 2, place, AdamStates::f32, {}, nullptr, three);
  place.cache_chunks = uint32_t(build_param_layout(config, dtype_size(DType::bf16)).value().chunks.size());
  const Outcome cached = train(config, DType::bf16, 2, place, AdamStates::f32, {}, nullptr, three);
  expect_same_training(cached, uncached);
  ASSERT_EQ(cached.step_tiers.size(), 3u);
  const TierStats& first = cached.step_tiers[0];
  const TierStats& last = cached.step_tiers[2];
  EXPECT_EQ(last.nvme_read_bytes, first.nvme_read_bytes) << "weights were read from NVMe after the first step";
  EXPECT_LE(double(last.nvme_write_bytes - first.nvme_write_bytes), 2.0 * double(weights));
  EXPECT_GT(uncached.step_tiers[2].nvme_read_bytes, uncached.step_tiers[0].nvme_read_bytes);
}

std::string name_of(const Case& k) {
  return std::string(k.arch == Arch::gpt2 ? "Gpt2" : "Llama") + "_" + std::string(dtype_name(k.dtype)) + "_K" +
         std::to_string(k.grad_accum) + (k.states == AdamStates::q8 ? "_8bit" : "");
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return name_of(info.param); }

// GoogleTest names a parameter in the test's listing (CTest's test names) by printing it; without
// this it prints the struct's bytes, padding included, so the names would change from build to build.
void PrintTo(const Case& k, std::ostream* out) { *out << name_of(k); }

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (Arch arch : {Arch::gpt2, Arch::llama})
    for (DType dtype : {DType::f32, DType::bf16, DType::f16})
      for (uint64_t k : {1, 3})
        for (AdamStates states : {AdamStates::f32, AdamStates::q8}) cases.push_back({arch, dtype, k, states});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Placements, Transparency, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace strata::model
