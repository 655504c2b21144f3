// MLP tiles (ModelConfig::mlp_tiles) between files and a tiled layout. GPT-2's c_fc and c_proj
// are stored transposed in HF files, so a tile of them is a set of the file's columns: init,
// loading, read-back, checkpoints (whole, sharded, cut into optimizer pieces) and HF export of a
// model in 3 uneven tiles are the untiled model's values bit for bit, for GPT-2 and LLaMA; a tiled
// run resumes from its own checkpoint bit-identically; a checkpoint saved with another MLP tiling
// is refused, naming --mlp-tiles. Training itself is compared tiled with tiled only: the tiles
// group the input-gradient sums differently from an untiled run.

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/ckpt/checkpoint.h"
#include "model/hf/hf_export.h"
#include "model/hf/hf_weights.h"
#include "model/hf/safetensors.h"
#include "model/train/trainer.h"
#include "model/net/transformer.h"
#include "tests/model/model_run.h"
#include "tests/model/tiled_training.h"

namespace strata::model {
namespace mlp_tile_checkpoint_test {

using testing::expect_value;
using tiled_training::TempDir;

constexpr int64_t kB = 2, kT = 16;

// C = 64 and H = 256 (GPT-2) / 160 (LLaMA), none a multiple of 3: with 3 tiles the first weight's
// tiles are 85, 85, 86 (GPT-2) / 53, 53, 54 (LLaMA) hidden units and the second's 21, 21, 22 rows.
ModelConfig small(Arch arch, int64_t mlp_tiles) {
  ModelConfig c = tiled_training::small_model(arch, "mlp-tiles", 300, 2, arch == Arch::gpt2 ? 256 : 160);
  c.mlp_tiles = mlp_tiles;
  return c;
}

using Tensors = std::map<std::string, std::vector<float>>;  // HF name -> the whole tensor

// A resident model on the CPU backend with a CPU-optimizer trainer: from init(7), or from the
// checkpoint weights in `load`. (Not "Run": gtest's Test::Run would hide it inside TEST_P.)
struct TileRun {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<PinnedPool> pinned;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Transformer> model;
  std::unique_ptr<Trainer> trainer;
  ModelConfig config;
};

TrainOptions rule(DType dtype, uint64_t sub_group_size) {
  TrainOptions o;
  o.dtype = dtype;
  o.clip_grad_norm = 1.0;
  o.adam_hyper = kernels::AdamHyper{.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  o.lr_schedule = LrScheduleOptions{.peak_lr = 3e-3, .decay = LrDecay::constant};
  o.optimizer_staging = 3;
  o.sub_group_size = sub_group_size;
  return o;
}

std::unique_ptr<TileRun> make_run(const ModelConfig& config, const std::string& load = "", DType dtype = DType::f32,
                              uint64_t sub_group_size = uint64_t(1) << 24) {
  auto r = std::make_unique<TileRun>();
  r->config = config;
  r->backend = expect_value(make_backend(BackendOptions{.kind = BackendKind::cpu, .memory_budget = 64ull << 20}));
  r->pinned = expect_value(PinnedPool::create(PinnedPoolOptions{.slab_bytes = 4ull << 20, .allow_cuda = false}));
  r->pool = expect_value(ThreadPool::create(ThreadPoolOptions{.threads = 2, .pin = false, .name = "mlp-tiles"}));
  r->model = expect_value(Transformer::create(
      *r->backend, config,
      {.batch = kB, .seq_len = kT, .checkpoint_layers = true, .dtype = dtype, .device_grads = false},
      {.pinned = r->pinned.get()}));
  const Status loaded = load.empty() ? r->model->init(7) : load_checkpoint_weights(load, *r->model);
  EXPECT_TRUE(loaded.is_ok()) << loaded.message();
  r->trainer = expect_value(
      Trainer::create(*r->backend, *r->model, *r->pinned, r->pool.get(), rule(dtype, sub_group_size), {}));
  return r;
}

// The same tokens for every run: the stream of seed 11, batch after batch.
NextBatch batches(const ModelConfig& config, std::vector<int32_t>& inputs, std::vector<int32_t>& targets,
                  std::mt19937_64& rng) {
  inputs.resize(kB * kT);
  targets.resize(kB * kT);
  return [&, vocab = uint64_t(config.vocab)]() -> StatusOr<BatchView> {
    for (int64_t i = 0; i < kB * kT; ++i) {
      inputs[size_t(i)] = int32_t(rng() % vocab);
      targets[size_t(i)] = int32_t(rng() % vocab);
    }
    return BatchView{
        .inputs = inputs.data(), .targets = targets.data(), .batch_size = kB, .seq_len = kT, .position = {}};
  };
}

// Steps up to `until` (from the trainer's step count, the batches before it skipped); the losses.
std::vector<double> train_until(TileRun& r, int until) {
  std::mt19937_64 rng(11);
  std::vector<int32_t> inputs, targets;
  const NextBatch next = batches(r.config, inputs, targets, rng);
  for (uint64_t s = 0; s < r.trainer->steps_done(); ++s) (void)next();
  std::vector<double> losses;
  for (int s = int(r.trainer->steps_done()); s < until; ++s) losses.push_back(expect_value(r.trainer->step(next)).loss);
  EXPECT_TRUE(r.backend->synchronize_all().is_ok());
  return losses;
}

// The trainer's fp32 masters, each tensor whole in strata's layout (its tiles put in place).
Tensors masters(TileRun& r) {
  Tensors out;
  EXPECT_TRUE(r.trainer->sync_host_state().is_ok());
  for (const ParamSpec& p : r.model->master_layout().params) {
    std::vector<float>& whole = out[p.name];
    whole.resize(p.tensor_elements());
    const std::vector<float> m = expect_value(r.trainer->master(p));
    EXPECT_EQ(m.size(), p.elements) << p.name;
    std::copy(m.begin(), m.end(), whole.begin() + int64_t(p.tensor_offset()));
  }
  return out;
}

// The model's working weights read back in HF layouts (copy_parameter_to_host), per tensor.
Tensors weights(TileRun& r) {
  Tensors out;
  for (const ParamSpec& p : r.model->layout().params)
    if (!out.contains(p.name)) out[p.name] = expect_value(r.model->copy_parameter_to_host(p.name, ParamState::weights));
  return out;
}

// Same tensors, same bits (memcmp: -0.0 and NaN payloads count).
void expect_same_bits(const Tensors& got, const Tensors& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, values] : want) {
    const auto it = got.find(name);
    ASSERT_NE(it, got.end()) << name;
    ASSERT_EQ(it->second.size(), values.size()) << name;
    EXPECT_EQ(0, std::memcmp(it->second.data(), values.data(), values.size() * sizeof(float))) << name;
  }
}

// Every tensor of the safetensors files in `dir` (one file or shards): name -> (dtype, shape, bytes).
struct FileTensor {
  SafeDType dtype;
  std::vector<uint64_t> shape;
  std::vector<std::byte> bytes;
  bool operator==(const FileTensor&) const = default;
};
std::map<std::string, FileTensor> file_tensors(const std::string& dir) {
  std::map<std::string, FileTensor> out;
  const HfWeights w = expect_value(HfWeights::open(dir));
  for (const SafetensorsFile& f : w.files()) {
    for (const SafetensorsTensor& t : f.tensors()) {
      const std::span<const std::byte> b = f.data(t);
      out[t.name] = {t.dtype, t.shape, std::vector<std::byte>(b.begin(), b.end())};
    }
  }
  return out;
}

void expect_same_files(const std::string& got, const std::string& want) {
  const auto a = file_tensors(got), b = file_tensors(want);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(b.empty());
  for (const auto& [name, t] : b) {
    const auto it = a.find(name);
    ASSERT_NE(it, a.end()) << name;
    EXPECT_TRUE(it->second == t) << name << ": dtype, shape or bytes differ";
  }
}

void save(TileRun& r, const std::string& dir, uint64_t shard_bytes = kCheckpointShardBytes) {
  CheckpointState state;
  state.preset = r.config.name;
  const Status s = save_checkpoint(dir, *r.model, *r.trainer, state, {}, shard_bytes);
  ASSERT_TRUE(s.is_ok()) << s.message();
}

class MlpTileFiles : public ::testing::TestWithParam<Arch> {};

// The layout the other tests rely on: 3 uneven tiles per weight, GPT-2's transposed.
TEST_P(MlpTileFiles, TheLayoutCutsEachMlpWeightInThreeUnevenTiles) {
  const ModelConfig c = small(GetParam(), 3);
  const ParamLayout layout = expect_value(build_param_layout(c, 4));
  const ParamLayout whole = expect_value(build_param_layout(small(GetParam(), 0), 4));
  EXPECT_EQ(layout.chunks.size(), whole.chunks.size() + 2 * 6);
  EXPECT_EQ(layout.total_elements(), whole.total_elements());
  std::map<std::string, std::vector<int64_t>> begins;
  for (const ParamSpec& p : layout.params) {
    if (p.whole()) continue;
    begins[p.name].push_back(p.row_begin);
    EXPECT_EQ(p.hf_transposed, GetParam() == Arch::gpt2 && p.shape.size() == 2) << p.name;
  }
  const bool gpt2 = GetParam() == Arch::gpt2;
  EXPECT_EQ(begins.size(), gpt2 ? 8u : 6u);  // per layer: c_fc w, b, c_proj w, b / gate, up, down
  const std::string fc = gpt2 ? "transformer.h.1.mlp.c_fc.weight" : "model.layers.1.mlp.up_proj.weight";
  const std::string proj = gpt2 ? "transformer.h.1.mlp.c_proj.weight" : "model.layers.1.mlp.down_proj.weight";
  EXPECT_EQ(begins[fc], (gpt2 ? std::vector<int64_t>{0, 85, 170} : std::vector<int64_t>{0, 53, 106}));
  EXPECT_EQ(begins[proj], (std::vector<int64_t>{0, 21, 42}));
}

// init(7) seeds each element by its index in the whole tensor: the tiles hold the untiled values.
TEST_P(MlpTileFiles, InitGivesTheUntiledMastersAndWeights) {
  auto whole = make_run(small(GetParam(), 0));
  auto tiled = make_run(small(GetParam(), 3));
  expect_same_bits(masters(*tiled), masters(*whole));
  expect_same_bits(weights(*tiled), weights(*whole));
}

// A tiled run's checkpoint, whole and in shards, with a tile's state cut into optimizer pieces:
// the untiled model's tensors, and they load into an untiled model as the tiled masters.
TEST_P(MlpTileFiles, ATiledCheckpointHoldsTheUntiledTensors) {
  TempDir tiled_ckpt, sharded_ckpt, whole_ckpt;
  auto tiled = make_run(small(GetParam(), 3), "", DType::f32, /*sub_group_size=*/4096);
  (void)train_until(*tiled, 2);  // masters away from init
  const Tensors trained = masters(*tiled);
  save(*tiled, tiled_ckpt.path);
  save(*tiled, sharded_ckpt.path, /*shard_bytes=*/16384);
  ASSERT_TRUE(std::filesystem::exists(sharded_ckpt.path + "/" + std::string(kHfIndexFile)));
  expect_same_files(sharded_ckpt.path, tiled_ckpt.path);

  auto whole = make_run(small(GetParam(), 0), tiled_ckpt.path);
  expect_same_bits(masters(*whole), trained);
  expect_same_bits(weights(*whole), weights(*tiled));
  save(*whole, whole_ckpt.path);
  expect_same_files(tiled_ckpt.path, whole_ckpt.path);
  // The sharded files load as the whole one did.
  auto from_shards = make_run(small(GetParam(), 0), sharded_ckpt.path);
  expect_same_bits(masters(*from_shards), trained);
}

// An untiled run's checkpoint loads into tiles (fp32, and bf16 whose trainer reads its masters
// back from the files) and a tiled save of it writes the same tensors.
TEST_P(MlpTileFiles, AnUntiledCheckpointLoadsIntoTilesAndSavesBackTheSame) {
  TempDir whole_ckpt, tiled_ckpt;
  auto whole = make_run(small(GetParam(), 0));
  (void)train_until(*whole, 2);
  const Tensors trained = masters(*whole);
  save(*whole, whole_ckpt.path);

  auto tiled = make_run(small(GetParam(), 3), whole_ckpt.path);
  expect_same_bits(masters(*tiled), trained);
  expect_same_bits(weights(*tiled), weights(*whole));
  save(*tiled, tiled_ckpt.path);
  expect_same_files(tiled_ckpt.path, whole_ckpt.path);

  auto half_whole = make_run(small(GetParam(), 0), whole_ckpt.path, DType::bf16);
  auto half_tiled = make_run(small(GetParam(), 3), whole_ckpt.path, DType::bf16);
  expect_same_bits(masters(*half_tiled), trained);
  expect_same_bits(weights(*half_tiled), weights(*half_whole));  // the same bf16 roundings
}

// write_hf_model over a tiled layout (its tensors listed once, each read back whole).
TEST_P(MlpTileFiles, HfExportOfATiledModelIsTheUntiledExport) {
  TempDir tiled_out, whole_out;
  auto tiled = make_run(small(GetParam(), 3));
  auto whole = make_run(small(GetParam(), 0));
  for (TileRun* r : {tiled.get(), whole.get()}) {
    const HfTensorSource source = [r](const ParamSpec& p) {
      return r->model->copy_parameter_to_host(p.name, ParamState::weights);
    };
    const Status s = write_hf_model(r == tiled.get() ? tiled_out.path : whole_out.path, r->config, r->model->layout(),
                                    source, {.dtype = SafeDType::bf16, .shard_bytes = 16384, .tokenizer_from = ""});
    ASSERT_TRUE(s.is_ok()) << s.message();
  }
  expect_same_files(tiled_out.path, whole_out.path);
}

// 2 steps, a save, 2 more from the files: the 4 straight steps' losses and masters, bit for bit.
TEST_P(MlpTileFiles, ATiledRunResumesItsOwnCheckpointBitIdentically) {
  TempDir ckpt;
  auto straight = make_run(small(GetParam(), 3));
  const std::vector<double> want = train_until(*straight, 4);
  auto first = make_run(small(GetParam(), 3));
  const std::vector<double> first_half = train_until(*first, 2);
  EXPECT_EQ(first_half, std::vector<double>(want.begin(), want.begin() + 2));
  save(*first, ckpt.path);

  auto resumed = make_run(small(GetParam(), 3), ckpt.path);
  const Status s = load_checkpoint_optimizer(ckpt.path, *resumed->trainer);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(resumed->trainer->steps_done(), 2u);
  EXPECT_EQ(train_until(*resumed, 4), std::vector<double>(want.begin() + 2, want.end()));
  expect_same_bits(masters(*resumed), masters(*straight));
}

// The moments are per chunk and each MLP tile is a chunk: another tiling is refused in words
// (the weights still load: they are per tensor).
TEST_P(MlpTileFiles, AnotherMlpTilingIsRefusedNamingTheFlag) {
  TempDir whole_ckpt, tiled_ckpt;
  auto whole = make_run(small(GetParam(), 0));
  (void)train_until(*whole, 1);
  save(*whole, whole_ckpt.path);
  auto tiled = make_run(small(GetParam(), 3));
  (void)train_until(*tiled, 1);
  save(*tiled, tiled_ckpt.path);
  EXPECT_EQ(expect_value(SafetensorsFile::open(tiled_ckpt.path + "/" + std::string(kCheckpointOptimizerFile)))
                .metadata()
                .at("mlp_tiles"),
            "3");

  const struct {
    std::string dir;
    int64_t tiles;
    std::string flag;
  } cases[] = {{whole_ckpt.path, 3, "--mlp-tiles 0"}, {tiled_ckpt.path, 0, "--mlp-tiles 3"},
               {tiled_ckpt.path, 2, "--mlp-tiles 3"}};
  for (const auto& k : cases) {
    auto r = make_run(small(GetParam(), k.tiles), k.dir);
    const Status s = load_checkpoint_optimizer(k.dir, *r->trainer);
    EXPECT_EQ(s.code(), Code::invalid_argument) << k.tiles << ": " << s.message();
    EXPECT_NE(s.message().find(k.flag), std::string::npos) << s.message();
    EXPECT_EQ(r->trainer->steps_done(), 0u);  // refused before any state changed
  }
  // mlp_tiles 1 is whole MLPs too: an untiled checkpoint resumes.
  auto one = make_run(small(GetParam(), 1), whole_ckpt.path);
  const Status s = load_checkpoint_optimizer(whole_ckpt.path, *one->trainer);
  EXPECT_TRUE(s.is_ok()) << s.message();
}

INSTANTIATE_TEST_SUITE_P(Archs, MlpTileFiles, ::testing::Values(Arch::gpt2, Arch::llama),
                         [](const ::testing::TestParamInfo<Arch>& info) {
                           return std::string(info.param == Arch::gpt2 ? "Gpt2" : "Llama");
                         });

}  // namespace mlp_tile_checkpoint_test
}  // namespace strata::model
