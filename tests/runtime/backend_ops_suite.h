// The backend conformance suite: every ComputeOps op run on a backend (the test parameter names
// the backend and the activation dtype: fp32, bf16, fp16) with inputs made on the host and copied
// in, results copied back and compared with the float64 references of backend_ops_reference.h,
// outputs guarded (backend_ops_fixture.h); the casts, gradient checks, AdamW, the rounding of
// accumulated gradients and argument errors are in backend_ops_suite_checks.h, the padded-row
// (strided) matmul and cross-entropy in backend_ops_suite_strided.h, the embedding ops over row
// tiles of the table in backend_ops_suite_embedding_tiles.h. Backward ops start
// from non-zero gradients, so the += contract is checked too. Included by backend_ops_test.cc
// (CPU) and backend_ops_gpu_test.cc (CUDA, label gpu), each instantiating it for its backend.
// Tolerances: activation_tol (backend_ops_fixture.h), derived per dtype; fp32 statistics (mean,
// rstd, lse) are computed from the stored inputs, so they meet kF32 in every dtype.
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "tests/runtime/backend_ops_fixture.h"
#include "tests/runtime/backend_ops_reference.h"
#include "tests/runtime/backend_ops_suite_checks.h"  // casts, gradient checks, AdamW, argument errors
#include "tests/runtime/backend_ops_suite_embedding_tiles.h"  // embedding ops over table row tiles
#include "tests/runtime/backend_ops_suite_strided.h"  // padded rows (matmul, cross-entropy): StridedOpsTest

