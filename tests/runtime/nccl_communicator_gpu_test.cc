// The NCCL communicator (runtime/cuda/nccl_communicator.h) as a real NCCL world of one on a GPU
// (CTest label `gpu`), asked for with CommKind::nccl: every collective's bytes equal the
// LocalCommunicator's on the same inputs (on the compute stream and on another, whose ordered sum
// is fenced onto the compute stream); the sums equal the backend's accumulate_widened of the one
// contribution (a -0.0 stays); bad arguments are refused before anything is queued and leave the
// communicator usable; a duplicate (ncclCommSplit) runs on the comm stream beside it. Several ranks
// need several GPUs (NCCL refuses two ranks on one device): `mpirun -np N comm_mpi_check
// collectives cuda` checks the ordered sums across ranks bit for bit (tools/gpu_check.sh's comm
// phase, with two or more GPUs). Skips with the reason without a GPU or without NCCL built in.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_required.h"

#include "runtime/backend.h"
#include "runtime/communicator.h"

namespace strata {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// Floats whose sums depend on the order (1e8 and -1 mixed), with -0.0, a subnormal and infinities.
std::vector<float> awkward_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    switch (i % 7) {
      case 0: v[i] = -0.0f; break;
      case 1: v[i] = 1e8f * dist(rng); break;
      case 2: v[i] = std::numeric_limits<float>::denorm_min() * 3; break;
      case 3: v[i] = i % 14 == 3 ? std::numeric_limits<float>::infinity() : -1.0f; break;
      default: v[i] = dist(rng);
    }
  }
  return v;
}

std::string nccl_version() {
  for (const auto& [name, version] : cuda_library_versions())
    if (name == "NCCL") return version;
  return "not built in";
}

