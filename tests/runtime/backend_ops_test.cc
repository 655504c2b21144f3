// Backend conformance suite (backend_ops_suite.h) on the CPU backend in fp32, bf16 and fp16
// activations, plus what only the CPU backend can show without a GPU: its fp32 ops are the
// kernels bit for bit (nothing converted on the way), integer activations are refused naming what
// is accepted, and ops run on the compute stream in order, never on the calling thread.
#include <atomic>
#include <thread>

#include "kernels/cpu/ops_attention.h"
#include "kernels/cpu/ops_elementwise.h"
#include "kernels/cpu/ops_matmul.h"
#include "kernels/cpu/ops_norm.h"
#include "tests/runtime/backend_ops_suite.h"

namespace strata::ops_test {
namespace {

INSTANTIATE_TEST_SUITE_P(Cpu, BackendOpsTest,
                         ::testing::Values(OpsParam{BackendKind::cpu, DType::f32},
                                           OpsParam{BackendKind::cpu, DType::bf16},
                                           OpsParam{BackendKind::cpu, DType::f16}),
                         ops_param_name);

INSTANTIATE_TEST_SUITE_P(Cpu, StridedOpsTest,
                         ::testing::Values(OpsParam{BackendKind::cpu, DType::f32},
                                           OpsParam{BackendKind::cpu, DType::bf16},
                                           OpsParam{BackendKind::cpu, DType::f16}),
                         ops_param_name);

class CpuBackendOps : public BackendOpsTest {
 protected:
  // t's fp32 values after all queued compute equal `want` bit for bit.
  void expect_bits(const Tensor& t, const std::vector<float>& want, const char* what) {
    const std::vector<uint8_t> got = read_bytes(t);
    ASSERT_EQ(got.size(), want.size() * sizeof(float)) << what;
    int bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      float x;
      std::memcpy(&x, &got[i * sizeof(float)], sizeof(float));
      if (std::memcmp(&x, &want[i], sizeof(float)) != 0 && bad++ < 3) {
        ADD_FAILURE() << what << "[" << i << "] = " << x << ", the kernel gives " << want[i];
      }
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " elements differ from the kernel's";
  }
  static std::vector<float> floats(const Tensor& t) { return std::vector<float>(t.host.begin(), t.host.end()); }
};

TEST_P(CpuBackendOps, RefusesIntegerActivationsNamingWhatItAccepts) {
  Tensor x = f32(16, random(16)), y = f32(16);
  for (DType dtype : {DType::i32, DType::u8, DType::u16, DType::u32}) {
    Status s = ops().gelu_forward(dtype, y.data, x.data, 16);
    EXPECT_EQ(s.code(), Code::invalid_argument) << s.to_string();
    EXPECT_NE(s.message().find("gelu_forward: activations in " + std::string(dtype_name(dtype))), std::string::npos)
        << s.to_string();
    EXPECT_NE(s.message().find("the CPU backend accepts fp32, bf16 or fp16"), std::string::npos) << s.to_string();
  }
  EXPECT_EQ(read_bytes(y), std::vector<uint8_t>(y.bytes(), kSentinel));
}

// fp32 runs the kernels on the tensors themselves: each result is bit-identical to the kernel
// called directly on host copies of the same inputs (GEMMs with beta = 1, reductions, an op in
// place, attention's saved lse).
TEST_P(CpuBackendOps, Fp32OpsAreTheKernelsBitForBit) {
  const int64_t N = 6, C = 40, OC = 24;
  Tensor inp = f32(N * C, random(N * C)), w = f32(OC * C, random(OC * C)), bias = f32(OC, random(OC));
  Tensor out = f32(N * OC), dout = f32(N * OC, random(N * OC));
  Tensor dinp = f32(N * C, random(N * C)), dw = f32(OC * C, random(OC * C)), db = f32(OC, random(OC));
  Tensor ln = f32(N * C), mean = f32(N), rstd = f32(N), lnw = f32(C, random(C, 0.5, 1.5)), lnb = f32(C, random(C));
  Tensor g = f32(N * C, random(N * C, -3.0, 3.0));
  ASSERT_TRUE(ops().matmul_forward(DType::f32, out.data, inp.data, w.data, bias.data, N, C, OC).is_ok());
  ASSERT_TRUE(
      ops().matmul_backward(DType::f32, dinp.data, dw.data, db.data, dout.data, inp.data, w.data, N, C, OC).is_ok());
  ASSERT_TRUE(ops().layernorm_forward(DType::f32, ln.data, mean.f(), rstd.f(), inp.data, lnw.data, lnb.data, N, C,
                                      1e-5f).is_ok());
  ASSERT_TRUE(ops().gelu_forward(DType::f32, g.data, g.data, N * C).is_ok());

  std::vector<float> want_out(N * OC), want_dinp = floats(dinp), want_dw = floats(dw), want_db = floats(db);
  std::vector<float> want_ln(N * C), want_mean(N), want_rstd(N), want_g = floats(g);
  kernels::matmul_forward(want_out.data(), floats(inp).data(), floats(w).data(), floats(bias).data(), N, C, OC);
  kernels::matmul_backward(want_dinp.data(), want_dw.data(), want_db.data(), floats(dout).data(), floats(inp).data(),
                           floats(w).data(), N, C, OC);
  kernels::layernorm_forward(want_ln.data(), want_mean.data(), want_rstd.data(), floats(inp).data(),
                             floats(lnw).data(), floats(lnb).data(), N, C, 1e-5f);
  kernels::gelu_forward(want_g.data(), want_g.data(), N * C);
  expect_bits(out, want_out, "matmul out");
  expect_bits(dinp, want_dinp, "matmul dinp");
  expect_bits(dw, want_dw, "matmul dweight");
  expect_bits(db, want_db, "matmul dbias");
  expect_bits(ln, want_ln, "layernorm out");
  expect_bits(mean, want_mean, "layernorm mean");
  expect_bits(rstd, want_rstd, "layernorm rstd");
  expect_bits(g, want_g, "gelu in place");

  const int64_t B = 2, T = 5, NH = 4, NKV = 2, HS = 8, nq = B * T * NH * HS, nk = B * T * NKV * HS;
  Tensor q = f32(nq, random(nq)), k = f32(nk, random(nk)), v = f32(nk, random(nk)), att = f32(nq);
  Tensor lse = f32(B * NH * T), datt = f32(nq, random(nq)), dq = f32(nq, random(nq)), dk = f32(nk, random(nk));
  Tensor dv = f32(nk, random(nk));
  ASSERT_TRUE(ops().attention_forward(DType::f32, att.data, lse.f(), q.data, k.data, v.data, B, T, NH, NKV, HS)
                  .is_ok());
  ASSERT_TRUE(ops().attention_backward(DType::f32, dq.data, dk.data, dv.data, datt.data, q.data, k.data, v.data,
                                       att.data, lse.f(), B, T, NH, NKV, HS).is_ok());
  std::vector<float> want_att(nq), want_lse(B * NH * T), want_dq = floats(dq), want_dk = floats(dk);
  std::vector<float> want_dv = floats(dv);
  kernels::attention_forward(want_att.data(), want_lse.data(), floats(q).data(), floats(k).data(), floats(v).data(),
                             B, T, NH, NKV, HS);
  kernels::attention_backward(want_dq.data(), want_dk.data(), want_dv.data(), floats(datt).data(), floats(q).data(),
                              floats(k).data(), floats(v).data(), want_att.data(), want_lse.data(), B, T, NH, NKV,
                              HS);
  expect_bits(att, want_att, "attention out");
  expect_bits(lse, want_lse, "attention lse");
  expect_bits(dq, want_dq, "attention dq");
  expect_bits(dk, want_dk, "attention dk");
  expect_bits(dv, want_dv, "attention dv");
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
