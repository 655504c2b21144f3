// The second half of the backend conformance suite (included by backend_ops_suite.h, same fixture):
// casts against kernels/cpu/half.h bit for bit, the gradient norm and finite check, AdamW on
// device-resident states against a float64 AdamW, the single rounding of accumulated gradients,
// and the argument errors (wrong shapes, dtypes, ranges outside the arena) that must name the
// problem and queue nothing. Test-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/grad_accumulate.h"
#include "tests/runtime/backend_ops_fixture.h"

namespace strata::ops_test {

TEST_P(BackendOpsTest, CastsRoundLikeTheHalfReference) {
  std::vector<double> values = random(200, -70000.0, 70000.0);  // beyond fp16's range too
  const std::vector<double> edges = {0.0, -0.0, 1e-40, -3e-8, 6.1e-5, 65519.0, 65520.0, 1.0 + 1.0 / 256, INFINITY,
                                     -INFINITY, NAN};
  values.insert(values.end(), edges.begin(), edges.end());
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor src = f32(n, values), bf = tensor(DType::bf16, n), hf = tensor(DType::f16, n);
  Tensor back = f32(n), hf_from_bf = tensor(DType::f16, n);
  ASSERT_TRUE(ops().cast(bf.data, DType::bf16, src.data, DType::f32, n).is_ok());
  ASSERT_TRUE(ops().cast(hf.data, DType::f16, src.data, DType::f32, n).is_ok());
  ASSERT_TRUE(ops().cast(back.data, DType::f32, bf.data, DType::bf16, n).is_ok());
  ASSERT_TRUE(ops().cast(hf_from_bf.data, DType::f16, bf.data, DType::bf16, n).is_ok());
  const std::vector<uint8_t> bf_bytes = read_bytes(bf), hf_bytes = read_bytes(hf), hb_bytes = read_bytes(hf_from_bf);
  const std::vector<double> back_values = read(back);
  for (int64_t i = 0; i < n; ++i) {
    const auto x = static_cast<float>(values[i]);
    uint16_t b, h, hb;
    std::memcpy(&b, &bf_bytes[2 * i], 2);
    std::memcpy(&h, &hf_bytes[2 * i], 2);
    std::memcpy(&hb, &hb_bytes[2 * i], 2);
    EXPECT_EQ(b, kernels::float_to_bf16(x)) << "bf16 of " << x;
    EXPECT_EQ(h, kernels::float_to_fp16(x)) << "fp16 of " << x;
    EXPECT_EQ(hb, kernels::float_to_fp16(kernels::bf16_to_float(b))) << "fp16 of bf16 of " << x;
    const float widened = kernels::bf16_to_float(b);
    if (std::isnan(widened)) {
      EXPECT_TRUE(std::isnan(back_values[i]));
    } else {
      EXPECT_EQ(back_values[i], widened) << "fp32 of bf16 of " << x;
    }
  }
}

TEST_P(BackendOpsTest, GradNormSquaredAndFiniteCheck) {
  const int64_t n = 1000;
  const std::vector<double> g = random(n, -2.0, 2.0);
  for (DType format : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(format)));
    Tensor grad = tensor(format, n, g), sum = f32(1, {1.5}), flag = ints({1});
    ASSERT_TRUE(ops().grad_norm_squared(sum.f(), grad.data, format, n).is_ok());
    ASSERT_TRUE(ops().grad_check_finite(flag.i(), grad.data, format, n).is_ok());
    double want = 1.5;  // the op adds to what the sum held
    for (double x : grad.host) want += x * x;
    expect_near(read(sum), {want}, Tol{0.0, 1e-5}, "sum of squares");  // fp32 tree sum of 1000 terms
    EXPECT_EQ(read(flag)[0], 1.0) << "all finite: the flag stays 1";

    std::vector<double> bad = g;
    bad[777] = format == DType::f32 ? NAN : INFINITY;
    Tensor bad_grad = tensor(format, n, bad);
    ASSERT_TRUE(ops().grad_check_finite(flag.i(), bad_grad.data, format, n).is_ok());
    EXPECT_EQ(read(flag)[0], 0.0) << "one non-finite element clears the flag";
  }
}

