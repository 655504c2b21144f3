// Backend conformance suite (backend_ops_suite.h) on the CUDA backend, in fp32, bf16 and fp16
// activations (CTest label gpu; every test skips with the reason when no CUDA device is visible),
// plus the CUDA-only refusal of heads larger than its attention kernel holds.
#include "tests/runtime/backend_ops_suite.h"

namespace strata::ops_test {
namespace {

INSTANTIATE_TEST_SUITE_P(Cuda, BackendOpsTest,
                         ::testing::Values(OpsParam{BackendKind::cuda, DType::f32},
                                           OpsParam{BackendKind::cuda, DType::bf16},
                                           OpsParam{BackendKind::cuda, DType::f16}),
                         ops_param_name);

INSTANTIATE_TEST_SUITE_P(Cuda, StridedOpsTest,
                         ::testing::Values(OpsParam{BackendKind::cuda, DType::f32},
                                           OpsParam{BackendKind::cuda, DType::bf16},
                                           OpsParam{BackendKind::cuda, DType::f16}),
                         ops_param_name);

class CudaBackendOps : public BackendOpsTest {};

TEST_P(CudaBackendOps, RefusesOversizedHeads) {
  const int64_t HS = 512;  // beyond the attention kernel's 256
  Tensor q = f32(HS, random(HS)), out = f32(HS), lse = f32(1);
  Status s = ops().attention_forward(DType::f32, out.data, lse.f(), q.data, q.data, q.data, 1, 1, 1, 1, HS);
  EXPECT_EQ(s.code(), Code::invalid_argument) << s.to_string();
  EXPECT_NE(s.message().find("HS = 512"), std::string::npos) << s.to_string();
  EXPECT_EQ(read_bytes(out), std::vector<uint8_t>(out.bytes(), kSentinel));
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaBackendOps, ::testing::Values(OpsParam{BackendKind::cuda, DType::f32}),
                         ops_param_name);

}  // namespace
}  // namespace strata::ops_test