namespace strata::ops_test {

namespace ref = ops_reference;

inline std::vector<double> plus(std::vector<double> a, const std::vector<double>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

TEST_P(BackendOpsTest, MatmulForwardAndAccumulatingBackward) {
  const int64_t N = 6, C = 40, OC = 24;
  Tensor inp = act(N * C, random(N * C)), w = act(OC * C, random(OC * C)), bias = act(OC, random(OC));
  Tensor out = act(N * OC), out_nobias = act(N * OC);
  ASSERT_TRUE(ops().matmul_forward(dt(), out.data, inp.data, w.data, bias.data, N, C, OC).is_ok());
  ASSERT_TRUE(ops().matmul_forward(dt(), out_nobias.data, inp.data, w.data, nullptr, N, C, OC).is_ok());
  expect_near(read(out), ref::matmul(inp.host, w.host, bias.host, N, C, OC), act_tol(), "out");
  expect_near(read(out_nobias), ref::matmul(inp.host, w.host, {}, N, C, OC), act_tol(), "out without bias");

  Tensor dout = act(N * OC, random(N * OC)), dinp = act(N * C, random(N * C)), dw = act(OC * C, random(OC * C));
  Tensor db = act(OC, random(OC));
  std::vector<double> want_dinp = dinp.host, want_dw = dw.host, want_db = db.host;
  ASSERT_TRUE(
      ops().matmul_backward(dt(), dinp.data, dw.data, db.data, dout.data, inp.data, w.data, N, C, OC).is_ok());
  ref::matmul_backward(want_dinp, want_dw, want_db, dout.host, inp.host, w.host, N, C, OC);
  expect_near(read(dinp), want_dinp, act_tol(), "dinp");
  expect_near(read(dw), want_dw, act_tol(), "dweight");
  expect_near(read(db), want_db, act_tol(), "dbias");
}

// GradStore::overwrite gives the value of zeroing the gradient first, whatever it held (NaN here:
// the old value must not be read): bit for bit fill_zero + add on the CPU backend, and the float64
// reference from zero on every backend.
TEST_P(BackendOpsTest, BackwardOverwriteIsZeroThenAdd) {
  const double kNaN = std::numeric_limits<double>::quiet_NaN();
  const int64_t N = 6, C = 40, OC = 24;
  Tensor inp = act(N * C, random(N * C)), w = act(OC * C, random(OC * C)), dout = act(N * OC, random(N * OC));
  Tensor dinp = act(N * C, std::vector<double>(N * C, kNaN)), dw = act(OC * C, std::vector<double>(OC * C, kNaN));
  Tensor db = act(OC, std::vector<double>(OC, kNaN));
  Tensor dinp0 = act(N * C, std::vector<double>(N * C, 0.0)), dw0 = act(OC * C, std::vector<double>(OC * C, 0.0));
  Tensor db0 = act(OC, std::vector<double>(OC, 0.0));
  ASSERT_TRUE(ops().matmul_backward(dt(), dinp.data, dw.data, db.data, dout.data, inp.data, w.data, N, C, OC, 0,
                                    GradStore::overwrite, GradStore::overwrite).is_ok());
  ASSERT_TRUE(ops().matmul_backward(dt(), dinp0.data, dw0.data, db0.data, dout.data, inp.data, w.data, N, C, OC)
                  .is_ok());
  std::vector<double> want_dinp(N * C, 0.0), want_dw(OC * C, 0.0), want_db(OC, 0.0);
  ref::matmul_backward(want_dinp, want_dw, want_db, dout.host, inp.host, w.host, N, C, OC);
  expect_near(read(dinp), want_dinp, act_tol(), "overwritten dinp");
  expect_near(read(dw), want_dw, act_tol(), "overwritten dweight");
  expect_near(read(db), want_db, act_tol(), "overwritten dbias");
  // Each store chosen on its own: dinp overwritten, dweight (and dbias) added to.
  Tensor dinp_mixed = act(N * C, std::vector<double>(N * C, kNaN)), dw_mixed = act(OC * C, random(OC * C));
  std::vector<double> want_dw_mixed = dw_mixed.host, no_dinp, no_db;
  ASSERT_TRUE(ops().matmul_backward(dt(), dinp_mixed.data, dw_mixed.data, nullptr, dout.data, inp.data, w.data, N,
                                    C, OC, 0, GradStore::overwrite, GradStore::add).is_ok());
  std::vector<double> unused_dinp(N * C, 0.0), unused_db(OC, 0.0);
  ref::matmul_backward(unused_dinp, want_dw_mixed, unused_db, dout.host, inp.host, w.host, N, C, OC);
  expect_near(read(dinp_mixed), want_dinp, act_tol(), "dinp overwritten beside an added dweight");
  expect_near(read(dw_mixed), want_dw_mixed, act_tol(), "dweight added beside an overwritten dinp");

  const int64_t rows = 4, H = 37, n = rows * H;
  Tensor x = act(n, random(n, -3.0, 3.0)), dy = act(n, random(n)), dx = act(n, std::vector<double>(n, kNaN));
  Tensor dx0 = act(n, std::vector<double>(n, 0.0));
  ASSERT_TRUE(ops().gelu_backward(dt(), dx.data, x.data, dy.data, n, GradStore::overwrite).is_ok());
  ASSERT_TRUE(ops().gelu_backward(dt(), dx0.data, x.data, dy.data, n).is_ok());
  std::vector<double> want_dx(n);
  for (int64_t i = 0; i < n; ++i) want_dx[i] = ref::gelu_grad(x.host[i]) * dy.host[i];
  expect_near(read(dx), want_dx, act_tol(), "overwritten gelu dinp");
  Tensor gu = act(2 * n, random(2 * n, -3.0, 3.0)), dgu = act(2 * n, std::vector<double>(2 * n, kNaN));
  Tensor dgu0 = act(2 * n, std::vector<double>(2 * n, 0.0));
  ASSERT_TRUE(ops().swiglu_backward(dt(), dgu.data, gu.data, dy.data, rows, H, GradStore::overwrite).is_ok());
  ASSERT_TRUE(ops().swiglu_backward(dt(), dgu0.data, gu.data, dy.data, rows, H).is_ok());
  expect_near(read(dgu), read(dgu0), act_tol(), "overwritten swiglu dinp");
  EXPECT_FALSE(ops().gelu_backward(dt(), x.data, x.data, dy.data, n, GradStore::overwrite).is_ok())
      << "an overwritten dinp aliasing inp must be refused";
  if (GetParam().kind == BackendKind::cpu) {
    EXPECT_EQ(read_bytes(dinp), read_bytes(dinp0));
    EXPECT_EQ(read_bytes(dw), read_bytes(dw0));
    EXPECT_EQ(read_bytes(db), read_bytes(db0));
    EXPECT_EQ(read_bytes(dx), read_bytes(dx0));
    EXPECT_EQ(read_bytes(dgu), read_bytes(dgu0));
  }
}

TEST_P(BackendOpsTest, LayerNormForwardAndBackward) {
  const int64_t N = 5, C = 48;
  Tensor x = act(N * C, random(N * C, -2.0, 3.0)), w = act(C, random(C, 0.5, 1.5)), b = act(C, random(C));
  const float eps = 1e-5f;
  Tensor out = act(N * C), mean = f32(N), rstd = f32(N);
  ASSERT_TRUE(ops().layernorm_forward(dt(), out.data, mean.f(), rstd.f(), x.data, w.data, b.data, N, C, eps).is_ok());
  std::vector<double> want_mean, want_rstd;
  ref::row_stats(want_mean, want_rstd, x.host, N, C, eps, false);
  expect_near(read(mean), want_mean, kF32, "mean");
  expect_near(read(rstd), want_rstd, kF32, "rstd");
  const std::vector<double> want_out = ref::norm_forward(x.host, want_mean, want_rstd, w.host, b.host, N, C);
  expect_near(read(out), want_out, act_tol(), "out");

  Tensor dout = act(N * C, random(N * C)), dinp = act(N * C, random(N * C)), dw = act(C, random(C));
  Tensor db = act(C, random(C));
  std::vector<double> want_dinp = dinp.host, want_dw = dw.host, want_db = db.host;
  ASSERT_TRUE(ops().layernorm_backward(dt(), dinp.data, dw.data, db.data, dout.data, x.data, w.data, mean.f(),
                                       rstd.f(), N, C).is_ok());
  ref::norm_backward(want_dinp, want_dw, want_db, dout.host, x.host, w.host, want_mean, want_rstd, N, C, false);
  expect_near(read(dinp), want_dinp, act_tol(), "dinp");
  expect_near(read(dw), want_dw, act_tol(), "dweight");
  expect_near(read(db), want_db, act_tol(), "dbias");
}

TEST_P(BackendOpsTest, RmsNormForwardAndBackward) {
  const int64_t N = 5, C = 48;
  Tensor x = act(N * C, random(N * C, -2.0, 2.0)), w = act(C, random(C, 0.5, 1.5));
  const float eps = 1e-6f;
  Tensor out = act(N * C), rstd = f32(N);
  ASSERT_TRUE(ops().rmsnorm_forward(dt(), out.data, rstd.f(), x.data, w.data, N, C, eps).is_ok());
  std::vector<double> zero_mean, want_rstd, no_db;
  ref::row_stats(zero_mean, want_rstd, x.host, N, C, eps, true);
  expect_near(read(rstd), want_rstd, kF32, "rstd");
  expect_near(read(out), ref::norm_forward(x.host, zero_mean, want_rstd, w.host, {}, N, C), act_tol(), "out");

  Tensor dout = act(N * C, random(N * C)), dinp = act(N * C, random(N * C)), dw = act(C, random(C));
  std::vector<double> want_dinp = dinp.host, want_dw = dw.host;
  ASSERT_TRUE(ops().rmsnorm_backward(dt(), dinp.data, dw.data, dout.data, x.data, w.data, rstd.f(), N, C).is_ok());
  ref::norm_backward(want_dinp, want_dw, no_db, dout.host, x.host, w.host, zero_mean, want_rstd, N, C, true);
  expect_near(read(dinp), want_dinp, act_tol(), "dinp");
  expect_near(read(dw), want_dw, act_tol(), "dweight");
}

TEST_P(BackendOpsTest, GeluSwigluAndResidualForwardAndBackward) {
  const int64_t N = 4, H = 37, n = N * H;  // odd sizes: no vector-width multiple
  Tensor x = act(n, random(n, -3.0, 3.0)), dout = act(n, random(n)), y = act(n), dx = act(n, random(n));
  ASSERT_TRUE(ops().gelu_forward(dt(), y.data, x.data, n).is_ok());
  ASSERT_TRUE(ops().gelu_backward(dt(), dx.data, x.data, dout.data, n).is_ok());
  std::vector<double> want_y(n), want_dx = dx.host;
  for (int64_t i = 0; i < n; ++i) {
    want_y[i] = ref::gelu(x.host[i]);
    want_dx[i] += ref::gelu_grad(x.host[i]) * dout.host[i];
  }
  expect_near(read(y), want_y, act_tol(), "gelu out");
  expect_near(read(dx), want_dx, act_tol(), "gelu dinp");

  Tensor gu = act(2 * n, random(2 * n, -3.0, 3.0)), s = act(n), dgu = act(2 * n, random(2 * n));
  ASSERT_TRUE(ops().swiglu_forward(dt(), s.data, gu.data, N, H).is_ok());
  ASSERT_TRUE(ops().swiglu_backward(dt(), dgu.data, gu.data, dout.data, N, H).is_ok());
  std::vector<double> want_s(n), want_dgu = dgu.host;
  for (int64_t r = 0; r < N; ++r)
    for (int64_t i = 0; i < H; ++i) {
      const double g = gu.host[r * 2 * H + i], u = gu.host[r * 2 * H + H + i], sg = ref::sigmoid(g);
      const double d = dout.host[r * H + i];
      want_s[r * H + i] = g * sg * u;
      want_dgu[r * 2 * H + i] += d * u * (sg + g * sg * (1.0 - sg));
      want_dgu[r * 2 * H + H + i] += d * g * sg;
    }
  expect_near(read(s), want_s, act_tol(), "swiglu out");
  expect_near(read(dgu), want_dgu, act_tol(), "swiglu dinp");

  Tensor sum = act(n), da = act(n, random(n)), db = act(n, random(n));
  ASSERT_TRUE(ops().residual_forward(dt(), sum.data, x.data, dout.data, n).is_ok());
  ASSERT_TRUE(ops().residual_backward(dt(), da.data, db.data, dout.data, n).is_ok());
  expect_near(read(sum), plus(x.host, dout.host), act_tol(), "residual out");
  expect_near(read(da), plus(da.host, dout.host), act_tol(), "residual da");
  expect_near(read(db), plus(db.host, dout.host), act_tol(), "residual db");
}

TEST_P(BackendOpsTest, EncoderAndTokenEmbeddingForwardAndBackward) {
  const int64_t B = 2, T = 5, C = 24, V = 11, maxT = 7;
  const std::vector<int32_t> ids = {3, 0, 3, 10, 7, 3, 7, 1, 0, 10};  // repeats: the scatter must sum
  Tensor tokens = ints(ids), wte = act(V * C, random(V * C)), wpe = act(maxT * C, random(maxT * C));
  Tensor out = act(B * T * C), tok_out = act(B * T * C);
  ASSERT_TRUE(ops().encoder_forward(dt(), out.data, tokens.i(), wte.data, wpe.data, B, T, C, V).is_ok());
  ASSERT_TRUE(ops().token_embedding_forward(dt(), tok_out.data, tokens.i(), wte.data, B * T, C, V).is_ok());
  std::vector<double> want(B * T * C), want_tok(B * T * C);
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t c = 0; c < C; ++c) {
      want_tok[r * C + c] = wte.host[ids[r] * C + c];
      want[r * C + c] = want_tok[r * C + c] + wpe.host[(r % T) * C + c];
    }
  expect_near(read(out), want, act_tol(), "encoder out");
  expect_near(read(tok_out), want_tok, act_tol(), "token embedding out");

  Tensor dout = act(B * T * C, random(B * T * C)), dwte = act(V * C, random(V * C));
  Tensor dwpe = act(maxT * C, random(maxT * C)), dwte_tok = act(V * C, random(V * C));
  std::vector<double> want_dwte = dwte.host, want_dwpe = dwpe.host, want_dwte_tok = dwte_tok.host;
  ASSERT_TRUE(ops().encoder_backward(dt(), dwte.data, dwpe.data, dout.data, tokens.i(), B, T, C, V).is_ok());
  ASSERT_TRUE(ops().token_embedding_backward(dt(), dwte_tok.data, dout.data, tokens.i(), B * T, C, V).is_ok());
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t c = 0; c < C; ++c) {
      want_dwte[ids[r] * C + c] += dout.host[r * C + c];
      want_dwte_tok[ids[r] * C + c] += dout.host[r * C + c];
      want_dwpe[(r % T) * C + c] += dout.host[r * C + c];
    }
  expect_near(read(dwte), want_dwte, act_tol(), "encoder dwte");
  expect_near(read(dwpe), want_dwpe, act_tol(), "encoder dwpe (rows >= T untouched)");
  expect_near(read(dwte_tok), want_dwte_tok, act_tol(), "token embedding dwte");
}