// The device twins of kernels/cpu/grad_accumulate.h: bit for bit the host's definition (the
// exactness contract: gradients kept on the device and gradients streamed to the host agree).
TEST_P(BackendOpsTest, AccumulateWidenedAndBlockSumsOfSquaresMatchTheHostDefinition) {
  const int64_t n = 3 * int64_t(kernels::kSumSquaresBlock) + 123;
  const int64_t blocks = 4;
  for (DType format : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(format)));
    Tensor a = tensor(format, n, random(n, -3.0, 3.0)), b = tensor(format, n, random(n, -1e-3, 1e-3));
    Tensor acc = f32(n), partials = f32(2 * blocks);  // 2 floats of storage per double
    ASSERT_TRUE(ops().accumulate_widened(acc.f(), a.data, format, n, /*first=*/true).is_ok());
    ASSERT_TRUE(ops().accumulate_widened(acc.f(), b.data, format, n, /*first=*/false).is_ok());
    ASSERT_TRUE(ops().sum_squares_blocks(reinterpret_cast<double*>(partials.data), acc.f(), DType::f32, n).is_ok());
    const std::vector<uint8_t> a_bytes = read_bytes(a), b_bytes = read_bytes(b);
    std::vector<float> want(n);
    const kernels::FloatFormat f = float_format_of(format, "test").value();
    kernels::accumulate_widened(f, a_bytes.data(), want.data(), size_t(n), true);
    kernels::accumulate_widened(f, b_bytes.data(), want.data(), size_t(n), false);
    const std::vector<uint8_t> got = read_bytes(acc);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), size_t(n) * sizeof(float))) << "fp32 sums differ";
    const std::vector<uint8_t> part = read_bytes(partials);
    for (int64_t k = 0; k < blocks; ++k) {
      double p;
      std::memcpy(&p, part.data() + k * sizeof(double), sizeof(double));
      const size_t at = size_t(k) * kernels::kSumSquaresBlock;
      EXPECT_EQ(p, kernels::sum_squares_block(want.data() + at, std::min<size_t>(kernels::kSumSquaresBlock, n - at)))
          << "block " << k;
    }
    // From one element in: not 16-byte aligned (the CUDA backend's other kernels), the same definitions.
    {
      const size_t es = dtype_size(format);
      Tensor shifted_acc = f32(n);
      ASSERT_TRUE(ops().accumulate_widened(shifted_acc.f() + 1, static_cast<std::byte*>(a.data) + es, format, n - 1,
                                           /*first=*/true).is_ok());
      ASSERT_TRUE(ops().accumulate_widened(shifted_acc.f() + 1, static_cast<std::byte*>(b.data) + es, format, n - 1,
                                           /*first=*/false).is_ok());
      const std::vector<uint8_t> got_shifted = read_bytes(shifted_acc);
      EXPECT_EQ(0, std::memcmp(got_shifted.data() + sizeof(float), want.data() + 1, size_t(n - 1) * sizeof(float)))
          << "fp32 sums of the shifted range differ";
    }
    ASSERT_TRUE(
        ops().sum_squares_blocks(reinterpret_cast<double*>(partials.data), acc.f() + 1, DType::f32, n - 1).is_ok());
    const std::vector<uint8_t> shifted = read_bytes(partials);
    for (int64_t k = 0; k < blocks; ++k) {
      double p;
      std::memcpy(&p, shifted.data() + k * sizeof(double), sizeof(double));
      const size_t at = size_t(k) * kernels::kSumSquaresBlock;
      EXPECT_EQ(p, kernels::sum_squares_block(want.data() + 1 + at,
                                              std::min<size_t>(kernels::kSumSquaresBlock, n - 1 - at)))
          << "block " << k << " of the shifted range";
    }
    // Of the gradient in its own format (a single contribution kept unwidened): the bits of its
    // widened copy, aligned and from one element in.
    std::vector<float> widened_a(n);
    kernels::accumulate_widened(f, a_bytes.data(), widened_a.data(), size_t(n), true);
    for (const int64_t skip : {int64_t{0}, int64_t{1}}) {
      ASSERT_TRUE(ops().sum_squares_blocks(reinterpret_cast<double*>(partials.data),
                                           static_cast<std::byte*>(a.data) + skip * dtype_size(format), format,
                                           n - skip).is_ok());
      const std::vector<uint8_t> own = read_bytes(partials);
      for (int64_t k = 0; k < blocks; ++k) {
        double p;
        std::memcpy(&p, own.data() + k * sizeof(double), sizeof(double));
        const size_t at = size_t(k) * kernels::kSumSquaresBlock;
        EXPECT_EQ(p, kernels::sum_squares_block(widened_a.data() + skip + at,
                                                std::min<size_t>(kernels::kSumSquaresBlock, n - skip - at)))
            << "block " << k << " of the gradient in its own format, from element " << skip;
      }
    }
  }
}

