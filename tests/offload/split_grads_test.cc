// SplitGrads on the CPU backend: each chunk's gradient goes to the sink that owns it -- the
// device's DeviceGrads or the host's GradientOffloader, each numbering its chunks 0.. in the
// model's order -- and the norm is the owners' per-chunk partials summed in the model's chunk
// order: the bits of one DeviceGrads over every chunk, over two micro-batches. A routing the sinks
// do not match and chunks past the model's are refused.
#include "offload/split_grads.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/half.h"
#include "offload_test_util.h"

namespace strata {
namespace {

// Chunks 0..4 (bf16): 1 and 3 on the device, 0, 2 and 4 on the host.
const std::vector<uint64_t> kChunkElements = {4096, 8192, 12288, 8192, 4096};
const std::vector<bool> kChunkOnDevice = {false, true, false, true, false};

std::vector<uint64_t> sink_bytes(const std::vector<bool>& keep, bool marked) {
  std::vector<uint64_t> out;
  for (size_t c = 0; c < kChunkElements.size(); ++c)
    if (keep.empty() || keep[c] == marked) out.push_back(kChunkElements[c] * 2);
  return out;
}

struct SinkRig {
  SinkRig() {
    backend = test::value_of(make_backend(BackendOptions{.kind = BackendKind::cpu, .memory_budget = 8 << 20}));
    pool = test::value_of(PinnedPool::create(PinnedPoolOptions{.capacity = 16 << 20, .slab_bytes = 1 << 20,
                                                               .allow_cuda = false, .allow_mlock = false,
                                                               .huge_pages = false}));
  }
  std::unique_ptr<DeviceGrads> device_grads(const std::vector<uint64_t>& bytes) {
    std::vector<std::string> names(bytes.size(), "chunk");
    return test::value_of(DeviceGrads::create(*backend, DType::bf16, bytes, names, "test"));
  }
  std::unique_ptr<GradientOffloader> offloader(const std::vector<uint64_t>& bytes) {
    GradientOffloaderOptions o;
    o.format = kernels::FloatFormat::bf16;
    o.chunk_bytes = bytes;
    o.chunk_group.assign(bytes.size(), 0);
    o.group_slots = {2};
    return test::value_of(GradientOffloader::create(*backend, *pool, o));
  }
  std::unique_ptr<Backend> backend;
  std::unique_ptr<PinnedPool> pool;
};

// Two micro-batches of a fake backward, the layers last to first, into `sink`; returns its norm.
double backward_two_micro_batches(GradSink& sink, Backend& backend) {
  EXPECT_TRUE(sink.begin_step().is_ok());
  std::mt19937_64 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int k = 0; k < 2; ++k) {
    sink.set_last_micro_batch(k == 1);
    for (size_t c = kChunkElements.size(); c-- > 0;) {
      std::byte* slot = test::value_of(sink.acquire(c));
      std::vector<uint16_t> host(kChunkElements[c]);
      for (uint16_t& h : host) h = kernels::float_to_half(kernels::FloatFormat::bf16, normal(rng) * 3.0f);
      EXPECT_TRUE(backend.copy_to_device(slot, host.data(), host.size() * 2, Stream::compute).is_ok());
      EXPECT_TRUE(backend.synchronize(Stream::compute).is_ok());  // `host` is read by the queued copy
      EXPECT_TRUE(sink.release(c, /*last=*/true).is_ok());
    }
  }
  return test::value_of(sink.finish_step());
}

TEST(SplitGrads, TheNormIsOneSinksBitsAndEachChunkGoesToItsOwner) {
  SinkRig rig;
  auto whole = rig.device_grads(sink_bytes({}, true));
  const double want = backward_two_micro_batches(*whole, *rig.backend);
  ASSERT_TRUE(std::isfinite(want));
  auto device = rig.device_grads(sink_bytes(kChunkOnDevice, true));
  auto host = rig.offloader(sink_bytes(kChunkOnDevice, false));
  auto split = test::value_of(SplitGrads::create(kChunkOnDevice, *device, *host));
  const double got = backward_two_micro_batches(*split, *rig.backend);
  EXPECT_EQ(std::memcmp(&got, &want, sizeof(double)), 0) << got << " vs " << want;
  // The host took only its chunks: 3 chunks x 2 micro-batches; the device's partials are theirs.
  EXPECT_EQ(host->stats().contributions, 6u);
  for (size_t c = 0, d = 0, h = 0; c < kChunkElements.size(); ++c) {
    const double mine = kChunkOnDevice[c] ? device->partial(d++) : host->partial(h++);
    EXPECT_EQ(mine, whole->partial(c)) << "chunk " << c;
  }
}

TEST(SplitGrads, ARoutingTheSinksDoNotMatchAndChunksPastTheModelAreRefused) {
  SinkRig rig;
  auto device = rig.device_grads(sink_bytes(kChunkOnDevice, true));
  auto host = rig.offloader(sink_bytes(kChunkOnDevice, false));
  const StatusOr<std::unique_ptr<SplitGrads>> wrong =
      SplitGrads::create({true, true, false, true, false}, *device, *host);
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_EQ(wrong.status().code(), Code::invalid_argument);
  EXPECT_NE(wrong.status().message().find("3 chunks routed to the device and 2 to the host"), std::string::npos)
      << wrong.status().message();
  auto split = test::value_of(SplitGrads::create(kChunkOnDevice, *device, *host));
  ASSERT_TRUE(split->begin_step().is_ok());
  EXPECT_EQ(split->acquire(5).status().code(), Code::out_of_range);
  EXPECT_EQ(split->release(7, true).code(), Code::out_of_range);
}

}  // namespace
}  // namespace strata
