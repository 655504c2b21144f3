// OptimizerPipeline: the per-chunk state image layout (aligned, disjoint regions, right sizes for
// fp32 and 8-bit states); pattern round trips through walks with and without write back, homes cpu
// and nvme (in-memory, posix and io_uring engines), 3 and 5 staging buffers, forward and permuted
// orders; AdamW through the pipeline bit-identical to the same cpu_adam_step over plain buffers;
// read-ahead and the staging bound seen in the stats and the pinned pool; faults (EIO past the
// retries, a torn write caught by the CRC, ENOSPC) stopping the walk with an error naming the chunk.
#include "offload/optimizer_pipeline.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "offload/fault_engine.h"
#include "offload/mem_engine.h"
#include "offload/trace.h"
#include "offload_test_util.h"

namespace strata {
namespace {

using test::value_of;

// A pool, and for nvme homes a one-path store over `engine` whose stripe unit covers the whole
// reservation, so each extent moves in one request (fault rules can count requests per chunk).
struct Rig {
  explicit Rig(Tier home, std::unique_ptr<IoEngine> io = std::make_unique<MemEngine>(), uint32_t io_attempts = 3) {
    pool = value_of(PinnedPool::create(PinnedPoolOptions{.capacity = 64 << 20, .slab_bytes = 1 << 20,
                                                         .allow_cuda = false, .allow_mlock = false,
                                                         .huge_pages = false}));
    engine = std::move(io);
    if (home == Tier::nvme && engine) {
      NvmeStoreOptions so;
      so.paths = {dir.path()};
      so.capacity = 4 << 20;
      so.stripe_unit = 4 << 20;
      so.probe = test::roomy_probe;
      so.io_attempts = io_attempts;
      store = value_of(NvmeStore::create(*engine, so));
    }
  }
  StatusOr<std::unique_ptr<OptimizerPipeline>> make(const OptimizerPipelineOptions& o, TraceRecorder* trace = nullptr) {
    return OptimizerPipeline::create(*pool, store.get(), trace, o);
  }
  test::ScratchDir dir;
  std::unique_ptr<PinnedPool> pool;
  std::unique_ptr<IoEngine> engine;
  std::unique_ptr<NvmeStore> store;
};

// fp32 elements per chunk: odd sizes, a one-slot chunk, a multi-page one.
const std::vector<uint64_t> kSlots = {1024, 3000, 2053, 1, 5000, 700, 4096, 333};

OptimizerPipelineOptions options_for(Tier home, AdamStates states, uint32_t staging,
                                     const std::vector<uint64_t>& slots = kSlots) {
  OptimizerPipelineOptions o;
  o.fp32_elements = slots;
  if (states == AdamStates::q8)
    for (uint64_t n : slots) o.scale_count.push_back(kernels::adam8bit_blocks(n) + 1);  // e.g. two tensors
  o.states = states;
  o.home = home;
  o.staging = staging;
  return o;
}

std::vector<size_t> forward(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; i++) v[i] = i;
  return v;
}

std::vector<size_t> permuted(size_t n, uint64_t seed) {
  std::vector<size_t> v = forward(n);
  std::shuffle(v.begin(), v.end(), std::mt19937_64(seed));
  return v;
}

std::byte pattern(size_t c, uint32_t v, uint64_t i) {
  return static_cast<std::byte>((c * 131 + v * 17 + i * 7 + (i >> 12) * 3 + 1) & 0xFF);
}

// A walk writing version `v` of the pattern into every byte of each visited image.
Status write_pattern(OptimizerPipeline& p, std::span<const size_t> order, uint32_t v, bool write_back = true) {
  return p.for_each_chunk(order, [&](size_t c, ChunkState& s) {
    for (uint64_t i = 0; i < s.image.size(); i++) s.image[i] = pattern(c, v, i);
    return Status::ok();
  }, write_back);
}

// A read-only walk checking version `v` (0: all zero); the visited chunks in visit order.
std::vector<size_t> expect_pattern(OptimizerPipeline& p, std::span<const size_t> order, uint32_t v, Status* status = nullptr) {
  std::vector<size_t> visited;
  Status s = p.for_each_chunk(order, [&](size_t c, ChunkState& st) {
    visited.push_back(c);
    EXPECT_EQ(st.image.size(), p.layout(c).bytes);
    for (uint64_t i = 0; i < st.image.size(); i++) {
      const std::byte want = v == 0 ? std::byte{0} : pattern(c, v, i);
      if (st.image[i] != want) {
        ADD_FAILURE() << "chunk " << c << " byte " << i << " holds " << int(st.image[i]) << ", want " << int(want);
        break;
      }
    }
    return Status::ok();
  }, /*write_back=*/false);
  if (status) *status = s;
  else EXPECT_TRUE(s.is_ok()) << s.to_string();
  return visited;
}

// ---- layout ---------------------------------------------------------------------------------------

void expect_regions_sane(const OptimizerStateLayout& l, std::vector<StateRegion> regions, uint64_t alignment) {
  uint64_t end = 0;
  for (const StateRegion& r : regions) {
    EXPECT_EQ(r.offset % kStateRegionAlignment, 0u);
    EXPECT_GE(r.offset, end) << "regions overlap or are out of order";
    EXPECT_LT(r.offset - end, kStateRegionAlignment) << "more padding than alignment needs";
    end = r.offset + r.bytes;
  }
  EXPECT_EQ(l.bytes, end);
  EXPECT_EQ(l.padded % alignment, 0u);
  EXPECT_GE(l.padded, l.bytes);
  EXPECT_LT(l.padded - l.bytes, alignment);
}

TEST(OptimizerStateLayout, Fp32RegionsAreAlignedDisjointAndSized) {
  for (uint64_t n : {1ull, 15ull, 16ull, 1000ull, 1024ull, 123457ull}) {
    const OptimizerStateLayout l = optimizer_state_layout(AdamStates::f32, n, 99, 4096);
    EXPECT_EQ(l.fp32_elements, n);
    EXPECT_EQ(l.scale_count, 0u);  // ignored for fp32 states
    EXPECT_EQ(l.master.offset, 0u);
    EXPECT_EQ(l.master.bytes, 4 * n);
    EXPECT_EQ(l.m.bytes, 4 * n);
    EXPECT_EQ(l.v.bytes, 4 * n);
    EXPECT_EQ(l.m_code.bytes + l.v_code.bytes + l.m_scale.bytes + l.v_scale.bytes, 0u);
    expect_regions_sane(l, {l.master, l.m, l.v}, 4096);
  }
  // 1024 slots: 4 KiB per state, no padding anywhere.
  const OptimizerStateLayout l = optimizer_state_layout(AdamStates::f32, 1024, 0);
  EXPECT_EQ(l.m.offset, 4096u);
  EXPECT_EQ(l.v.offset, 8192u);
  EXPECT_EQ(l.padded, 12288u);
}

TEST(OptimizerStateLayout, EightBitRegionsAreAlignedDisjointAndSized) {
  for (uint64_t n : {1ull, 15ull, 257ull, 1000ull, 123457ull}) {
    const uint64_t s = kernels::adam8bit_blocks(n) + 3;
    for (uint64_t a : {4096ull, 16384ull}) {
      const OptimizerStateLayout l = optimizer_state_layout(AdamStates::q8, n, s, a);
      EXPECT_EQ(l.scale_count, s);
      EXPECT_EQ(l.master.bytes, 4 * n);
      EXPECT_EQ(l.m_code.bytes, n);
      EXPECT_EQ(l.v_code.bytes, n);
      EXPECT_EQ(l.m_scale.bytes, 4 * s);
      EXPECT_EQ(l.v_scale.bytes, 4 * s);
      EXPECT_EQ(l.m.bytes + l.v.bytes, 0u);
      expect_regions_sane(l, {l.master, l.m_code, l.v_code, l.m_scale, l.v_scale}, a);
    }
  }
}

TEST(OptimizerPipeline, OptionsAreChecked) {
  Rig r(Tier::nvme);
  OptimizerPipelineOptions o = options_for(Tier::nvme, AdamStates::f32, 2);
  auto p = r.make(o);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), Code::invalid_argument);
  EXPECT_NE(p.status().message().find("at least 3"), std::string::npos) << p.status().to_string();
  o.staging = 3;
  EXPECT_EQ(OptimizerPipeline::create(*r.pool, nullptr, nullptr, o).status().code(), Code::invalid_argument);
  OptimizerPipelineOptions q = options_for(Tier::cpu, AdamStates::q8, 3);
  q.scale_count.pop_back();
  EXPECT_EQ(r.make(q).status().code(), Code::invalid_argument);
  OptimizerPipelineOptions f = options_for(Tier::cpu, AdamStates::f32, 3);
  f.scale_count.assign(f.fp32_elements.size(), 1);
  EXPECT_EQ(r.make(f).status().code(), Code::invalid_argument);
  f.scale_count.clear();
  f.fp32_elements[2] = 0;
  EXPECT_EQ(r.make(f).status().code(), Code::invalid_argument);
  EXPECT_EQ(r.pool->stats().in_use, 0u);
}