TEST_P(BackendOpsTest, AdamWUpdateOfDeviceResidentStates) {
  const int64_t n = 300;
  kernels::AdamHyper hyper;
  hyper.lr = 1e-2f;
  hyper.weight_decay = 0.1f;
  hyper.step = 3;
  hyper.grad_scale = 0.5f;
  const kernels::AdamConstants c = kernels::adam_constants(hyper);
  Tensor p = f32(n, random(n)), m = f32(n, random(n, -0.1, 0.1)), v = f32(n, random(n, 0.0, 0.01));
  Tensor g = tensor(DType::bf16, n, random(n)), copy = tensor(DType::bf16, n);
  const kernels::AdamFormats formats{kernels::FloatFormat::bf16, kernels::CopyOut::bf16};
  const kernels::AdamSpan span{p.f(), m.f(), v.f(), g.data, copy.data, static_cast<size_t>(n)};
  ASSERT_TRUE(ops().adam_update(c, formats, span).is_ok());
  std::vector<double> want_p(n), want_m(n), want_v(n);
  for (int64_t i = 0; i < n; ++i) {  // torch.optim.AdamW, in double
    const double grad = g.host[i] * c.grad_scale, param = p.host[i] - c.lr_decay * p.host[i];
    want_m[i] = c.beta1 * m.host[i] + c.one_minus_beta1 * grad;
    want_v[i] = c.beta2 * v.host[i] + c.one_minus_beta2 * grad * grad;
    want_p[i] = param - c.step_size * (want_m[i] / (std::sqrt(want_v[i]) * c.inv_sqrt_bias2 + c.eps));
  }
  const std::vector<double> got_p = read(p), got_copy = read(copy);
  expect_near(got_p, want_p, Tol{1e-6, 1e-5}, "param");  // a few fp32 roundings per element
  expect_near(read(m), want_m, Tol{1e-7, 1e-5}, "m");
  expect_near(read(v), want_v, Tol{1e-9, 1e-5}, "v");
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(got_copy[i], kernels::bf16_to_float(kernels::float_to_bf16(static_cast<float>(got_p[i])))) << i;
  }
}

