// Backend conformance suite (backend_ops_suite.h) on the CPU backend, which computes in fp32, plus
// what only the CPU backend can show without a GPU: bf16 activations are refused with the advice,
// and ops run on the compute stream in order, never on the calling thread.
#include <atomic>
#include <thread>

#include "tests/runtime/backend_ops_suite.h"

namespace strata::ops_test {
namespace {

INSTANTIATE_TEST_SUITE_P(Cpu, BackendOpsTest, ::testing::Values(OpsParam{BackendKind::cpu, DType::f32}),
                         ops_param_name);

class CpuBackendOps : public BackendOpsTest {};

TEST_P(CpuBackendOps, RefusesSixteenBitActivationsWithTheAdvice) {
  Tensor x = tensor(DType::bf16, 16, random(16)), y = tensor(DType::bf16, 16);
  for (DType dtype : {DType::bf16, DType::f16}) {
    Status s = ops().gelu_forward(dtype, y.data, x.data, 16);
    EXPECT_EQ(s.code(), Code::invalid_argument) << s.to_string();
    EXPECT_NE(s.message().find("gelu_forward"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("the CPU backend computes in fp32; use --dtype fp32 or the CUDA backend"),
              std::string::npos)
        << s.to_string();
  }
  EXPECT_EQ(read_bytes(y), std::vector<uint8_t>(y.bytes(), kSentinel));
}

// The op is queued behind a blocked compute stream: it has not run when the call returns (the
// output, read on the d2h stream, is still sentinel), and runs once the stream moves on.
TEST_P(CpuBackendOps, OpsQueueOnTheComputeStreamWithoutBlockingTheCaller) {
  const int64_t n = 64;
  Tensor a = f32(n, random(n)), b = f32(n, random(n)), out = f32(n);
  std::atomic<bool> release{false};
  ASSERT_TRUE(backend().host_callback(Stream::compute, [&release] {
    while (!release.load()) std::this_thread::yield();
  }).is_ok());
  ASSERT_TRUE(ops().residual_forward(DType::f32, out.data, a.data, b.data, n).is_ok());
  std::vector<uint8_t> before(out.bytes());
  ASSERT_TRUE(backend().copy_to_host(before.data(), out.data, out.bytes(), Stream::d2h).is_ok());
  ASSERT_TRUE(backend().synchronize(Stream::d2h).is_ok());
  EXPECT_EQ(before, std::vector<uint8_t>(out.bytes(), kSentinel));
  release.store(true);
  expect_near(read(out), plus(a.host, b.host), kF32, "residual out after the stream ran");
}

INSTANTIATE_TEST_SUITE_P(Cpu, CpuBackendOps, ::testing::Values(OpsParam{BackendKind::cpu, DType::f32}),
                         ops_param_name);

}  // namespace
}  // namespace strata::ops_test