// ---- pattern round trips --------------------------------------------------------------------------

using RoundTripParam = std::tuple<Tier, uint32_t, AdamStates>;
class PipelineRoundTrip : public ::testing::TestWithParam<RoundTripParam> {};

TEST_P(PipelineRoundTrip, WrittenPatternsReadBackInAnyOrder) {
  const auto [home, staging, states] = GetParam();
  Rig r(home);
  const OptimizerPipelineOptions o = options_for(home, states, staging);
  auto made = r.make(o);
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  OptimizerPipeline& p = **made;
  const size_t n = p.chunk_count();
  const std::vector<size_t> fwd = forward(n), perm = permuted(n, 7);

  EXPECT_EQ(expect_pattern(p, fwd, 0), fwd);  // contents start zeroed
  ASSERT_TRUE(write_pattern(p, fwd, 1).is_ok());
  EXPECT_EQ(expect_pattern(p, perm, 1), perm);  // visited in the order given
  EXPECT_EQ(expect_pattern(p, fwd, 1), fwd);
  ASSERT_TRUE(write_pattern(p, perm, 2).is_ok());
  EXPECT_EQ(expect_pattern(p, fwd, 2), fwd);
  // A subset, in a third order.
  const std::vector<size_t> some = {5, 0, 3};
  ASSERT_TRUE(write_pattern(p, some, 3).is_ok());
  for (size_t c = 0; c < n; c++) {
    const size_t one[] = {c};
    const bool rewritten = std::find(some.begin(), some.end(), c) != some.end();
    expect_pattern(p, one, rewritten ? 3 : 2);
  }
  if (home == Tier::nvme) {
    // write_back false: changes made during the visit are dropped (the home keeps its state).
    ASSERT_TRUE(write_pattern(p, fwd, 4, /*write_back=*/false).is_ok());
    expect_pattern(p, some, 3);
  }
}