// The pass with 8-bit moments gives kernels/cpu/adam8bit.h's bits (its scalar reference) on every
// backend: weights, bf16 copy, codes and scales, over two whole quantization blocks and a partial
// one, for three steps, each requantizing the codes the one before wrote.
TEST_P(BackendOpsTest, AdamW8bitUpdateGivesTheCpuReferenceBits) {
  const size_t n = 600, blocks = kernels::adam8bit_blocks(n);
  std::vector<double> p0 = random(int64_t(n)), m0 = random(int64_t(n), -0.1, 0.1), v0 = random(int64_t(n), 0.0, 0.01);
  std::vector<float> param(p0.begin(), p0.end()), m(m0.begin(), m0.end()), v(v0.begin(), v0.end());
  std::vector<int8_t> m_code(n);
  std::vector<uint8_t> v_code(n);
  std::vector<float> m_scale(blocks), v_scale(blocks);
  std::vector<uint16_t> copy(n);
  kernels::Adam8bitSpan host{param.data(), m_code.data(), v_code.data(), m_scale.data(), v_scale.data(),
                             nullptr, copy.data(), n};
  kernels::adam8bit_quantize(m.data(), v.data(), n, host);
  // Device copies: the weights and scales as fp32 tensors, the codes as raw bytes.
  Tensor d_param = f32(int64_t(n), p0), d_copy = tensor(DType::bf16, int64_t(n));
  Tensor d_m_code = f32(int64_t((n + 3) / 4)), d_v_code = f32(int64_t((n + 3) / 4));
  Tensor d_m_scale = f32(int64_t(blocks)), d_v_scale = f32(int64_t(blocks));
  const auto upload = [&](const Tensor& t, const void* from, size_t bytes) {
    ASSERT_TRUE(backend().copy_to_device(t.data, from, bytes, Stream::h2d).is_ok());
    ASSERT_TRUE(backend().synchronize(Stream::h2d).is_ok());
  };
  upload(d_m_code, m_code.data(), n);
  upload(d_v_code, v_code.data(), n);
  upload(d_m_scale, m_scale.data(), blocks * 4);
  upload(d_v_scale, v_scale.data(), blocks * 4);
  Tensor g = tensor(DType::bf16, int64_t(n), random(int64_t(n)));
  const std::vector<uint8_t> grad = read_bytes(g);
  host.grad = grad.data();
  const kernels::AdamFormats formats{kernels::FloatFormat::bf16, kernels::CopyOut::bf16};
  const kernels::Adam8bitSpan device{d_param.f(), static_cast<int8_t*>(d_m_code.data),
                                     static_cast<uint8_t*>(d_v_code.data), d_m_scale.f(), d_v_scale.f(),
                                     g.data, d_copy.data, n};
  for (int64_t step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    kernels::AdamHyper hyper;
    hyper.lr = 1e-2f;
    hyper.weight_decay = 0.1f;
    hyper.step = step;
    hyper.grad_scale = 0.5f;
    const kernels::AdamConstants c = kernels::adam_constants(hyper);
    ASSERT_TRUE(ops().adam8bit_update(c, formats, device).is_ok());
    (void)kernels::adam8bit_update(c, formats, host, kernels::SimdLevel::scalar);
    const auto same = [&](const Tensor& t, const void* want, size_t bytes, const char* what) {
      const std::vector<uint8_t> got = read_bytes(t);
      EXPECT_EQ(std::memcmp(got.data(), want, bytes), 0) << what;
    };
    same(d_param, param.data(), n * 4, "param");
    same(d_copy, copy.data(), n * 2, "bf16 copy");
    same(d_m_code, m_code.data(), n, "m codes");
    same(d_v_code, v_code.data(), n, "v codes");
    same(d_m_scale, m_scale.data(), blocks * 4, "m scales");
    same(d_v_scale, v_scale.data(), blocks * 4, "v scales");
  }
}

// A backward op adds to a gradient in fp32 and rounds once (compute_ops.h). residual_backward:
// each element becomes round(old + dout), ties to even included; matmul_backward's dbias gets the
// column sum of 16 rows of a quarter ulp of 1, which per-row rounding would lose (1 + ulp/4 rounds
// back to 1) and one rounding keeps: 1 + 4 ulp. Every value is exact, so every backend matches
// bit for bit.
// matmul_backward_input_sum adds every term's product in fp32 and rounds once to a 16-bit type.
// Three terms (OC 1, 2, 4) each put a quarter ulp of 1 into every element: onto 1 that is 1 + 3/4
// ulp, which rounds to 1 + ulp, where a rounding after each term would keep 1 (1 + ulp/4 rounds
// back); overwriting NaNs gives the 3/4 ulp alone. Exact values: every backend the same bits.
// Then random terms against a double reference.
TEST_P(BackendOpsTest, InputGradientOfSharedInputRoundsOnce) {
  const double ulp = 2 * unit_roundoff(dt());  // of 1.0
  const int64_t N = 5, C = 3;
  std::vector<Tensor> douts, weights;
  std::vector<InputGradTerm> terms;
  for (const int64_t OC : {1, 2, 4}) {
    douts.push_back(act(N * OC, std::vector<double>(N * OC, ulp / 4 / double(OC))));
    weights.push_back(act(OC * C, std::vector<double>(OC * C, 1.0)));
  }
  for (size_t t = 0; t < douts.size(); ++t) terms.push_back({douts[t].data, weights[t].data, int64_t(1) << t});
  Tensor added = act(N * C, std::vector<double>(N * C, 1.0));
  ASSERT_TRUE(ops().matmul_backward_input_sum(dt(), added.data, terms, N, C).is_ok());
  // fp32 is its own accumulator: each term's add rounds, as separate calls would.
  EXPECT_EQ(read(added), std::vector<double>(N * C, dt() == DType::f32 ? 1.0 : 1.0 + ulp));
  Tensor set = act(N * C, std::vector<double>(N * C, NAN));
  ASSERT_TRUE(ops().matmul_backward_input_sum(dt(), set.data, terms, N, C, GradStore::overwrite).is_ok());
  EXPECT_EQ(read(set), std::vector<double>(N * C, 0.75 * ulp));

  const int64_t M = 9, K = 7;
  std::vector<Tensor> rd, rw;
  std::vector<InputGradTerm> random_terms;
  for (const int64_t OC : {3, 2, 5}) {
    rd.push_back(act(M * OC, random(M * OC)));
    rw.push_back(act(OC * K, random(OC * K)));
  }
  for (size_t t = 0; t < rd.size(); ++t) {
    random_terms.push_back({rd[t].data, rw[t].data, static_cast<int64_t>(rd[t].host.size()) / M});
  }
  Tensor g = act(M * K, random(M * K));
  std::vector<double> want = g.host;
  for (size_t t = 0; t < rd.size(); ++t) {
    const auto OC = int64_t(rd[t].host.size()) / M;
    for (int64_t n = 0; n < M; ++n)
      for (int64_t c = 0; c < K; ++c)
        for (int64_t o = 0; o < OC; ++o) want[n * K + c] += rd[t].host[n * OC + o] * rw[t].host[o * K + c];
  }
  ASSERT_TRUE(ops().matmul_backward_input_sum(dt(), g.data, random_terms, M, K).is_ok());
  expect_near(read(g), want, Tol{8 * ulp, 2 * ulp}, "dinp");  // |values| <= ~4: a few roundings
}