TEST_P(BackendOpsTest, RopeForwardAndBackward) {
  const int64_t B = 2, T = 6, NH = 3, HS = 16, n = B * T * NH * HS, pos = 5;
  const float theta = 10000.0f;
  // dinp is overwritten (NaN before: never read), and may be dout itself.
  Tensor x = act(n, random(n)), y = act(n), dout = act(n, random(n));
  Tensor dx = act(n, std::vector<double>(n, std::numeric_limits<double>::quiet_NaN())), dx_in_place = act(n, dout.host);
  ASSERT_TRUE(ops().rope_forward(dt(), y.data, x.data, B, T, NH, HS, theta, pos).is_ok());
  ASSERT_TRUE(ops().rope_backward(dt(), dx.data, dout.data, B, T, NH, HS, theta, pos).is_ok());
  ASSERT_TRUE(ops().rope_backward(dt(), dx_in_place.data, dx_in_place.data, B, T, NH, HS, theta, pos).is_ok());
  std::vector<double> want_y(n, 0.0), want_dx(n, 0.0);
  ref::rope(want_y, x.host, B, T, NH, HS, theta, pos, false);
  ref::rope(want_dx, dout.host, B, T, NH, HS, theta, pos, true);
  expect_near(read(y), want_y, act_tol(), "rope out");
  expect_near(read(dx), want_dx, act_tol(), "rope dinp");
  EXPECT_EQ(read_bytes(dx_in_place), read_bytes(dx)) << "rope dinp in place";
}