INSTANTIATE_TEST_SUITE_P(Homes, PipelineRoundTrip,
                         ::testing::Combine(::testing::Values(Tier::cpu, Tier::nvme), ::testing::Values(3u, 5u),
                                            ::testing::Values(AdamStates::f32, AdamStates::q8)),
                         [](const auto& info) {
                           return std::string(tier_name(std::get<0>(info.param))) + "_staging" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  (std::get<2>(info.param) == AdamStates::f32 ? "f32" : "q8");
                         });

class PipelineRealEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineRealEngine, WrittenPatternsReadBackThroughSwapFiles) {
  auto engine = test::make_engine(GetParam(), IoShape{32 << 10, 8});
  if (!engine) GTEST_SKIP() << "io_uring cannot start here";
  Rig r(Tier::nvme, std::move(engine));
  ASSERT_NE(r.store, nullptr);
  for (uint32_t staging : {3u, 5u}) {
    auto made = r.make(options_for(Tier::nvme, AdamStates::f32, staging));
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    OptimizerPipeline& p = **made;
    const std::vector<size_t> fwd = forward(p.chunk_count()), perm = permuted(p.chunk_count(), 11 + staging);
    ASSERT_TRUE(write_pattern(p, fwd, 1).is_ok());
    EXPECT_EQ(expect_pattern(p, perm, 1), perm);
    ASSERT_TRUE(write_pattern(p, perm, 2).is_ok());
    EXPECT_EQ(expect_pattern(p, fwd, 2), fwd);
    EXPECT_EQ(p.stats().max_reads_ahead, staging - 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, PipelineRealEngine, ::testing::Values("posix", "io_uring"),
                         [](const auto& info) { return info.param == "io_uring" ? std::string("uring") : info.param; });

// ---- AdamW through the pipeline -------------------------------------------------------------------

// Chunk c holds these tensors back to back (element counts); slots padded to 1024 (4 KiB).
const std::vector<std::vector<size_t>> kTensors = {{300, 1000}, {4096, 17, 513}, {2500}, {100, 256, 700}, {5000}};

struct ChunkPlan {
  std::vector<size_t> elems, slot_at, scale_at;
  size_t slots = 0, scales = 0;
};

std::vector<ChunkPlan> plan_chunks() {
  std::vector<ChunkPlan> plans;
  for (const auto& t : kTensors) {
    ChunkPlan cp;
    size_t at = 0, s = 0;
    for (size_t e : t) {
      cp.elems.push_back(e);
      cp.slot_at.push_back(at);
      cp.scale_at.push_back(s);
      at += e;
      s += kernels::adam8bit_blocks(e);
    }
    cp.slots = (at + 1023) / 1024 * 1024;
    cp.scales = s;
    plans.push_back(cp);
  }
  return plans;
}

// The tensors of one chunk over a ChunkState's pointers (or the plain reference buffers: same shape).
std::vector<CpuAdamTensor> bind(const ChunkPlan& cp, const ChunkState& s, const float* grad, uint16_t* copy) {
  std::vector<CpuAdamTensor> out;
  for (size_t i = 0; i < cp.elems.size(); i++) {
    CpuAdamTensor t;
    const size_t at = cp.slot_at[i];
    t.param = s.master + at;
    if (s.m != nullptr) {
      t.m = s.m + at;
      t.v = s.v + at;
    } else {
      t.m_code = s.m_code + at;
      t.v_code = s.v_code + at;
      t.m_scale = s.m_scale + cp.scale_at[i];
      t.v_scale = s.v_scale + cp.scale_at[i];
    }
    t.grad = grad + at;
    t.copy_out = copy + at;
    t.n = cp.elems[i];
    out.push_back(t);
  }
  return out;
}

// A chunk's state in plain vectors, laid out like the image (for the reference run).
struct PlainState {
  PlainState(const OptimizerStateLayout& l) : image(l.padded) {}
  std::vector<std::byte> image;
};

std::vector<float> gradient(size_t c, int64_t step, size_t n) {
  std::mt19937 rng(static_cast<uint32_t>(1000 * c + step));
  std::uniform_real_distribution<float> d(-0.1f, 0.1f);
  std::vector<float> g(n);
  for (float& x : g) x = d(rng);
  return g;
}

using AdamParam = std::tuple<Tier, AdamStates>;
class PipelineAdam : public ::testing::TestWithParam<AdamParam> {};

TEST_P(PipelineAdam, StepsThroughThePipelineEqualPlainBuffersBitForBit) {
  const Tier home = std::get<0>(GetParam());
  const AdamStates states = std::get<1>(GetParam());
  const std::vector<ChunkPlan> plans = plan_chunks();
  OptimizerPipelineOptions o;
  o.home = home;
  o.states = states;
  o.staging = 3;
  for (const ChunkPlan& cp : plans) {
    o.fp32_elements.push_back(cp.slots);
    if (states == AdamStates::q8) o.scale_count.push_back(cp.scales);
  }
  Rig r(home);
  auto made = r.make(o);
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  OptimizerPipeline& p = **made;
  const size_t n = p.chunk_count();

  // The reference: the same images in plain memory, viewed through the same layout.
  std::vector<PlainState> ref;
  auto ref_view = [&](size_t c) {
    const OptimizerStateLayout& l = p.layout(c);
    std::byte* img = ref[c].image.data();
    ChunkState s;
    s.master = reinterpret_cast<float*>(img + l.master.offset);
    if (states == AdamStates::f32) {
      s.m = reinterpret_cast<float*>(img + l.m.offset);
      s.v = reinterpret_cast<float*>(img + l.v.offset);
    } else {
      s.m_code = reinterpret_cast<int8_t*>(img + l.m_code.offset);
      s.v_code = reinterpret_cast<uint8_t*>(img + l.v_code.offset);
      s.m_scale = reinterpret_cast<float*>(img + l.m_scale.offset);
      s.v_scale = reinterpret_cast<float*>(img + l.v_scale.offset);
    }
    return s;
  };
  for (size_t c = 0; c < n; c++) {
    ref.emplace_back(p.layout(c));
    std::mt19937 rng(static_cast<uint32_t>(c + 1));
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    float* master = ref_view(c).master;
    for (size_t i = 0; i < plans[c].slots; i++) master[i] = d(rng);
  }
  // Initialization: a fill walk copies the masters in (moments start at zero).
  const std::vector<size_t> fwd = forward(n);
  ASSERT_TRUE(p.for_each_chunk(fwd, [&](size_t c, ChunkState& s) {
    std::memcpy(s.master, ref_view(c).master, plans[c].slots * sizeof(float));
    return Status::ok();
  }, true).is_ok());

  CpuAdamOptions ao;
  ao.states = states;
  ao.block_elems = 1024;
  ao.hyper.lr = 1e-2f;
  ao.hyper.weight_decay = 0.1f;
  ao.formats = kernels::AdamFormats{.grad = kernels::FloatFormat::f32, .copy = kernels::CopyOut::bf16};
  std::vector<std::vector<uint16_t>> copies(n), ref_copies(n);
  for (size_t c = 0; c < n; c++) {
    copies[c].assign(plans[c].slots, 0);
    ref_copies[c].assign(plans[c].slots, 0);
  }
  for (int64_t step = 1; step <= 4; step++) {
    ao.hyper.step = step;
    const std::vector<size_t> order = step % 2 ? fwd : permuted(n, 100 + step);  // placement and order change no bit
    Status s = p.for_each_chunk(order, [&](size_t c, ChunkState& st) {
      const std::vector<float> g = gradient(c, step, plans[c].slots);
      const std::vector<CpuAdamTensor> t = bind(plans[c], st, g.data(), copies[c].data());
      return cpu_adam_step(nullptr, t, ao).status();
    }, true);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    for (size_t c = 0; c < n; c++) {
      const std::vector<float> g = gradient(c, step, plans[c].slots);
      const std::vector<CpuAdamTensor> t = bind(plans[c], ref_view(c), g.data(), ref_copies[c].data());
      ASSERT_TRUE(cpu_adam_step(nullptr, t, ao).is_ok());
    }
  }
  size_t compared = 0;
  ASSERT_TRUE(p.for_each_chunk(fwd, [&](size_t c, ChunkState& st) {
    const OptimizerStateLayout& l = p.layout(c);
    EXPECT_EQ(std::memcmp(st.image.data(), ref[c].image.data(), l.bytes), 0) << "chunk " << c << " state differs";
    EXPECT_EQ(copies[c], ref_copies[c]) << "chunk " << c << " bf16 copy differs";
    const float* m0 = states == AdamStates::f32 ? st.m : st.m_scale;
    EXPECT_NE(m0[0], 0.0f) << "the moments moved";
    compared++;
    return Status::ok();
  }, false).is_ok());
  EXPECT_EQ(compared, n);
}

INSTANTIATE_TEST_SUITE_P(Homes, PipelineAdam,
                         ::testing::Combine(::testing::Values(Tier::cpu, Tier::nvme),
                                            ::testing::Values(AdamStates::f32, AdamStates::q8)),
                         [](const auto& info) {
                           return std::string(tier_name(std::get<0>(info.param))) + "_" +
                                  (std::get<1>(info.param) == AdamStates::f32 ? "f32" : "q8");
                         });

// ---- read-ahead, the staging bound, sizes, trace --------------------------------------------------

TEST(OptimizerPipeline, ReadsRunAheadWithinTheStagingRingAndPinnedBytesAreAsPredicted) {
  for (uint32_t staging : {3u, 5u}) {
    Rig r(Tier::nvme);
    TraceRecorder trace;
    const OptimizerPipelineOptions o = options_for(Tier::nvme, AdamStates::q8, staging);
    const uint64_t free_before = r.store->free_bytes();
    auto made = r.make(o, &trace);
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    OptimizerPipeline& p = **made;
    const uint64_t pinned = optimizer_pipeline_pinned_bytes(o, r.store->alignment());
    EXPECT_EQ(r.pool->stats().in_use, pinned);
    EXPECT_EQ(p.stats().pinned_bytes, pinned);
    uint64_t largest = 0, total = 0;
    for (size_t c = 0; c < p.chunk_count(); c++) {
      largest = std::max(largest, p.layout(c).padded);
      total += p.layout(c).padded;
    }
    EXPECT_EQ(pinned, staging * largest);  // 4 KiB store alignment: no slack per buffer
    EXPECT_EQ(optimizer_pipeline_nvme_bytes(o, r.store->alignment()), total);
    EXPECT_EQ(p.stats().nvme_bytes, total);
    EXPECT_EQ(free_before - r.store->free_bytes(), total);

    const std::vector<size_t> fwd = forward(p.chunk_count());
    ASSERT_TRUE(write_pattern(p, fwd, 1).is_ok());
    EXPECT_EQ(p.stats().write_bytes, total);
    EXPECT_EQ(p.stats().zero_fills, p.chunk_count());  // never written: zeros, no read
    EXPECT_EQ(p.stats().read_bytes, 0u);
    p.reset_stats();
    // Seen from inside each visit: how many chunks after the visited one have their reads begun.
    // The first visit finds the whole ring reading; then each visit overlaps the write of the
    // previous chunk, so staging - 2 reads run ahead until the order runs out.
    const size_t n = p.chunk_count();
    std::vector<uint64_t> ahead;
    ASSERT_TRUE(p.for_each_chunk(fwd, [&](size_t c, ChunkState& st) {
      ahead.push_back(p.stats().reads_ahead - c);  // every read but the first is counted when begun
      for (uint64_t i = 0; i < st.image.size(); i++) st.image[i] = pattern(c, 2, i);
      return Status::ok();
    }, true).is_ok());
    std::vector<uint64_t> want;
    for (size_t i = 0; i < n; i++) want.push_back(std::min<uint64_t>(i == 0 ? staging - 1 : staging - 2, n - 1 - i));
    EXPECT_EQ(ahead, want);
    const OptimizerPipelineStats s = p.stats();
    EXPECT_EQ(s.read_bytes, total);
    EXPECT_EQ(s.write_bytes, total);
    EXPECT_EQ(s.chunks_visited, p.chunk_count());
    EXPECT_EQ(s.max_reads_ahead, staging - 1u);  // at the first visit
    // All but the first visit's own read were begun ahead of their predecessor's visit's end.
    EXPECT_EQ(s.reads_ahead, p.chunk_count() - 1);
    EXPECT_EQ(s.peak_staging_in_use, staging);
    EXPECT_EQ(r.pool->stats().in_use, pinned);  // nothing allocated by the walks
    expect_pattern(p, fwd, 2);
    // Spans on the optimizer's own tracks, one per transfer.
    const std::vector<std::string> tracks = trace.tracks();
    EXPECT_NE(std::find(tracks.begin(), tracks.end(), "optimizer read"), tracks.end());
    EXPECT_NE(std::find(tracks.begin(), tracks.end(), "optimizer write"), tracks.end());
    EXPECT_EQ(trace.span_count(), 4 * p.chunk_count());  // writes of walks 1, 2; reads of walks 2, 3
  }
}

// With an engine that completes reads asynchronously and slowly (the posix engine's workers, plus
// a latency fault), each read is under way while the previous chunk is visited: the walk waits for
// about one read, not one per chunk.
TEST(OptimizerPipeline, ReadsOverlapTheVisitOfThePreviousChunk) {
  constexpr auto kLatency = std::chrono::milliseconds(20);
  auto posix = test::make_engine("posix", IoShape{32 << 10, 8});
  ASSERT_NE(posix, nullptr);
  FaultRule slow{.kind = FaultKind::latency, .op = IoOp::read, .latency = kLatency};
  Rig r(Tier::nvme, std::make_unique<FaultEngine>(std::move(posix), FaultEngineOptions{1, {slow}}));
  auto made = r.make(options_for(Tier::nvme, AdamStates::f32, 3));
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  OptimizerPipeline& p = **made;
  const std::vector<size_t> fwd = forward(p.chunk_count());
  ASSERT_TRUE(write_pattern(p, fwd, 1).is_ok());
  p.reset_stats();
  ASSERT_TRUE(p.for_each_chunk(fwd, [&](size_t, ChunkState&) {
    std::this_thread::sleep_for(kLatency);  // a visit as long as a read
    return Status::ok();
  }, false).is_ok());
  const OptimizerPipelineStats s = p.stats();
  const double serial = std::chrono::duration<double>(kLatency).count() * double(p.chunk_count());
  EXPECT_GE(s.visit_seconds, serial * 0.99);
  EXPECT_LT(s.read_wait_seconds, serial / 2) << "reads did not overlap the visits";
}

TEST(OptimizerPipeline, CpuHomeIsVisitedInPlaceWithoutCopies) {
  Rig r(Tier::cpu);
  const OptimizerPipelineOptions o = options_for(Tier::cpu, AdamStates::f32, 3);
  auto made = r.make(o);
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  OptimizerPipeline& p = **made;
  EXPECT_EQ(r.pool->stats().in_use, optimizer_pipeline_pinned_bytes(o));
  EXPECT_EQ(optimizer_pipeline_nvme_bytes(o), 0u);
  std::vector<std::byte*> first(p.chunk_count()), second(p.chunk_count());
  const std::vector<size_t> fwd = forward(p.chunk_count());
  ASSERT_TRUE(p.for_each_chunk(fwd, [&](size_t c, ChunkState& s) { first[c] = s.image.data(); return Status::ok(); }, true).is_ok());
  ASSERT_TRUE(p.for_each_chunk(fwd, [&](size_t c, ChunkState& s) { second[c] = s.image.data(); return Status::ok(); }, false).is_ok());
  EXPECT_EQ(first, second);
  EXPECT_EQ(std::set<std::byte*>(first.begin(), first.end()).size(), p.chunk_count());
  EXPECT_EQ(p.stats().read_bytes + p.stats().write_bytes, 0u);
}

TEST(OptimizerPipeline, BadOrdersAndVisitErrorsStopTheWalk) {
  Rig r(Tier::nvme);
  auto made = r.make(options_for(Tier::nvme, AdamStates::f32, 3));
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  OptimizerPipeline& p = **made;
  const std::vector<size_t> fwd = forward(p.chunk_count());
  ASSERT_TRUE(write_pattern(p, fwd, 1).is_ok());
  const std::vector<size_t> twice = {1, 2, 1}, outside = {0, 99};
  EXPECT_EQ(write_pattern(p, twice, 2).code(), Code::invalid_argument);
  EXPECT_EQ(write_pattern(p, outside, 2).code(), Code::invalid_argument);
  // A visit that fails at chunk 3 after scribbling on it: 0..2 were written, 3 keeps version 1.
  Status s = p.for_each_chunk(fwd, [&](size_t c, ChunkState& st) {
    for (uint64_t i = 0; i < st.image.size(); i++) st.image[i] = pattern(c, 2, i);
    return c == 3 ? Status(Code::cancelled, "stop") : Status::ok();
  }, true);
  EXPECT_EQ(s.code(), Code::cancelled);
  EXPECT_NE(s.message().find("chunk 3"), std::string::npos) << s.to_string();
  for (size_t c = 0; c < p.chunk_count(); c++) {
    const size_t one[] = {c};
    expect_pattern(p, one, c < 3 ? 2 : 1);
  }
}

// ---- faults ---------------------------------------------------------------------------------------

// The incremental walk (begin_walk / visit_next / end_walk) is for_each_chunk one visit at a time:
// reads run ahead while the caller does other work between visits; misuse is failed_precondition;
// a failing visit ends the walk, the chunks before it written.
TEST(OptimizerPipeline, AnIncrementalWalkVisitsOneChunkPerCall) {
  for (Tier home : {Tier::cpu, Tier::nvme}) {
    SCOPED_TRACE(home == Tier::cpu ? "cpu" : "nvme");
    Rig r(home);
    auto made = r.make(options_for(home, AdamStates::f32, 4));
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    OptimizerPipeline& p = **made;
    const std::vector<size_t> fwd = forward(p.chunk_count());
    ASSERT_TRUE(write_pattern(p, fwd, 1).is_ok());
    EXPECT_EQ(p.visit_next([](size_t, ChunkState&) { return Status::ok(); }).code(), Code::failed_precondition);
    const std::vector<size_t> order = permuted(p.chunk_count(), 5);
    ASSERT_TRUE(p.begin_walk(order, /*write_back=*/true).is_ok());
    EXPECT_TRUE(p.walking());
    EXPECT_EQ(p.begin_walk(order, true).code(), Code::failed_precondition);
    if (home == Tier::nvme) EXPECT_GT(p.stats().peak_staging_in_use, 1u) << "reads begin with the walk";
    std::vector<size_t> visited;
    while (p.walk_remaining() > 0) {
      const size_t want = p.walk_next_chunk();
      ASSERT_TRUE(p.visit_next([&](size_t c, ChunkState& st) {
                     EXPECT_EQ(c, want);
                     visited.push_back(c);
                     for (uint64_t i = 0; i < st.image.size(); i++) st.image[i] = pattern(c, 2, i);
                     return Status::ok();
                   }).is_ok());
    }
    EXPECT_EQ(visited, order);
    EXPECT_EQ(p.visit_next([](size_t, ChunkState&) { return Status::ok(); }).code(), Code::failed_precondition);
    ASSERT_TRUE(p.end_walk().is_ok());
    EXPECT_FALSE(p.walking());
    expect_pattern(p, fwd, 2);
    // A failing visit ends the walk: the next visit_next is outside one, a new walk may begin.
    ASSERT_TRUE(p.begin_walk(fwd, true).is_ok());
    EXPECT_EQ(p.visit_next([](size_t, ChunkState&) { return Status(Code::cancelled, "stop"); }).code(), Code::cancelled);
    EXPECT_FALSE(p.walking());
    EXPECT_TRUE(p.end_walk().is_ok());
    expect_pattern(p, fwd, 2);
  }
}

TEST(OptimizerPipeline, AStateReadFailingPastTheRetriesStopsTheWalkNamingTheChunk) {
  // Reads 0 and 1 pass; every read after (each of the store's three tries) fails with EIO.
  FaultRule eio{.kind = FaultKind::eio, .op = IoOp::read, .skip = 2};
  Rig r(Tier::nvme, std::make_unique<FaultEngine>(std::make_unique<MemEngine>(), FaultEngineOptions{5, {eio}}));
  auto made = r.make(options_for(Tier::nvme, AdamStates::f32, 4));
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  OptimizerPipeline& p = **made;
  const std::vector<size_t> fwd = forward(p.chunk_count());
  ASSERT_TRUE(write_pattern(p, fwd, 1).is_ok());  // never-written chunks need no read
  Status s;
  const std::vector<size_t> visited = expect_pattern(p, fwd, 1, &s);
  EXPECT_EQ(s.code(), Code::io_error) << s.to_string();
  EXPECT_NE(s.message().find("chunk 2"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find(r.store->swap_files()[0]), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("3 times"), std::string::npos) << s.to_string();
  EXPECT_EQ(visited, (std::vector<size_t>{0, 1})) << "unverified state was visited";
  // The writes were good: a later walk that does not read chunk 2 is not blocked by it.
  EXPECT_TRUE(p.write_error().is_ok());
}

TEST(OptimizerPipeline, ATornWriteIsCaughtByTheCrcOnTheNextWalkNamingTheChunk) {
  const size_t chunks = kSlots.size();
  // Walk 1 writes every chunk; in walk 2 the write of chunk 4 (the 5th) is torn yet reports success.
  FaultRule torn{.kind = FaultKind::torn_write, .op = IoOp::write, .skip = static_cast<uint32_t>(chunks + 4), .limit = 1};
  Rig r(Tier::nvme, std::make_unique<FaultEngine>(std::make_unique<MemEngine>(), FaultEngineOptions{9, {torn}}));
  auto made = r.make(options_for(Tier::nvme, AdamStates::q8, 3));
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  OptimizerPipeline& p = **made;
  const std::vector<size_t> fwd = forward(chunks);
  ASSERT_TRUE(write_pattern(p, fwd, 1).is_ok());
  ASSERT_TRUE(write_pattern(p, fwd, 2).is_ok());  // the tear is silent
  EXPECT_EQ(dynamic_cast<FaultEngine&>(*r.engine).injected(FaultKind::torn_write), 1u);
  Status s;
  const std::vector<size_t> visited = expect_pattern(p, fwd, 2, &s);
  EXPECT_EQ(s.code(), Code::corruption) << s.to_string();
  EXPECT_NE(s.message().find("chunk 4"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find(r.store->swap_files()[0]), std::string::npos) << s.to_string();
  EXPECT_EQ(visited, (std::vector<size_t>{0, 1, 2, 3}));
}

TEST(OptimizerPipeline, NoSpaceOnAStateWriteNamesTheChunkAndSticks) {
  // The rule also sees the store's reservation (one allocate): skip it and writes 0 and 1.
  FaultRule full{.kind = FaultKind::enospc, .op = IoOp::write, .skip = 3, .limit = 1};
  Rig r(Tier::nvme, std::make_unique<FaultEngine>(std::make_unique<MemEngine>(), FaultEngineOptions{4, {full}}));
  auto made = r.make(options_for(Tier::nvme, AdamStates::f32, 3));
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  OptimizerPipeline& p = **made;
  const std::vector<size_t> fwd = forward(p.chunk_count());
  Status s = write_pattern(p, fwd, 1);
  EXPECT_EQ(s.code(), Code::no_space) << s.to_string();
  EXPECT_NE(s.message().find("chunk 2"), std::string::npos) << s.to_string();
  EXPECT_EQ(dynamic_cast<FaultEngine&>(*r.engine).injected(FaultKind::enospc), 1u);
  // Sticky: every later walk returns it, visiting nothing (chunk 2 holds no valid state).
  size_t visits = 0;
  Status again = p.for_each_chunk(fwd, [&](size_t, ChunkState&) { visits++; return Status::ok(); }, false);
  EXPECT_EQ(again.code(), Code::no_space);
  EXPECT_NE(again.message().find("chunk 2"), std::string::npos) << again.to_string();
  EXPECT_EQ(visits, 0u);
  EXPECT_EQ(p.write_error().code(), Code::no_space);
}

}  // namespace
}  // namespace strata