// The terms as the fused q, k, v projection gives them: column blocks of one dout (rows padded with
// NaN, never read) against row blocks of one weight. The double reference on every backend (CUDA
// joins them into one GEMM over K = 10); on the CPU, which sums term by term, the bits of the same
// terms packed.
TEST_P(BackendOpsTest, InputGradientOfColumnBlocksOfOneDout) {
  const double ulp = 2 * unit_roundoff(dt());
  const int64_t M = 9, K = 7, widths[3] = {3, 2, 5}, S = 16;
  const std::vector<double> dout_values = random(M * S), w_values = random(10 * K), g0 = random(M * K);
  std::vector<double> image(M * S, NAN);
  for (int64_t n = 0; n < M; ++n)
    for (int64_t o = 0; o < 10; ++o) image[n * S + o] = dout_values[n * S + o];
  Tensor dout = act(M * S, image), w = act(10 * K, w_values), g = act(M * K, g0), g_packed = act(M * K, g0);
  const size_t es = dtype_size(dt());
  std::vector<InputGradTerm> joined, packed;
  std::vector<Tensor> packed_douts;
  int64_t begin = 0;
  for (const int64_t OC : widths) {
    joined.push_back({static_cast<std::byte*>(dout.data) + begin * es, static_cast<std::byte*>(w.data) + begin * K * es,
                      OC, S});
    std::vector<double> block;
    for (int64_t n = 0; n < M; ++n)
      for (int64_t o = 0; o < OC; ++o) block.push_back(dout_values[n * S + begin + o]);
    packed_douts.push_back(act(M * OC, block));
    packed.push_back({packed_douts.back().data, static_cast<std::byte*>(w.data) + begin * K * es, OC});
    begin += OC;
  }
  std::vector<double> want = g0;
  for (int64_t n = 0; n < M; ++n)
    for (int64_t c = 0; c < K; ++c)
      for (int64_t o = 0; o < 10; ++o) want[n * K + c] += dout_values[n * S + o] * w_values[o * K + c];
  ASSERT_TRUE(ops().matmul_backward_input_sum(dt(), g.data, joined, M, K).is_ok());
  ASSERT_TRUE(ops().matmul_backward_input_sum(dt(), g_packed.data, packed, M, K).is_ok());
  expect_near(read(g), want, Tol{8 * ulp, 2 * ulp}, "dinp from column blocks of one dout");
  if (GetParam().kind == BackendKind::cpu) EXPECT_EQ(read_bytes(g), read_bytes(g_packed));
  Tensor set = act(M * K, std::vector<double>(M * K, NAN));
  ASSERT_TRUE(ops().matmul_backward_input_sum(dt(), set.data, joined, M, K, GradStore::overwrite).is_ok());
  for (int64_t i = 0; i < M * K; ++i) want[i] -= g0[i];
  expect_near(read(set), want, Tol{8 * ulp, 2 * ulp}, "overwritten dinp from column blocks of one dout");
}