// gelu and rope may run in place and residual_forward may write over a: the results are those of
// a separate output (a backend that narrows an output before it has read the input fails here).
TEST_P(BackendOpsTest, InPlaceForwardsMatchTheReference) {
  const int64_t B = 1, T = 4, NH = 2, HS = 8, n = B * T * NH * HS, pos = 3;
  const float theta = 10000.0f;
  Tensor g = act(n, random(n, -3.0, 3.0)), r = act(n, random(n)), a = act(n, random(n)), b = act(n, random(n));
  std::vector<double> want_g(n), want_r(n, 0.0);
  for (int64_t i = 0; i < n; ++i) want_g[i] = ref::gelu(g.host[i]);
  ref::rope(want_r, r.host, B, T, NH, HS, theta, pos, false);
  ASSERT_TRUE(ops().gelu_forward(dt(), g.data, g.data, n).is_ok());
  ASSERT_TRUE(ops().rope_forward(dt(), r.data, r.data, B, T, NH, HS, theta, pos).is_ok());
  ASSERT_TRUE(ops().residual_forward(dt(), a.data, a.data, b.data, n).is_ok());
  expect_near(read(g), want_g, act_tol(), "gelu in place");
  expect_near(read(r), want_r, act_tol(), "rope in place");
  expect_near(read(a), plus(a.host, b.host), act_tol(), "residual out == a");
}