class NcclWorldOfOne : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) STRATA_GPU_SKIP(why);
    if (nccl_version() == "not built in") GTEST_SKIP() << "this strata was built without NCCL";
    BackendOptions bo;
    bo.kind = BackendKind::cuda;
    bo.memory_budget = 256 * kMiB;
    StatusOr<std::unique_ptr<Backend>> b = make_backend(bo);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    backend_ = std::move(b).value();
    CommOptions co;
    co.kind = CommKind::nccl;
    StatusOr<std::unique_ptr<Communicator>> c = make_communicator(*backend_, LaunchInfo{}, co);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    nccl_ = std::move(c).value();
    local_ = make_local_communicator(*backend_);
  }
  void TearDown() override {
    nccl_.reset();  // before the backend it queues on
    local_.reset();
  }

  float* alloc(size_t n) {
    StatusOr<void*> p = backend_->allocate(n * sizeof(float), "nccl test");
    EXPECT_TRUE(p.is_ok()) << p.status().to_string();
    return p.is_ok() ? static_cast<float*>(*p) : nullptr;
  }
  void put(float* device, const std::vector<float>& host) {
    ASSERT_TRUE(backend_->copy_to_device(device, host.data(), host.size() * 4, Stream::h2d).is_ok());
    ASSERT_TRUE(backend_->synchronize(Stream::h2d).is_ok());
  }
  // n floats at `device` once `comm`'s work on `s` and the backend's compute stream are done.
  std::vector<float> get(Communicator& comm, Stream s, const float* device, size_t n) {
    std::vector<float> host(n);
    Status st = comm.synchronize(s);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_TRUE(backend_->synchronize(Stream::compute).is_ok());
    EXPECT_TRUE(backend_->copy_to_host(host.data(), device, n * 4, Stream::d2h).is_ok());
    EXPECT_TRUE(backend_->synchronize(Stream::d2h).is_ok());
    return host;
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> nccl_;
  std::unique_ptr<Communicator> local_;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST_F(NcclWorldOfOne, IsANcclRankZeroOfOne) {
  EXPECT_EQ(nccl_->name(), "nccl");
  EXPECT_EQ(nccl_->rank(), 0);
  EXPECT_EQ(nccl_->size(), 1);
}

// Each op on both communicators from the same input into separate outputs (pre-filled with
// different garbage), compared bit for bit; on the compute stream, then on h2d (the ordered sums
// then run on the compute stream between two events).
TEST_F(NcclWorldOfOne, EveryCollectivesBytesEqualTheLocalCommunicators) {
  const size_t n = (3 * kMiB) / 4 + 5;  // not a multiple of anything NCCL likes
  const std::vector<float> x = awkward_floats(n, 1);
  float* in = alloc(n);
  float* out_nccl = alloc(n);
  float* out_local = alloc(n);
  ASSERT_TRUE(in && out_nccl && out_local);
  put(in, x);
  for (Stream s : {Stream::compute, Stream::h2d}) {
    const std::string where = fmt::format(" on the {} stream", stream_name(s));
    auto run = [&](const char* op, auto&& call) {
      put(out_nccl, std::vector<float>(n, 7.0f));
      put(out_local, std::vector<float>(n, -3.0f));
      Status a = call(*nccl_, out_nccl), b = call(*local_, out_local);
      ASSERT_TRUE(a.is_ok()) << op << where << ": " << a.to_string();
      ASSERT_TRUE(b.is_ok()) << op << where << ": " << b.to_string();
      const std::vector<float> got = get(*nccl_, s, out_nccl, n), want = get(*local_, s, out_local, n);
      EXPECT_TRUE(same_bits(got, want)) << op << where;
      EXPECT_TRUE(same_bits(got, x)) << op << where << ": a world of one moves its input as is";
    };
    run("all_gather", [&](Communicator& c, float* out) { return c.all_gather(in, out, n * 4, s); });
    run("all_to_all", [&](Communicator& c, float* out) { return c.all_to_all(in, out, n * 4, s); });
    run("reduce_scatter", [&](Communicator& c, float* out) { return c.reduce_scatter(in, out, n, s); });
    run("all_reduce", [&](Communicator& c, float* out) { return c.all_reduce(in, out, n, s); });
    // In place: all_gather's send is recv's own block, all_reduce's send is recv; broadcast from
    // the root keeps the buffer; barrier completes.
    run("all_gather in place", [&](Communicator& c, float* out) {
      Status st = c.all_reduce(in, out, n, s);  // out = x
      return st.is_ok() ? c.all_gather(out, out, n * 4, s) : st;
    });
    run("all_reduce in place", [&](Communicator& c, float* out) {
      Status st = c.all_gather(in, out, n * 4, s);
      return st.is_ok() ? c.all_reduce(out, out, n, s) : st;
    });
    run("broadcast", [&](Communicator& c, float* out) {
      Status st = c.all_gather(in, out, n * 4, s);
      if (st.is_ok()) st = c.broadcast(out, n * 4, 0, s);
      return st.is_ok() ? c.barrier(s) : st;
    });
  }
}

// The sum of one rank's contribution is the backend's accumulate_widened with first = true: the
// same bits (-0.0 stays -0.0: a sum starting from +0.0 would turn it into +0.0), at 4000 B and 5 MiB.
TEST_F(NcclWorldOfOne, OrderedSumsAreAccumulateWidenedsBits) {
  for (size_t n : {size_t{1000}, size_t{5 * kMiB / 4}}) {
    const std::vector<float> x = awkward_floats(n, static_cast<uint32_t>(n));
    float* in = alloc(n);
    float* want_dev = alloc(n);
    float* got_dev = alloc(n);
    ASSERT_TRUE(in && want_dev && got_dev);
    put(in, x);
    ASSERT_TRUE(backend_->ops().accumulate_widened(want_dev, in, DType::f32, static_cast<int64_t>(n), true).is_ok());
    const std::vector<float> want = get(*nccl_, Stream::compute, want_dev, n);
    for (float v : want) ASSERT_FALSE(std::isnan(v));
    ASSERT_TRUE(nccl_->reduce_scatter(in, got_dev, n, Stream::compute).is_ok());
    EXPECT_TRUE(same_bits(get(*nccl_, Stream::compute, got_dev, n), want)) << "reduce_scatter of " << n;
    ASSERT_TRUE(nccl_->all_reduce(in, got_dev, n, Stream::compute).is_ok());
    EXPECT_TRUE(same_bits(get(*nccl_, Stream::compute, got_dev, n), want)) << "all_reduce of " << n;
    EXPECT_TRUE(std::signbit(get(*nccl_, Stream::compute, got_dev, 1)[0])) << "element 0 is -0.0";
    for (float* p : {in, want_dev, got_dev}) ASSERT_TRUE(backend_->release(p).is_ok());
  }
}

// Refused before anything is queued, each naming what is wrong; the communicator stays usable.
TEST_F(NcclWorldOfOne, BadArgumentsAreRefusedAndLeaveItUsable) {
  const size_t n = 256;
  float* a = alloc(n);
  float* b = alloc(n);
  ASSERT_TRUE(a && b);
  std::vector<float> host(n);
  auto refused = [](const Status& st, const char* what) {
    EXPECT_EQ(st.code(), Code::invalid_argument) << st.to_string();
    EXPECT_NE(st.message().find(what), std::string::npos) << st.to_string();
    EXPECT_NE(st.message().find("on rank 0 of 1"), std::string::npos) << st.to_string();
  };
  const Stream s = Stream::compute;
  refused(nccl_->all_gather(nullptr, b, 16, s), "null send buffer");
  refused(nccl_->all_gather(host.data(), b, 16, s), "not inside one live block");  // host memory
  refused(nccl_->all_gather(a, b, n * 8, s), "not inside one live block");         // past the block
  refused(nccl_->all_gather(a + 1, a, 64, s), "overlaps recv");
  refused(nccl_->all_to_all(a, a + 4, 64, s), "overlap");
  refused(nccl_->reduce_scatter(a, a + 8, 16, s), "overlap");
  refused(nccl_->all_reduce(a, a + 1, 16, s), "not the same buffer");
  refused(nccl_->broadcast(a, 16, 1, s), "root 1 is not a rank");
  refused(nccl_->broadcast(a, 16, -1, s), "root -1 is not a rank");
  put(a, std::vector<float>(n, 2.5f));
  ASSERT_TRUE(nccl_->all_gather(a, b, n * 4, s).is_ok());
  EXPECT_EQ(get(*nccl_, s, b, n), std::vector<float>(n, 2.5f));
}

// duplicate(): a second NCCL communicator (ncclCommSplit) over the same world, driven on the comm
// stream while the first reduces on the compute stream (ZeRO-3's gathers ahead beside the gradient
// exchange): both give their bytes, and each still works alone afterwards.
TEST_F(NcclWorldOfOne, ADuplicateGathersOnTheCommStreamBesideTheFirst) {
  StatusOr<std::unique_ptr<Communicator>> dup = nccl_->duplicate();
  ASSERT_TRUE(dup.is_ok()) << dup.status().to_string();
  Communicator& second = **dup;
  EXPECT_EQ(second.name(), "nccl");
  EXPECT_EQ(second.rank(), 0);
  EXPECT_EQ(second.size(), 1);
  const size_t n = kMiB / 4 + 3;
  const std::vector<float> x = awkward_floats(n, 3), y = awkward_floats(n, 4);
  float* a = alloc(n);
  float* b = alloc(n);
  float* sums = alloc(n);
  float* gathered = alloc(n);
  ASSERT_TRUE(a && b && sums && gathered);
  put(a, x);
  put(b, y);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(nccl_->reduce_scatter(a, sums, n, Stream::compute).is_ok());
    ASSERT_TRUE(second.all_gather(b, gathered, n * 4, Stream::comm).is_ok());
  }
  EXPECT_TRUE(same_bits(get(second, Stream::comm, gathered, n), y));
  EXPECT_TRUE(same_bits(get(*nccl_, Stream::compute, sums, n), x));
  (*dup).reset();  // the duplicate goes first; the first communicator still works
  ASSERT_TRUE(nccl_->all_gather(b, gathered, n * 4, Stream::compute).is_ok());
  EXPECT_TRUE(same_bits(get(*nccl_, Stream::compute, gathered, n), y));
}

}  // namespace
}  // namespace strata