// The GPT-2 MLP's projection with its GELU as one op, against matmul_forward + gelu_forward (and
// its input gradient against matmul_backward + gelu_backward): the same bits where the backend
// composes them (the CPU, and fp32 on CUDA); where it fuses them (CUDA, 16-bit: cuBLASLt's GELU
// epilogues on the unrounded fp32 values) within a few roundings. Shapes cuBLASLt takes (16-byte
// rows).
TEST_P(BackendOpsTest, GeluProjectionMatchesItsTwoOps) {
  const double ulp = 2 * unit_roundoff(dt());  // of 1.0
  const int64_t N = 64, C = 32, OC = 48;
  Tensor inp = act(N * C, random(N * C)), w = act(OC * C, random(OC * C, -0.5, 0.5)), b = act(OC, random(OC));
  Tensor act_out = act(N * OC), pre = act(N * OC), want_pre = act(N * OC), want_act = act(N * OC);
  ASSERT_TRUE(ops().matmul_forward_gelu(dt(), act_out.data, pre.data, inp.data, w.data, b.data, N, C, OC).is_ok());
  ASSERT_TRUE(ops().matmul_forward(dt(), want_pre.data, inp.data, w.data, b.data, N, C, OC).is_ok());
  ASSERT_TRUE(ops().gelu_forward(dt(), want_act.data, want_pre.data, N * OC).is_ok());
  const bool composed = !(GetParam().kind == BackendKind::cuda && dt() != DType::f32);
  const Tol tol = composed ? Tol{0.0, 0.0} : Tol{8 * ulp, 4 * ulp};  // |values| <~ 4
  expect_near(read(pre), read(want_pre), tol, "pre");
  expect_near(read(act_out), read(want_act), tol, "act");

  // dpre (N, OC) = gelu'(pre) * (dout (N, C) @ w_proj (C, OC)): the projection back to OC columns.
  Tensor dout = act(N * C, random(N * C)), w_proj = act(C * OC, random(C * OC, -0.5, 0.5));
  Tensor dpre = act(N * OC), dact = act(N * OC), want_dact = act(N * OC), want_dpre = act(N * OC);
  ASSERT_TRUE(ops().matmul_backward_input_gelu(dt(), dpre.data, dact.data, dout.data, w_proj.data, want_pre.data, N,
                                               OC, C).is_ok());
  ASSERT_TRUE(ops().matmul_backward(dt(), want_dact.data, nullptr, nullptr, dout.data, nullptr, w_proj.data, N, OC, C,
                                    0, GradStore::overwrite, GradStore::overwrite).is_ok());
  ASSERT_TRUE(ops().gelu_backward(dt(), want_dpre.data, want_pre.data, want_dact.data, N * OC, GradStore::overwrite)
                  .is_ok());
  expect_near(read(dpre), read(want_dpre), tol, "dpre");
}

TEST_P(BackendOpsTest, AccumulatingIntoAGradientRoundsOnce) {
  const double ulp = 2 * unit_roundoff(dt());  // of 1.0
  std::vector<double> old = {1.0, 1.0 + ulp, 1.0, -1.0, 3.0, 0.0};
  std::vector<double> dout = {ulp / 2, ulp / 2, 0.75 * ulp, -ulp / 2, 0.3, -1e-3};
  const std::vector<double> more_old = random(58, -4.0, 4.0), more_dout = random(58);
  old.insert(old.end(), more_old.begin(), more_old.end());
  dout.insert(dout.end(), more_dout.begin(), more_dout.end());
  const auto n = static_cast<int64_t>(old.size());
  Tensor da = act(n, old), d = act(n, dout);
  ASSERT_TRUE(ops().residual_backward(dt(), da.data, nullptr, d.data, n).is_ok());
  const std::vector<double> got = read(da);
  for (int64_t i = 0; i < n; ++i) {
    const float sum = static_cast<float>(da.host[i]) + static_cast<float>(d.host[i]);  // the fp32 add
    EXPECT_EQ(got[i], stored(sum)) << "da[" << i << "] = " << da.host[i] << " + " << d.host[i];
  }
  EXPECT_EQ(got[0], 1.0) << "1 + half an ulp is a tie: rounds to even";
  EXPECT_EQ(got[1], 1.0 + 2 * ulp) << "1 + ulp + half an ulp is a tie: rounds to even";

  const int64_t N = 16, C = 2, OC = 3;
  Tensor dbias = act(OC, {1.0, 1.0, -1.0}), grads = act(N * OC, std::vector<double>(N * OC, ulp / 4));
  Tensor inp = act(N * C, random(N * C)), w = act(OC * C, random(OC * C));
  ASSERT_TRUE(
      ops().matmul_backward(dt(), nullptr, nullptr, dbias.data, grads.data, inp.data, w.data, N, C, OC).is_ok());
  EXPECT_EQ(read(dbias), (std::vector<double>{1.0 + 4 * ulp, 1.0 + 4 * ulp, -1.0 + 4 * ulp}));
}

