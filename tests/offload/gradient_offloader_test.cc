// GradientOffloader (offload/gradient_offloader.h) on the CPU backend: a fake backward writes known
// gradients into the slots it acquires over several micro-batches and steps; the fp32 accumulators
// and the global squared norm must equal references built from the definitions, bit for bit,
// whatever the format, slot count, pool size or stream timing; slots are reused (the arena's peak
// is the predicted device bytes); misuse is refused. Home nvme (accumulators in NvmeStore extents,
// spilled through 2..4 pinned buffers) gives the cpu home's bits, read back in any order within
// the outstanding-read bound; I/O errors and CRC mismatches surface as errors naming the chunk.
#include "offload/gradient_offloader.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "kernels/cpu/grad_accumulate.h"
#include "offload/fault_engine.h"
#include "offload/mem_engine.h"
#include "offload/trace.h"
#include "offload_test_util.h"
#include "runtime/thread_pool.h"

namespace strata {
namespace {

using kernels::FloatFormat;

uint64_t dbits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
}

// Chunks: 0 embedding (tied: the head contributes too), 1..3 layers, 4 final norm.
// Layer 2 is big enough for the pool to split its accumulation and its norm blocks.
constexpr size_t kChunks = 5;
const size_t kElements[kChunks] = {6144, 8192, 163840, 12288, 2048};
const size_t kGroup[kChunks] = {1, 0, 0, 0, 2};

GradientOffloaderOptions options_for(FloatFormat f, size_t layer_slots) {
  GradientOffloaderOptions o;
  o.format = f;
  for (size_t c = 0; c < kChunks; ++c) {
    o.chunk_bytes.push_back(kElements[c] * kernels::float_format_size(f));
    o.chunk_group.push_back(kGroup[c]);
  }
  o.group_slots = {layer_slots, 1, 1};
  o.group_names = {"layers", "embedding", "head"};
  return o;
}

// One contribution the fake backward writes: the first `written` elements (the rest of the slot
// stays as acquire left it, zero, like a layout's padding).
struct Contribution {
  size_t chunk;
  bool last;
  size_t written;
  std::vector<uint8_t> bytes;  // `written` elements in the working format
};

std::vector<uint8_t> make_values(FloatFormat f, size_t n, uint64_t seed, float poison) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> out(n * kernels::float_format_size(f));
  for (size_t i = 0; i < n; ++i) {
    // fp16 keeps |x| <= 2^8 (no overflow); bf16/fp32 spread over more binades.
    const int e = f == FloatFormat::f16 ? int(rng() % 16) - 12 : int(rng() % 40) - 20;
    float x = normal(rng) * std::ldexp(1.0f, e);
    if (i == n / 3 && poison != 0.0f) x = poison;
    if (f == FloatFormat::f32) {
      std::memcpy(out.data() + 4 * i, &x, 4);
    } else {
      const uint16_t h = kernels::float_to_half(f, x);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// The backward's sequence for one micro-batch: the head's use of the tied embedding first, then
// the final norm, layers 3..1 and the embedding's own contribution (its last).
std::vector<Contribution> micro_batch(FloatFormat f, int step, int m, bool skip_layer2, float poison = 0.0f) {
  std::vector<std::pair<size_t, bool>> order = {{0, false}, {4, true}, {3, true}, {2, true}, {1, true}, {0, true}};
  std::vector<Contribution> out;
  int k = 0;
  for (auto [c, last] : order) {
    ++k;
    if (skip_layer2 && c == 2) continue;
    const uint64_t seed = 1000003ull * step + 10007ull * m + 101ull * k + c;
    // Every other contribution writes only part of the chunk: the rest must read as zero.
    const size_t written = (k % 2 == 0) ? kElements[c] : kElements[c] * 5 / 8;
    out.push_back({c, last, written, make_values(f, written, seed, c == 3 ? poison : 0.0f)});
  }
  return out;
}

struct StepPlan {
  int micro_batches;
  bool skip_layer2;
  float poison = 0.0f;  // written into chunk 3 of the last micro-batch when nonzero
};

const std::vector<StepPlan> kPlan = {{3, false}, {2, true}, {1, false}};

// What the offloader must produce, from the definitions: per chunk, contributions in release
// order, the first copied and the rest added in fp32; the norm: per chunk sum_squares (checked
// against its own reference in grad_accumulate_test), summed in chunk order.
struct Expected {
  std::vector<std::vector<float>> acc;
  double norm = 0.0;
};

Expected reference_step(FloatFormat f, int step, const StepPlan& plan) {
  Expected e;
  e.acc.resize(kChunks);
  std::vector<bool> touched(kChunks, false);
  for (size_t c = 0; c < kChunks; ++c) e.acc[c].assign(kElements[c], 0.0f);
  for (int m = 0; m < plan.micro_batches; ++m) {
    const float poison = m == plan.micro_batches - 1 ? plan.poison : 0.0f;
    for (const Contribution& k : micro_batch(f, step, m, plan.skip_layer2, poison)) {
      std::vector<float>& a = e.acc[k.chunk];
      for (size_t i = 0; i < a.size(); ++i) {
        float v = 0.0f;
        if (i < k.written) {
          if (f == FloatFormat::f32) {
            std::memcpy(&v, k.bytes.data() + 4 * i, 4);
          } else {
            uint16_t h;
            std::memcpy(&h, k.bytes.data() + 2 * i, 2);
            v = kernels::half_to_float(f, h);
          }
        }
        a[i] = touched[k.chunk] ? a[i] + v : v;
      }
      touched[k.chunk] = true;
    }
  }
  for (size_t c = 0; c < kChunks; ++c) e.norm += kernels::sum_squares(e.acc[c].data(), e.acc[c].size());
  return e;
}

// A one-path NvmeStore over `engine` in a scratch directory, room for a few MiB of extents, one
// request per extent (the stripe unit covers the reservation), so fault rules count per chunk.
struct StoreRig {
  explicit StoreRig(std::unique_ptr<IoEngine> e, uint64_t capacity = 4u << 20) : engine(std::move(e)) {
    NvmeStoreOptions so;
    so.paths = {dir.path()};
    so.capacity = capacity;
    so.stripe_unit = capacity;
    so.probe = test::roomy_probe;
    store = test::value_of(NvmeStore::create(*engine, so));
  }
  test::ScratchDir dir;
  std::unique_ptr<IoEngine> engine;
  std::unique_ptr<NvmeStore> store;
};

// How run_steps reads each finished step back: chunk order, and how many reads are begun ahead of
// the one waited for (1: begin, wait, end one chunk at a time).
enum class ReadOrder { forward, reverse, permuted };

std::vector<size_t> read_order(ReadOrder order, size_t n, uint64_t seed) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  if (order == ReadOrder::reverse) std::reverse(v.begin(), v.end());
  if (order == ReadOrder::permuted) std::shuffle(v.begin(), v.end(), std::mt19937_64(seed));
  return v;
}

struct RunConfig {
  FloatFormat format = FloatFormat::f32;
  int threads = 0;           // 0: no pool
  size_t layer_slots = 2;
  bool flag_last = true;     // false: never say "last micro-batch" -> every partial at finish_step
  bool jitter = false;       // random sleeps on compute and d2h to vary the interleaving
  TraceRecorder* trace = nullptr;
  std::vector<StepPlan> plan = kPlan;
  Tier home = Tier::cpu;
  uint32_t spill_buffers = 3;
  std::string engine = "mem";  // home nvme: the store's engine ("mem", "posix", "io_uring")
  ReadOrder order = ReadOrder::forward;
  size_t window = 1;           // reads outstanding while reading back (<= spill_buffers)
};

struct RunResult {
  std::vector<std::vector<std::vector<float>>> acc;  // [step][chunk]
  std::vector<double> norms;
  std::vector<std::vector<double>> partials;
  ArenaStats memory;
  GradientOffloaderStats stats;
  uint64_t predicted_device_bytes = 0;
  uint64_t in_use_after_destroy = 1;
  size_t releases = 0;
  uint64_t nvme_predicted = 0;  // home nvme: gradient_offloader_nvme_bytes
  uint64_t nvme_taken = 0;      // home nvme: the store's free bytes before create minus after
};

void run_steps(const RunConfig& cfg, RunResult* out) {
  auto backend = make_backend(BackendOptions{.kind = BackendKind::cpu, .memory_budget = 8u << 20});
  ASSERT_TRUE(backend.is_ok()) << backend.status().to_string();
  Backend& b = **backend;
  PinnedPoolOptions po;
  po.allow_cuda = false;
  po.slab_bytes = 4u << 20;
  auto pinned = PinnedPool::create(po);
  ASSERT_TRUE(pinned.is_ok()) << pinned.status().to_string();
  std::unique_ptr<ThreadPool> pool;
  if (cfg.threads > 0) {
    auto p = ThreadPool::create(ThreadPoolOptions{.threads = cfg.threads, .pin = false, .name = "grad test"});
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    pool = std::move(*p);
  }
  GradientOffloaderOptions options = options_for(cfg.format, cfg.layer_slots);
  options.home = cfg.home;
  options.spill_buffers = cfg.spill_buffers;
  std::unique_ptr<StoreRig> rig;
  if (cfg.home == Tier::nvme) {
    std::unique_ptr<IoEngine> engine = test::make_engine(cfg.engine, IoShape{32 << 10, 8});
    if (!engine) GTEST_SKIP() << cfg.engine << " cannot start here";
    rig = std::make_unique<StoreRig>(std::move(engine));
    ASSERT_NE(rig->store, nullptr);
  }
  NvmeStore* store = rig ? rig->store.get() : nullptr;
  const uint32_t alignment = store ? store->alignment() : 4096;
  const uint64_t free_before = store ? store->free_bytes() : 0;
  out->predicted_device_bytes = gradient_offloader_device_bytes(options);
  auto created = GradientOffloader::create(b, **pinned, options, pool.get(), cfg.trace, store);
  ASSERT_TRUE(created.is_ok()) << created.status().to_string();
  GradientOffloader& g = **created;
  EXPECT_EQ((*pinned)->stats().in_use, gradient_offloader_pinned_bytes(options, alignment));
  out->nvme_predicted = gradient_offloader_nvme_bytes(options, alignment);
  if (store) out->nvme_taken = free_before - store->free_bytes();

  std::mt19937_64 rng(42);
  auto jitter = [&](Stream s) {
    if (!cfg.jitter) return;
    const auto us = std::chrono::microseconds(rng() % 400);
    ASSERT_TRUE(b.host_callback(s, [us] { std::this_thread::sleep_for(us); }).is_ok());
  };
  for (size_t step = 0; step < cfg.plan.size(); ++step) {
    const StepPlan& plan = cfg.plan[step];
    ASSERT_TRUE(g.begin_step().is_ok());
    std::vector<std::vector<Contribution>> keep;  // host sources stay alive until the copies ran
    for (int m = 0; m < plan.micro_batches; ++m) {
      g.set_last_micro_batch(cfg.flag_last && m == plan.micro_batches - 1);
      const float poison = m == plan.micro_batches - 1 ? plan.poison : 0.0f;
      keep.push_back(micro_batch(cfg.format, int(step), m, plan.skip_layer2, poison));
      for (const Contribution& k : keep.back()) {
        StatusOr<std::byte*> slot = g.acquire(k.chunk);
        ASSERT_TRUE(slot.is_ok()) << slot.status().to_string();
        jitter(Stream::compute);
        // The "backward": accumulate into the zeroed slot (here: write, since it is zero).
        ASSERT_TRUE(b.copy_to_device(*slot, k.bytes.data(), k.bytes.size(), Stream::compute).is_ok());
        jitter(Stream::d2h);
        ASSERT_TRUE(g.release(k.chunk, k.last).is_ok());
        ++out->releases;
      }
    }
    StatusOr<double> norm = g.finish_step();
    ASSERT_TRUE(norm.is_ok()) << norm.status().to_string();
    out->norms.push_back(*norm);
    out->acc.emplace_back(kChunks);
    out->partials.emplace_back();
    for (size_t c = 0; c < kChunks; ++c) out->partials.back().push_back(g.partial(c));
    // Read every chunk back, `window` reads begun ahead of the one waited for.
    const std::vector<size_t> order = read_order(cfg.order, kChunks, 77 + step);
    for (size_t i = 0; i < order.size(); ++i) {
      for (size_t k = i; k < std::min(order.size(), i + cfg.window); ++k) {
        Status begun = g.begin_read(order[k]);
        ASSERT_TRUE(begun.is_ok()) << begun.to_string();
      }
      const size_t c = order[i];
      ASSERT_EQ(g.accumulated_count(c), kElements[c]);
      StatusOr<const float*> acc = g.wait_read(c);
      ASSERT_TRUE(acc.is_ok()) << acc.status().to_string();
      if (cfg.home == Tier::cpu) {
        EXPECT_EQ(*acc, g.accumulated(c));
      } else {
        EXPECT_EQ(g.accumulated(c), nullptr);
      }
      out->acc.back()[c].assign(*acc, *acc + kElements[c]);
      g.end_read(c);
    }
  }
  out->memory = b.memory();
  out->stats = g.stats();
  created = StatusOr<std::unique_ptr<GradientOffloader>>(std::unique_ptr<GradientOffloader>());
  out->in_use_after_destroy = b.memory().in_use;
}

::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (kernels::float_bits(got[i]) != kernels::float_bits(want[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

class GradientOffloaderFormat : public ::testing::TestWithParam<FloatFormat> {};

TEST_P(GradientOffloaderFormat, AccumulatorsAndNormMatchTheReferenceBitForBit) {
  const FloatFormat f = GetParam();
  RunResult r;
  ASSERT_NO_FATAL_FAILURE(run_steps(RunConfig{.format = f}, &r));
  ASSERT_EQ(r.norms.size(), kPlan.size());
  for (size_t s = 0; s < kPlan.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const Expected e = reference_step(f, int(s), kPlan[s]);
    for (size_t c = 0; c < kChunks; ++c) EXPECT_TRUE(same_bits(r.acc[s][c], e.acc[c])) << "chunk " << c;
    EXPECT_EQ(dbits(r.norms[s]), dbits(e.norm)) << r.norms[s] << " vs " << e.norm;
    EXPECT_TRUE(std::isfinite(r.norms[s]));
    EXPECT_GT(r.norms[s], 0.0);
  }
  // Step 1 skipped layer 2: it reads as zero (after holding step 0's values) and adds nothing.
  for (float v : r.acc[1][2]) ASSERT_EQ(kernels::float_bits(v), 0u);
  EXPECT_EQ(dbits(r.partials[1][2]), dbits(0.0));
  // Slots were reused: the arena's peak is exactly the predicted device bytes.
  EXPECT_EQ(r.memory.peak, r.predicted_device_bytes);
  EXPECT_EQ(r.in_use_after_destroy, 0u);  // everything released at destruction
  uint64_t bytes = 0;
  size_t releases = 0;
  for (size_t s = 0; s < kPlan.size(); ++s) {
    for (int m = 0; m < kPlan[s].micro_batches; ++m) {
      for (const Contribution& k : micro_batch(f, int(s), m, kPlan[s].skip_layer2)) {
        bytes += kElements[k.chunk] * kernels::float_format_size(f);
        ++releases;
      }
    }
  }
  EXPECT_EQ(r.stats.d2h_bytes, bytes);
  EXPECT_EQ(r.stats.contributions, releases);
  EXPECT_GT(r.stats.accumulate_seconds, 0.0);
  EXPECT_GT(r.stats.partials_seconds, 0.0);
}

TEST_P(GradientOffloaderFormat, SameBitsWhateverThreadsSlotsTimingOrPartialSchedule) {
  const FloatFormat f = GetParam();
  RunResult base;
  ASSERT_NO_FATAL_FAILURE(run_steps(RunConfig{.format = f}, &base));
  const std::vector<RunConfig> variants = {
      {.format = f, .threads = 1},
      {.format = f, .threads = 2},
      {.format = f, .threads = 2, .layer_slots = 1},
      {.format = f, .layer_slots = 1, .jitter = true},
      {.format = f, .threads = 2, .layer_slots = 3, .jitter = true},
      {.format = f, .threads = 2, .flag_last = false},  // every partial computed in finish_step
  };
  for (size_t v = 0; v < variants.size(); ++v) {
    SCOPED_TRACE("variant " + std::to_string(v));
    RunResult r;
    ASSERT_NO_FATAL_FAILURE(run_steps(variants[v], &r));
    for (size_t s = 0; s < kPlan.size(); ++s) {
      EXPECT_EQ(dbits(r.norms[s]), dbits(base.norms[s])) << "step " << s;
      for (size_t c = 0; c < kChunks; ++c) EXPECT_TRUE(same_bits(r.acc[s][c], base.acc[s][c])) << "step " << s << " chunk " << c;
    }
    EXPECT_EQ(r.memory.peak, r.predicted_device_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, GradientOffloaderFormat,
                         ::testing::Values(FloatFormat::f32, FloatFormat::bf16, FloatFormat::f16),
                         [](const auto& info) { return std::string(kernels::float_format_name(info.param)); });

TEST(GradientOffloader, PredictedDeviceBytesArePerGroupSlotsTimesLargestChunk) {
  const GradientOffloaderOptions o = options_for(FloatFormat::bf16, 2);
  EXPECT_EQ(gradient_offloader_device_bytes(o), 2 * 163840 * 2 + 6144 * 2 + 2048 * 2);
  EXPECT_EQ(gradient_offloader_pinned_bytes(o), (6144 + 8192 + 163840 + 12288 + 2048) * 4 + 163840 * 2);
  EXPECT_EQ(gradient_offloader_nvme_bytes(o), 0u);
  // Home nvme: spill buffers instead of one accumulator per chunk, buffer i the i-th largest
  // chunk's fp32 sum (163840 and 12288 elements' here); the extents padded to the store's alignment
  // (each extra 64 KiB of alignment buys one).
  GradientOffloaderOptions n = o;
  n.home = Tier::nvme;
  n.spill_buffers = 2;
  EXPECT_EQ(gradient_offloader_pinned_bytes(n), (163840 + 12288) * 4 + 163840 * 2);
  EXPECT_EQ(gradient_offloader_pinned_bytes(n, 65536), (163840 * 4 + 65536) + (65536 + 65536) + 163840 * 2);
  // More buffers than chunks: the rest are the smallest chunk's.
  n.spill_buffers = 7;
  EXPECT_EQ(gradient_offloader_pinned_bytes(n), (6144 + 8192 + 163840 + 12288 + 2048 + 2048 + 2048) * 4 + 163840 * 2);
  EXPECT_EQ(gradient_offloader_nvme_bytes(n), (6144 + 8192 + 163840 + 12288 + 2048) * 4);
  EXPECT_EQ(gradient_offloader_nvme_bytes(n, 65536), (1 + 1 + 10 + 1 + 1) * 65536);
}

TEST(GradientOffloader, NonFiniteGradientsGiveANonFiniteNorm) {
  for (float poison : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    for (FloatFormat f : {FloatFormat::f32, FloatFormat::bf16, FloatFormat::f16}) {
      RunResult r;
      RunConfig cfg{.format = f, .threads = 2};
      cfg.plan = {{2, false, poison}, {2, false}};
      ASSERT_NO_FATAL_FAILURE(run_steps(cfg, &r));
      if (std::isnan(poison)) {
        EXPECT_TRUE(std::isnan(r.norms[0])) << kernels::float_format_name(f);
      } else {
        EXPECT_EQ(r.norms[0], std::numeric_limits<double>::infinity()) << kernels::float_format_name(f);
      }
      EXPECT_FALSE(std::isfinite(r.partials[0][3]));
      EXPECT_TRUE(std::isfinite(r.partials[0][2]));
      EXPECT_TRUE(std::isfinite(r.norms[1]));  // the next step starts clean
    }
  }
}

TEST(GradientOffloader, TraceHasASpanPerCopyAndPerAccumulation) {
  TraceRecorder trace;
  RunResult r;
  ASSERT_NO_FATAL_FAILURE(run_steps(RunConfig{.format = FloatFormat::bf16, .trace = &trace}, &r));
  EXPECT_EQ(trace.span_count(), 2 * r.releases);
  EXPECT_EQ(trace.tracks(), (std::vector<std::string>{"d2h", "host accumulate"}));
}

struct Fixture {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<PinnedPool> pinned;
};

Fixture make_fixture(uint64_t budget = 8u << 20) {
  Fixture fx;
  auto b = make_backend(BackendOptions{.kind = BackendKind::cpu, .memory_budget = budget});
  EXPECT_TRUE(b.is_ok()) << b.status().to_string();
  if (b.is_ok()) fx.backend = std::move(*b);
  PinnedPoolOptions po;
  po.allow_cuda = false;
  po.slab_bytes = 4u << 20;
  auto p = PinnedPool::create(po);
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  if (p.is_ok()) fx.pinned = std::move(*p);
  return fx;
}

TEST(GradientOffloader, MisuseIsFailedPrecondition) {
  Fixture fx = make_fixture();
  ASSERT_TRUE(fx.backend && fx.pinned);
  auto g = GradientOffloader::create(*fx.backend, *fx.pinned, options_for(FloatFormat::f32, 2));
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  GradientOffloader& o = **g;
  EXPECT_EQ(o.acquire(1).status().code(), Code::failed_precondition);  // before begin_step
  EXPECT_EQ(o.finish_step().status().code(), Code::failed_precondition);
  ASSERT_TRUE(o.begin_step().is_ok());
  EXPECT_EQ(o.acquire(kChunks).status().code(), Code::invalid_argument);
  EXPECT_EQ(o.release(1, true).code(), Code::failed_precondition);  // not acquired
  StatusOr<std::byte*> a = o.acquire(1);
  ASSERT_TRUE(a.is_ok());
  StatusOr<std::byte*> again = o.acquire(1);
  ASSERT_FALSE(again.is_ok());
  EXPECT_EQ(again.status().code(), Code::failed_precondition);
  EXPECT_NE(again.status().message().find("chunk 1 is already acquired"), std::string::npos) << again.status().to_string();
  StatusOr<std::byte*> b2 = o.acquire(2);
  ASSERT_TRUE(b2.is_ok());
  EXPECT_NE(*a, *b2);  // two slots, two buffers
  StatusOr<std::byte*> full = o.acquire(3);  // both layer slots are held
  EXPECT_EQ(full.status().code(), Code::failed_precondition);
  EXPECT_NE(full.status().message().find("'layers'"), std::string::npos) << full.status().to_string();
  EXPECT_EQ(o.finish_step().status().code(), Code::failed_precondition);  // chunks still held
  EXPECT_EQ(o.begin_step().code(), Code::failed_precondition);
  ASSERT_TRUE(o.release(1, true).is_ok());
  StatusOr<std::byte*> c3 = o.acquire(3);  // gets the freed slot
  ASSERT_TRUE(c3.is_ok());
  EXPECT_EQ(*c3, *a);
  ASSERT_TRUE(o.release(2, true).is_ok());
  ASSERT_TRUE(o.release(3, true).is_ok());
  StatusOr<double> norm = o.finish_step();
  ASSERT_TRUE(norm.is_ok()) << norm.status().to_string();
  EXPECT_EQ(*norm, 0.0);  // every contribution was zero (the slots were zero-filled)
  // A zero contribution still counts: accumulated reads zero, not stale data.
  for (size_t i = 0; i < o.accumulated_count(1); ++i) ASSERT_EQ(o.accumulated(1)[i], 0.0f);
}

TEST(GradientOffloader, BadOptionsAndSmallBudgetsAreRefusedBeforeUse) {
  Fixture fx = make_fixture();
  ASSERT_TRUE(fx.backend && fx.pinned);
  auto expect_invalid = [&](GradientOffloaderOptions o, const std::string& needle) {
    auto g = GradientOffloader::create(*fx.backend, *fx.pinned, o);
    ASSERT_FALSE(g.is_ok());
    EXPECT_EQ(g.status().code(), Code::invalid_argument);
    EXPECT_NE(g.status().message().find(needle), std::string::npos) << g.status().to_string();
  };
  GradientOffloaderOptions o = options_for(FloatFormat::bf16, 2);
  o.chunk_group.pop_back();
  expect_invalid(o, "chunk groups");
  o = options_for(FloatFormat::bf16, 0);
  expect_invalid(o, "'layers' has 0 device slots");
  o = options_for(FloatFormat::f32, 2);
  o.chunk_bytes[1] = 4098;
  expect_invalid(o, "chunk 1 has 4098 bytes");
  o = options_for(FloatFormat::f32, 2);
  o.chunk_group[4] = 7;
  expect_invalid(o, "slot group 7");
  expect_invalid(GradientOffloaderOptions{}, "no chunks");
  EXPECT_EQ(fx.backend->memory().in_use, 0u);

  // A device budget below the slots' need: out_of_memory naming the slot, nothing left allocated.
  Fixture small = make_fixture(1u << 20);
  ASSERT_TRUE(small.backend && small.pinned);
  auto g = GradientOffloader::create(*small.backend, *small.pinned, options_for(FloatFormat::f32, 2));
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), Code::out_of_memory);
  EXPECT_NE(g.status().message().find("gradient slot (layers) 2/2"), std::string::npos) << g.status().to_string();
  EXPECT_EQ(small.backend->memory().in_use, 0u);
}

// ---- home nvme ------------------------------------------------------------------------------------

void expect_same_run(const RunResult& r, const RunResult& base) {
  ASSERT_EQ(r.norms.size(), base.norms.size());
  for (size_t s = 0; s < base.norms.size(); ++s) {
    EXPECT_EQ(dbits(r.norms[s]), dbits(base.norms[s])) << "step " << s;
    for (size_t c = 0; c < kChunks; ++c) {
      EXPECT_TRUE(same_bits(r.acc[s][c], base.acc[s][c])) << "step " << s << " chunk " << c;
      EXPECT_EQ(dbits(r.partials[s][c]), dbits(base.partials[s][c])) << "step " << s << " chunk " << c;
    }
  }
}

class GradientOffloaderNvme : public ::testing::TestWithParam<FloatFormat> {};

// kPlan covers K = 3, 2 and 1 micro-batches, the tied embedding (chunk 0: released with last =
// false, then last = true, in every micro-batch) and a chunk without contribution (layer 2 in step
// 1, after holding step 0's values in its extent).
TEST_P(GradientOffloaderNvme, SameBitsAsTheCpuHomeWhateverSpillBuffersTimingOrReadOrder) {
  const FloatFormat f = GetParam();
  RunResult base;
  ASSERT_NO_FATAL_FAILURE(run_steps(RunConfig{.format = f}, &base));
  const std::vector<RunConfig> variants = {
      {.format = f, .home = Tier::nvme, .spill_buffers = 2},
      {.format = f, .home = Tier::nvme, .spill_buffers = 3, .order = ReadOrder::reverse, .window = 3},
      {.format = f, .threads = 2, .jitter = true, .home = Tier::nvme, .spill_buffers = 2,
       .order = ReadOrder::permuted, .window = 2},
      {.format = f, .threads = 2, .layer_slots = 3, .jitter = true, .home = Tier::nvme, .spill_buffers = 3,
       .order = ReadOrder::permuted, .window = 3},
      {.format = f, .layer_slots = 1, .flag_last = false, .home = Tier::nvme, .spill_buffers = 2,
       .order = ReadOrder::reverse, .window = 2},  // every partial from finish_step, read back
      {.format = f, .home = Tier::nvme, .spill_buffers = 8, .window = 5},  // every chunk stays in a buffer
  };
  for (size_t v = 0; v < variants.size(); ++v) {
    SCOPED_TRACE("variant " + std::to_string(v));
    RunResult r;
    ASSERT_NO_FATAL_FAILURE(run_steps(variants[v], &r));
    expect_same_run(r, base);
    EXPECT_EQ(r.memory.peak, r.predicted_device_bytes);
    EXPECT_EQ(r.in_use_after_destroy, 0u);
    EXPECT_EQ(r.nvme_taken, r.nvme_predicted);
    EXPECT_EQ(r.stats.d2h_bytes, base.stats.d2h_bytes);
    EXPECT_EQ(r.stats.contributions, base.stats.contributions);
    // Every chunk's value went to its extent at least once per step; fewer buffers than chunks
    // bring values back from the extents (in the step's later micro-batches and when read back).
    EXPECT_GT(r.stats.nvme_write_bytes, 0u);
    if (variants[v].spill_buffers < kChunks) {
      EXPECT_GT(r.stats.nvme_read_bytes, 0u);
    }
    EXPECT_GE(r.stats.nvme_read_wait_seconds, 0.0);
    EXPECT_GE(r.stats.nvme_write_wait_seconds, 0.0);
  }
  // The cpu home moves nothing to or from NVMe.
  EXPECT_EQ(base.stats.nvme_read_bytes + base.stats.nvme_write_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Formats, GradientOffloaderNvme,
                         ::testing::Values(FloatFormat::f32, FloatFormat::bf16, FloatFormat::f16),
                         [](const auto& info) { return std::string(kernels::float_format_name(info.param)); });

class GradientOffloaderNvmeEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(GradientOffloaderNvmeEngine, SameBitsThroughSwapFiles) {
  RunResult base, r;
  ASSERT_NO_FATAL_FAILURE(run_steps(RunConfig{.format = FloatFormat::bf16}, &base));
  ASSERT_NO_FATAL_FAILURE(run_steps(RunConfig{.format = FloatFormat::bf16, .threads = 2, .home = Tier::nvme,
                                              .spill_buffers = 3, .engine = GetParam(),
                                              .order = ReadOrder::permuted, .window = 3},
                                    &r));
  if (IsSkipped()) return;
  expect_same_run(r, base);
}

INSTANTIATE_TEST_SUITE_P(Engines, GradientOffloaderNvmeEngine, ::testing::Values("posix", "io_uring"),
                         [](const auto& info) { return info.param == "io_uring" ? std::string("uring") : info.param; });

TEST(GradientOffloaderNvme, TraceHasASpanPerExtentTransfer) {
  TraceRecorder trace;
  RunResult r;
  ASSERT_NO_FATAL_FAILURE(run_steps(RunConfig{.format = FloatFormat::bf16, .trace = &trace, .home = Tier::nvme,
                                              .spill_buffers = 2},
                                    &r));
  const std::vector<std::string> tracks = trace.tracks();
  for (const char* t : {"d2h", "host accumulate", "grad nvme read", "grad nvme write"}) {
    EXPECT_NE(std::find(tracks.begin(), tracks.end(), t), tracks.end()) << t;
  }
  EXPECT_GT(trace.span_count(), 2 * r.releases);
}

// Many chunks of one size: the cpu home pins every accumulator, the nvme home three buffers.
TEST(GradientOffloaderNvme, PinsFarLessThanTheCpuHomeForManyChunks) {
  Fixture fx = make_fixture(64u << 20);
  ASSERT_TRUE(fx.backend && fx.pinned);
  StoreRig rig(std::make_unique<MemEngine>(), 16u << 20);
  ASSERT_NE(rig.store, nullptr);
  GradientOffloaderOptions o;
  o.format = FloatFormat::bf16;
  for (size_t c = 0; c < 48; ++c) {
    o.chunk_bytes.push_back(64u << 10);
    o.chunk_group.push_back(0);
  }
  o.group_slots = {2};
  const uint64_t cpu_bytes = gradient_offloader_pinned_bytes(o);
  o.home = Tier::nvme;
  const uint64_t nvme_bytes = gradient_offloader_pinned_bytes(o, rig.store->alignment());
  EXPECT_EQ(cpu_bytes, 48u * (128u << 10) + (64u << 10));
  EXPECT_EQ(nvme_bytes, 3u * (128u << 10) + (64u << 10));
  const uint64_t free_before = rig.store->free_bytes();
  auto g = GradientOffloader::create(*fx.backend, *fx.pinned, o, nullptr, nullptr, rig.store.get());
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(fx.pinned->stats().in_use, nvme_bytes);
  EXPECT_EQ(free_before - rig.store->free_bytes(), gradient_offloader_nvme_bytes(o, rig.store->alignment()));
  EXPECT_EQ(gradient_offloader_nvme_bytes(o, rig.store->alignment()), 48u * (128u << 10));
  g = StatusOr<std::unique_ptr<GradientOffloader>>(std::unique_ptr<GradientOffloader>());
  EXPECT_EQ(rig.store->free_bytes(), free_before);  // the extents are released with the offloader
}

// One step of kPlan[0] on `g` (3 micro-batches), stopping at the first error, which is returned;
// else finish_step's.
StatusOr<double> drive_step(Backend& b, GradientOffloader& g, FloatFormat f, int micro_batches) {
  // The host bytes the queued copies read outlive every return: an error part way leaves copies
  // in flight, so the streams are drained before `keep` goes.
  std::vector<std::vector<Contribution>> keep;
  const auto drive = [&]() -> StatusOr<double> {
    STRATA_RETURN_IF_ERROR(g.begin_step());
    for (int m = 0; m < micro_batches; ++m) {
      g.set_last_micro_batch(m == micro_batches - 1);
      keep.push_back(micro_batch(f, 0, m, false));
      for (const Contribution& k : keep.back()) {
        STRATA_ASSIGN_OR_RETURN(std::byte* slot, g.acquire(k.chunk));
        STRATA_RETURN_IF_ERROR(b.copy_to_device(slot, k.bytes.data(), k.bytes.size(), Stream::compute));
        STRATA_RETURN_IF_ERROR(g.release(k.chunk, k.last));
      }
    }
    return g.finish_step();
  };
  StatusOr<double> result = drive();
  (void)b.synchronize_all();
  return result;
}

struct NvmeFixture {
  explicit NvmeFixture(std::unique_ptr<IoEngine> engine) : fx(make_fixture()), rig(std::move(engine)) {}
  StatusOr<std::unique_ptr<GradientOffloader>> make(uint32_t spill_buffers = 3, size_t layer_slots = 2) {
    GradientOffloaderOptions o = options_for(FloatFormat::bf16, layer_slots);
    o.home = Tier::nvme;
    o.spill_buffers = spill_buffers;
    return GradientOffloader::create(*fx.backend, *fx.pinned, o, nullptr, nullptr, rig.store.get());
  }
  Fixture fx;
  StoreRig rig;
};

FaultEngine& faults(NvmeFixture& n) { return dynamic_cast<FaultEngine&>(*n.rig.engine); }

TEST(GradientOffloaderNvme, AReadFailingInTheStepIsAStickyErrorNamingTheChunk) {
  // With 3 buffers the first extent read of the step is chunk 4's, in micro-batch 1 (micro-batch
  // 0 leaves 0 (the tied embedding), 2 and 1 in buffers; 4 was written and its buffer taken).
  FaultRule eio{.kind = FaultKind::eio, .op = IoOp::read};
  NvmeFixture n(std::make_unique<FaultEngine>(std::make_unique<MemEngine>(), FaultEngineOptions{3, {eio}}));
  ASSERT_TRUE(n.fx.backend && n.rig.store);
  auto g = n.make();
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  StatusOr<double> norm = drive_step(*n.fx.backend, **g, FloatFormat::bf16, 3);
  ASSERT_FALSE(norm.is_ok());
  EXPECT_EQ(norm.status().code(), Code::io_error) << norm.status().to_string();
  EXPECT_NE(norm.status().message().find("chunk 4's fp32 gradient"), std::string::npos) << norm.status().to_string();
  EXPECT_NE(norm.status().message().find("3 times"), std::string::npos) << norm.status().to_string();
  EXPECT_GE(faults(n).injected(FaultKind::eio), 3u);
  // Sticky: the step cannot be finished nor a new one begun, and nothing hangs.
  EXPECT_EQ((*g)->finish_step().status().code(), Code::io_error);
  EXPECT_EQ((*g)->begin_step().code(), Code::io_error);
  EXPECT_EQ((*g)->wait_read(4).status().code(), Code::io_error);
}

TEST(GradientOffloaderNvme, AWriteFailingInTheStepIsAStickyErrorNamingTheChunk) {
  // The second write of the step is chunk 3's (the release order with last = true: 4, 3, 2, 1, 0).
  FaultRule eio{.kind = FaultKind::eio, .op = IoOp::write, .skip = 1};
  NvmeFixture n(std::make_unique<FaultEngine>(std::make_unique<MemEngine>(), FaultEngineOptions{5, {eio}}));
  ASSERT_TRUE(n.fx.backend && n.rig.store);
  auto g = n.make();
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  StatusOr<double> norm = drive_step(*n.fx.backend, **g, FloatFormat::bf16, 3);
  ASSERT_FALSE(norm.is_ok());
  EXPECT_EQ(norm.status().code(), Code::io_error) << norm.status().to_string();
  EXPECT_NE(norm.status().message().find("write of chunk 3's fp32 gradient"), std::string::npos)
      << norm.status().to_string();
  EXPECT_EQ((*g)->finish_step().status().code(), Code::io_error);
}

TEST(GradientOffloaderNvme, ATornWriteIsCaughtByTheCrcWhenReadNamingTheChunk) {
  // One micro-batch: no reads in the step; the third write (chunk 2) is torn yet reports success.
  FaultRule torn{.kind = FaultKind::torn_write, .op = IoOp::write, .skip = 2, .limit = 1};
  NvmeFixture n(std::make_unique<FaultEngine>(std::make_unique<MemEngine>(), FaultEngineOptions{9, {torn}}));
  ASSERT_TRUE(n.fx.backend && n.rig.store);
  auto g = n.make(2);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  GradientOffloader& o = **g;
  StatusOr<double> norm = drive_step(*n.fx.backend, o, FloatFormat::bf16, 1);
  ASSERT_TRUE(norm.is_ok()) << norm.status().to_string();  // the tear is silent
  EXPECT_EQ(faults(n).injected(FaultKind::torn_write), 1u);
  StatusOr<const float*> bad = o.wait_read(2);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), Code::corruption) << bad.status().to_string();
  EXPECT_NE(bad.status().message().find("read of chunk 2's fp32 gradient"), std::string::npos) << bad.status().to_string();
  // Not sticky: the other chunks read fine, and chunk 2 fails again, never served.
  for (size_t c : {0u, 1u, 3u, 4u}) {
    StatusOr<const float*> ok = o.wait_read(c);
    EXPECT_TRUE(ok.is_ok()) << c << ": " << ok.status().to_string();
    o.end_read(c);
  }
  EXPECT_EQ(o.wait_read(2).status().code(), Code::corruption);
  o.end_read(2);
  // The next step rewrites every extent: clean again.
  norm = drive_step(*n.fx.backend, o, FloatFormat::bf16, 1);
  ASSERT_TRUE(norm.is_ok()) << norm.status().to_string();
  EXPECT_TRUE(o.wait_read(2).is_ok());
  o.end_read(2);
}

TEST(GradientOffloaderNvme, ReadsAreBoundedByTheSpillBuffersAndRefusedDuringAStep) {
  NvmeFixture n(std::make_unique<MemEngine>());
  ASSERT_TRUE(n.fx.backend && n.rig.store);
  auto g = n.make(3);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  GradientOffloader& o = **g;
  // Before any step every chunk reads as zero.
  StatusOr<const float*> z = o.wait_read(2);
  ASSERT_TRUE(z.is_ok()) << z.status().to_string();
  for (size_t i = 0; i < o.accumulated_count(2); ++i) ASSERT_EQ(kernels::float_bits((*z)[i]), 0u);
  o.end_read(2);
  ASSERT_TRUE(drive_step(*n.fx.backend, o, FloatFormat::bf16, 3).is_ok());
  EXPECT_EQ(o.accumulated(1), nullptr);  // home nvme: read through wait_read
  // The largest chunk first: only the largest spill buffer holds it.
  ASSERT_TRUE(o.begin_read(2).is_ok());
  ASSERT_TRUE(o.begin_read(4).is_ok());
  ASSERT_TRUE(o.begin_read(4).is_ok());  // already begun: a no-op
  ASSERT_TRUE(o.begin_read(0).is_ok());
  StatusOr<const float*> r0 = o.wait_read(0), r2 = o.wait_read(2), r4 = o.wait_read(4);
  ASSERT_TRUE(r0.is_ok() && r2.is_ok() && r4.is_ok());
  // Every buffer is handed out: a fourth read is refused, never waits.
  Status fourth = o.begin_read(1);
  EXPECT_EQ(fourth.code(), Code::failed_precondition);
  EXPECT_NE(fourth.message().find("end_read one first"), std::string::npos) << fourth.to_string();
  EXPECT_NE(*r0, *r2);
  EXPECT_NE(*r2, *r4);
  EXPECT_EQ(o.begin_step().code(), Code::failed_precondition);  // reads outstanding
  o.end_read(2);
  EXPECT_TRUE(o.begin_read(1).is_ok());
  EXPECT_EQ(o.begin_read(kChunks).code(), Code::invalid_argument);
  o.end_read(0);
  o.end_read(1);
  o.end_read(4);
  o.end_read(3);  // not begun: a no-op
  ASSERT_TRUE(o.begin_step().is_ok());
  EXPECT_EQ(o.begin_read(0).code(), Code::failed_precondition);  // during a step
  EXPECT_EQ(o.wait_read(0).status().code(), Code::failed_precondition);
  EXPECT_TRUE(o.finish_step().is_ok());
}

TEST(GradientOffloaderNvme, MoreOpenChunksThanSpillBuffersIsRefusedNotAHang) {
  NvmeFixture n(std::make_unique<MemEngine>());
  ASSERT_TRUE(n.fx.backend && n.rig.store);
  auto g = n.make(2);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  GradientOffloader& o = **g;
  ASSERT_TRUE(o.begin_step().is_ok());
  ASSERT_TRUE(o.acquire(0).is_ok());
  ASSERT_TRUE(o.release(0, false).is_ok());  // the tied embedding stays open, holding a buffer
  ASSERT_TRUE(o.acquire(1).is_ok());
  StatusOr<std::byte*> third = o.acquire(2);
  ASSERT_FALSE(third.is_ok());
  EXPECT_EQ(third.status().code(), Code::failed_precondition);
  EXPECT_NE(third.status().message().find("raise spill_buffers"), std::string::npos) << third.status().to_string();
  ASSERT_TRUE(o.release(1, true).is_ok());
  ASSERT_TRUE(o.acquire(2).is_ok());  // takes chunk 1's buffer back once its write is done
  ASSERT_TRUE(o.release(2, true).is_ok());
  StatusOr<double> norm = o.finish_step();  // chunk 0 never got last = true: written here
  ASSERT_TRUE(norm.is_ok()) << norm.status().to_string();
  EXPECT_EQ(*norm, 0.0);
  StatusOr<const float*> a0 = o.wait_read(0);
  ASSERT_TRUE(a0.is_ok()) << a0.status().to_string();
  EXPECT_EQ((*a0)[0], 0.0f);
}

TEST(GradientOffloaderNvme, BadOptionsAndAFullStoreAreRefusedBeforeUse) {
  Fixture fx = make_fixture();
  ASSERT_TRUE(fx.backend && fx.pinned);
  StoreRig rig(std::make_unique<MemEngine>());
  ASSERT_NE(rig.store, nullptr);
  auto expect_refused = [&](GradientOffloaderOptions o, NvmeStore* store, Code code, const std::string& needle) {
    auto g = GradientOffloader::create(*fx.backend, *fx.pinned, o, nullptr, nullptr, store);
    ASSERT_FALSE(g.is_ok());
    EXPECT_EQ(g.status().code(), code);
    EXPECT_NE(g.status().message().find(needle), std::string::npos) << g.status().to_string();
  };
  GradientOffloaderOptions o = options_for(FloatFormat::bf16, 2);
  o.home = Tier::nvme;
  expect_refused(o, nullptr, Code::invalid_argument, "need an NvmeStore");
  o.spill_buffers = 1;
  expect_refused(o, rig.store.get(), Code::invalid_argument, "at least 2 spill buffers");
  o.spill_buffers = 3;
  o.home = Tier::device;
  expect_refused(o, rig.store.get(), Code::invalid_argument, "must be cpu or nvme");
  EXPECT_EQ(fx.backend->memory().in_use, 0u);
  EXPECT_EQ(fx.pinned->stats().in_use, 0u);
  // A store too small for chunk 2's extent: no_space naming it; what was taken is given back.
  StoreRig small(std::make_unique<MemEngine>(), 64u << 10);
  ASSERT_NE(small.store, nullptr);
  const uint64_t free_before = small.store->free_bytes();
  o.home = Tier::nvme;
  expect_refused(o, small.store.get(), Code::no_space, "chunk 2");
  EXPECT_EQ(small.store->free_bytes(), free_before);
  EXPECT_EQ(fx.backend->memory().in_use, 0u);
  EXPECT_EQ(fx.pinned->stats().in_use, 0u);
  // A store given with the cpu home is not used.
  o.home = Tier::cpu;
  auto g = GradientOffloader::create(*fx.backend, *fx.pinned, o, nullptr, nullptr, small.store.get());
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(small.store->free_bytes(), free_before);
}

}  // namespace
}  // namespace strata