TEST_P(BackendOpsTest, CausalGroupedQueryAttentionForwardAndBackward) {
  const ref::Attention a{2, 7, 4, 2, 16};  // B, T, NH, NKV (2 query heads per kv head), HS
  const int64_t nq = a.B * a.T * a.NH * a.HS, nk = a.B * a.T * a.NKV * a.HS;
  Tensor q = act(nq, random(nq)), k = act(nk, random(nk)), v = act(nk, random(nk));
  Tensor out = act(nq), lse = f32(a.B * a.NH * a.T);
  ASSERT_TRUE(ops().attention_forward(dt(), out.data, lse.f(), q.data, k.data, v.data, a.B, a.T, a.NH, a.NKV, a.HS)
                  .is_ok());
  Tensor dout = act(nq, random(nq)), dq = act(nq, random(nq)), dk = act(nk, random(nk)), dv = act(nk, random(nk));
  std::vector<double> want_out, want_lse, want_dq = dq.host, want_dk = dk.host, want_dv = dv.host;
  a.run(want_out, want_lse, q.host, k.host, v.host, dout.host, want_dq, want_dk, want_dv);
  expect_near(read(out), want_out, act_tol(), "out");
  expect_near(read(lse), want_lse, kF32, "lse");  // fp32 statistics of the stored inputs
  ASSERT_TRUE(ops().attention_backward(dt(), dq.data, dk.data, dv.data, dout.data, q.data, k.data, v.data, out.data,
                                       lse.f(), a.B, a.T, a.NH, a.NKV, a.HS).is_ok());
  expect_near(read(dq), want_dq, act_tol(), "dq");
  expect_near(read(dk), want_dk, act_tol(), "dk");
  expect_near(read(dv), want_dv, act_tol(), "dv");
}