// A rejected call returns invalid_argument naming the op and the problem, and queues nothing: the
// output still holds only sentinel bytes after the streams drain.
TEST_P(BackendOpsTest, ArgumentErrorsNameTheProblemAndQueueNothing) {
  const int64_t N = 4, C = 8, OC = 4;
  Tensor inp = act(N * C, random(N * C)), w = act(OC * C, random(OC * C)), out = act(N * OC);
  Tensor stats = f32(N), tokens = ints({0, 1, 2, 3});
  const std::vector<uint8_t> untouched(out.bytes(), kSentinel);
  struct Case {
    Status status;
    std::vector<const char*> words;
  };
  const Case cases[] = {
      {ops().matmul_forward(dt(), out.data, inp.data, w.data, nullptr, N, C, -1), {"matmul_forward", "OC = -1"}},
      {ops().matmul_forward(dt(), out.data, inp.data, w.data, nullptr, N + 100, C, OC),
       {"matmul_forward out", "not inside one live block"}},
      {ops().matmul_forward(dt(), out.data, nullptr, w.data, nullptr, N, C, OC), {"inp is null"}},
      {ops().layernorm_forward(dt(), out.data, stats.f(), stats.f(), inp.data, w.data, w.data, N, C, 0.0f),
       {"layernorm_forward", "eps"}},
      {ops().rope_forward(dt(), out.data, inp.data, 1, 1, 1, 3, 10000.0f, 0), {"rope_forward", "HS = 3", "even"}},
      {ops().attention_forward(dt(), out.data, stats.f(), inp.data, inp.data, inp.data, 1, 1, 3, 2, 1),
       {"attention_forward", "NH = 3", "multiple of NKV = 2"}},
      {ops().crossentropy_forward(dt(), stats.f(), stats.f(), nullptr, out.data, tokens.i(), N, 0),
       {"crossentropy_forward", "V = 0"}},
      {ops().cast(out.data, DType::f32, tokens.data, DType::i32, 4), {"cast source", "i32", "not a float format"}},
      {ops().crossentropy_backward(dt(), out.data, out.data, stats.f(), tokens.i(), 1.0f, N, OC),
       {"must not alias", "crossentropy_backward_inplace"}},
      {ops().gelu_forward(DType::i32, out.data, inp.data, N), {"gelu_forward", "activations in i32"}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), Code::invalid_argument) << c.status.to_string();
    for (const char* word : c.words) {
      EXPECT_NE(c.status.message().find(word), std::string::npos) << c.status.to_string();
    }
  }
  ASSERT_TRUE(backend().synchronize_all().is_ok());
  EXPECT_EQ(read_bytes(out), untouched);
}

// Device ranges must lie inside a live block of this backend: host memory and released blocks
// are refused before anything runs.
TEST_P(BackendOpsTest, RangesOutsideTheArenaAreInvalidArgument) {
  const int64_t n = 64;
  Tensor x = act(n, random(n));
  std::vector<float> host(n, 7.0f);
  Status s = ops().gelu_forward(dt(), host.data(), x.data, n);
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_NE(s.message().find("gelu_forward out"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("not inside one live block"), std::string::npos) << s.to_string();

  StatusOr<void*> gone = backend().allocate(4096, "released");
  ASSERT_TRUE(gone.is_ok());
  ASSERT_TRUE(backend().release(*gone).is_ok());
  s = ops().gelu_forward(dt(), x.data, *gone, n);
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_NE(s.message().find("gelu_forward inp"), std::string::npos) << s.to_string();
  ASSERT_TRUE(backend().synchronize_all().is_ok());
  EXPECT_EQ(host, std::vector<float>(n, 7.0f));
}

}  // namespace strata::ops_test