TEST_P(BackendOpsTest, FusedCrossEntropyWithIgnoredTargets) {
  const int64_t N = 6, V = 50;
  const std::vector<int32_t> ids = {4, -1, 49, 0, -1, 17};
  Tensor logits = act(N * V, random(N * V, -4.0, 4.0)), targets = ints(ids);
  Tensor lse = f32(N), losses = f32(N);
  Tensor result = tensor(DType::u8, sizeof(kernels::CrossEntropyResult));
  auto* result_ptr = static_cast<kernels::CrossEntropyResult*>(result.data);
  ASSERT_TRUE(
      ops().crossentropy_forward(dt(), lse.f(), losses.f(), result_ptr, logits.data, targets.i(), N, V).is_ok());
  std::vector<double> want_lse, want_losses;
  ref::crossentropy(want_lse, want_losses, logits.host, ids, N, V);
  expect_near(read(lse), want_lse, Tol{1e-5, 1e-5}, "lse");  // fp32 sums of <= 50 exps, from stored logits
  expect_near(read(losses), want_losses, Tol{2e-5, 1e-5}, "losses");
  const std::vector<uint8_t> bytes = read_bytes(result);
  kernels::CrossEntropyResult got;
  std::memcpy(&got, bytes.data(), sizeof(got));
  double want_sum = 0.0;
  for (double l : want_losses) want_sum += l;
  EXPECT_EQ(got.valid_count, 4);
  EXPECT_NEAR(got.loss_sum, want_sum, 1e-4);
  EXPECT_NEAR(got.mean_loss, want_sum / 4, 1e-5);

  const float dloss = 0.25f;
  Tensor dlogits = act(N * V, random(N * V));
  std::vector<double> want_d = dlogits.host, want_inplace(N * V, 0.0);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t i = 0; i < V && ids[r] >= 0; ++i) {
      const double g = dloss * (std::exp(logits.host[r * V + i] - want_lse[r]) - (i == ids[r] ? 1.0 : 0.0));
      want_d[r * V + i] += g;
      want_inplace[r * V + i] = g;
    }
  ASSERT_TRUE(ops().crossentropy_backward(dt(), dlogits.data, logits.data, lse.f(), targets.i(), dloss, N, V).is_ok());
  ASSERT_TRUE(ops().crossentropy_backward_inplace(dt(), logits.data, lse.f(), targets.i(), dloss, N, V).is_ok());
  expect_near(read(dlogits), want_d, act_tol(), "dlogits");
  expect_near(read(logits), want_inplace, act_tol(), "in-place dlogits (ignored rows 0)");
}

}  // namespace strata::ops_test
