// The conformance suite's padded-row cases (part of backend_ops_suite.h): matmul and cross-entropy
// on (rows, cols) tensors whose rows start `stride` > cols elements apart, as the transformer keeps
// its logits (padded_vocab). Input padding holds NaN, so a kernel that read it would poison its
// result; output padding holds a known bit pattern that must come back unchanged. The data columns
// must meet the float64 references and, on the CPU backend, equal the packed layout's results bit
// for bit (the GPU may pick another cuBLAS kernel for the aligned stride). Also the argument checks
// of a stride below the row length and of a strided span past its block.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/runtime/backend_ops_fixture.h"
#include "tests/runtime/backend_ops_reference.h"

namespace strata::ops_test {

namespace ref = ops_reference;

class StridedOpsTest : public BackendOpsTest {
 protected:
  static constexpr double kPadNaN = std::numeric_limits<double>::quiet_NaN();

  // A guarded (rows, stride) tensor: columns [0, cols) of row r hold packed[r * cols ...], the
  // rest `pad`. Its `host` keeps the padded image (pad included).
  Tensor padded(int64_t rows, int64_t cols, int64_t stride, const std::vector<double>& packed, double pad) {
    std::vector<double> image(static_cast<size_t>(rows * stride), pad);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) image[r * stride + c] = packed[r * cols + c];
    return act(rows * stride, image);
  }

  // Columns [0, cols) of each of the rows of a (rows, stride) image, packed.
  template <typename E>
  static std::vector<E> data_columns(const std::vector<E>& image, int64_t rows, int64_t cols, int64_t stride,
                                     size_t esize = 1) {
    std::vector<E> out;
    for (int64_t r = 0; r < rows; ++r) {
      const auto at = image.begin() + static_cast<std::ptrdiff_t>(r * stride * esize);
      out.insert(out.end(), at, at + static_cast<std::ptrdiff_t>(cols * esize));
    }
    return out;
  }

  // The bytes of the padding columns [cols, stride) of every row of a (rows, stride) tensor.
  std::vector<uint8_t> padding_bytes(const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols,
                                     int64_t stride) const {
    const size_t es = dtype_size(dt());
    std::vector<uint8_t> out;
    for (int64_t r = 0; r < rows; ++r) {
      const auto at = bytes.begin() + static_cast<std::ptrdiff_t>((r * stride + cols) * es);
      out.insert(out.end(), at, at + static_cast<std::ptrdiff_t>((stride - cols) * es));
    }
    return out;
  }

  // t (rows, stride) after the queued ops: its data columns meet `want` and, on the CPU, equal the
  // packed tensor's bytes; its padding bytes are those of `before` (read before the op).
  void expect_strided(const Tensor& t, int64_t rows, int64_t cols, int64_t stride, const std::vector<double>& want,
                      const Tensor& packed, const std::vector<uint8_t>& before, const std::string& what) {
    const std::vector<uint8_t> bytes = read_bytes(t);
    expect_near(data_columns(read(t), rows, cols, stride), want, act_tol(), what);
    EXPECT_EQ(padding_bytes(bytes, rows, cols, stride), padding_bytes(before, rows, cols, stride))
        << what << ": a padding column was written";
    if (GetParam().kind == BackendKind::cpu) {
      EXPECT_EQ(data_columns(bytes, rows, cols, stride, dtype_size(dt())), read_bytes(packed))
          << what << ": the strided result differs from the packed one";
    }
  }
};

TEST_P(StridedOpsTest, MatmulWithPaddedRowsLeavesThePaddingAndMatchesPacked) {
  const int64_t N = 6, C = 40, OC = 25, S = 32;  // OC odd, as GPT-2's V; S a multiple of 8
  Tensor inp = act(N * C, random(N * C)), w = act(OC * C, random(OC * C)), bias = act(OC, random(OC));
  const double kPadValue = -1536.0;  // exact in every dtype; not a result of these inputs
  for (const bool with_bias : {true, false}) {
    const void* b = with_bias ? bias.data : nullptr;
    Tensor out = padded(N, OC, S, std::vector<double>(N * OC, 0.0), kPadValue), packed = act(N * OC);
    const std::vector<uint8_t> before = read_bytes(out);
    ASSERT_TRUE(ops().matmul_forward(dt(), out.data, inp.data, w.data, b, N, C, OC, S).is_ok());
    ASSERT_TRUE(ops().matmul_forward(dt(), packed.data, inp.data, w.data, b, N, C, OC).is_ok());
    expect_strided(out, N, OC, S, ref::matmul(inp.host, w.host, with_bias ? bias.host : std::vector<double>{}, N, C, OC),
                   packed, before, with_bias ? "strided out" : "strided out without bias");
  }

  // Backward from a strided dout whose padding is NaN: any read of it would poison every gradient.
  const std::vector<double> dout_values = random(N * OC);
  Tensor dout = padded(N, OC, S, dout_values, kPadNaN), dout_packed = act(N * OC, dout_values);
  const std::vector<double> dinp0 = random(N * C), dw0 = random(OC * C), db0 = random(OC);
  Tensor dinp = act(N * C, dinp0), dw = act(OC * C, dw0), db = act(OC, db0);
  Tensor dinp_p = act(N * C, dinp0), dw_p = act(OC * C, dw0), db_p = act(OC, db0);
  ASSERT_TRUE(ops()
                  .matmul_backward(dt(), dinp.data, dw.data, db.data, dout.data, inp.data, w.data, N, C, OC, S)
                  .is_ok());
  ASSERT_TRUE(ops()
                  .matmul_backward(dt(), dinp_p.data, dw_p.data, db_p.data, dout_packed.data, inp.data, w.data, N, C,
                                   OC)
                  .is_ok());
  std::vector<double> want_dinp = dinp.host, want_dw = dw.host, want_db = db.host;
  ref::matmul_backward(want_dinp, want_dw, want_db, dout_packed.host, inp.host, w.host, N, C, OC);
  expect_near(read(dinp), want_dinp, act_tol(), "dinp from a strided dout");
  expect_near(read(dw), want_dw, act_tol(), "dweight from a strided dout");
  expect_near(read(db), want_db, act_tol(), "dbias from a strided dout");
  if (GetParam().kind == BackendKind::cpu) {
    EXPECT_EQ(read_bytes(dinp), read_bytes(dinp_p));
    EXPECT_EQ(read_bytes(dw), read_bytes(dw_p));
    EXPECT_EQ(read_bytes(db), read_bytes(db_p));
  }
}

// The head's backward as the model runs it: dout in padded rows (NaN padding), every gradient
// overwritten (NaN before: never read). OC = 25 in rows of 32 splits on the GPU into cuBLAS's 24
// rows and a 1-row tail (fp32: 24 + 1 too). The float64 reference from zero, and on the CPU the
// bits of fill_zero + add.
TEST_P(StridedOpsTest, MatmulBackwardOverwritingFromPaddedRows) {
  const int64_t N = 6, C = 40, OC = 25, S = 32;
  Tensor inp = act(N * C, random(N * C)), w = act(OC * C, random(OC * C));
  const std::vector<double> dout_values = random(N * OC);
  Tensor dout = padded(N, OC, S, dout_values, kPadNaN), dout_packed = act(N * OC, dout_values);
  Tensor dinp = act(N * C, std::vector<double>(N * C, kPadNaN)), dw = act(OC * C, std::vector<double>(OC * C, kPadNaN));
  Tensor db = act(OC, std::vector<double>(OC, kPadNaN));
  ASSERT_TRUE(ops()
                  .matmul_backward(dt(), dinp.data, dw.data, db.data, dout.data, inp.data, w.data, N, C, OC, S,
                                   GradStore::overwrite, GradStore::overwrite)
                  .is_ok());
  std::vector<double> want_dinp(N * C, 0.0), want_dw(OC * C, 0.0), want_db(OC, 0.0);
  ref::matmul_backward(want_dinp, want_dw, want_db, dout_packed.host, inp.host, w.host, N, C, OC);
  expect_near(read(dinp), want_dinp, act_tol(), "overwritten dinp from a strided dout");
  expect_near(read(dw), want_dw, act_tol(), "overwritten dweight from a strided dout");
  expect_near(read(db), want_db, act_tol(), "overwritten dbias from a strided dout");
  if (GetParam().kind == BackendKind::cpu) {
    Tensor dinp0 = act(N * C, std::vector<double>(N * C, 0.0)), dw0 = act(OC * C, std::vector<double>(OC * C, 0.0));
    Tensor db0 = act(OC, std::vector<double>(OC, 0.0));
    ASSERT_TRUE(ops()
                    .matmul_backward(dt(), dinp0.data, dw0.data, db0.data, dout.data, inp.data, w.data, N, C, OC, S)
                    .is_ok());
    EXPECT_EQ(read_bytes(dinp), read_bytes(dinp0));
    EXPECT_EQ(read_bytes(dw), read_bytes(dw0));
    EXPECT_EQ(read_bytes(db), read_bytes(db0));
  }
}

TEST_P(StridedOpsTest, CrossEntropyWithPaddedRowsNeverTouchesThePadding) {
  const int64_t N = 6, V = 50, S = 64;
  const std::vector<int32_t> ids = {4, -1, 49, 0, -1, 17};
  const std::vector<double> values = random(N * V, -4.0, 4.0);
  Tensor logits = padded(N, V, S, values, kPadNaN), logits_p = act(N * V, values), targets = ints(ids);
  Tensor lse = f32(N), losses = f32(N), lse_p = f32(N), losses_p = f32(N);
  Tensor result = tensor(DType::u8, sizeof(kernels::CrossEntropyResult));
  auto* result_ptr = static_cast<kernels::CrossEntropyResult*>(result.data);
  ASSERT_TRUE(ops()
                  .crossentropy_forward(dt(), lse.f(), losses.f(), result_ptr, logits.data, targets.i(), N, V, S)
                  .is_ok());
  ASSERT_TRUE(ops()
                  .crossentropy_forward(dt(), lse_p.f(), losses_p.f(), nullptr, logits_p.data, targets.i(), N, V)
                  .is_ok());
  std::vector<double> want_lse, want_losses;
  ref::crossentropy(want_lse, want_losses, logits_p.host, ids, N, V);
  expect_near(read(lse), want_lse, Tol{1e-5, 1e-5}, "lse of strided logits");
  expect_near(read(losses), want_losses, Tol{2e-5, 1e-5}, "losses of strided logits");
  kernels::CrossEntropyResult got;
  const std::vector<uint8_t> result_bytes = read_bytes(result);
  std::memcpy(&got, result_bytes.data(), sizeof(got));
  EXPECT_EQ(got.valid_count, 4);
  EXPECT_TRUE(std::isfinite(got.loss_sum)) << got.loss_sum;
  EXPECT_EQ(read_bytes(lse), read_bytes(lse_p)) << "lse differs from the packed layout's";
  EXPECT_EQ(read_bytes(losses), read_bytes(losses_p)) << "losses differ from the packed layout's";

  // Accumulating backward into a strided dlogits (padding a known value) from NaN-padded logits,
  // then the in-place backward over the NaN-padded logits: the NaN padding must survive.
  const float dloss = 0.25f;
  const std::vector<double> d0 = random(N * V);
  Tensor dlogits = padded(N, V, S, d0, -1536.0), dlogits_p = act(N * V, d0);
  std::vector<double> want_d = dlogits_p.host, want_inplace(N * V, 0.0);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t i = 0; i < V && ids[r] >= 0; ++i) {
      const double g = dloss * (std::exp(logits_p.host[r * V + i] - want_lse[r]) - (i == ids[r] ? 1.0 : 0.0));
      want_d[r * V + i] += g;
      want_inplace[r * V + i] = g;
    }
  const std::vector<uint8_t> dlogits_before = read_bytes(dlogits), logits_before = read_bytes(logits);
  ASSERT_TRUE(ops()
                  .crossentropy_backward(dt(), dlogits.data, logits.data, lse.f(), targets.i(), dloss, N, V, S)
                  .is_ok());
  ASSERT_TRUE(ops()
                  .crossentropy_backward(dt(), dlogits_p.data, logits_p.data, lse.f(), targets.i(), dloss, N, V)
                  .is_ok());
  expect_strided(dlogits, N, V, S, want_d, dlogits_p, dlogits_before, "strided dlogits");
  ASSERT_TRUE(ops().crossentropy_backward_inplace(dt(), logits.data, lse.f(), targets.i(), dloss, N, V, S).is_ok());
  ASSERT_TRUE(ops().crossentropy_backward_inplace(dt(), logits_p.data, lse.f(), targets.i(), dloss, N, V).is_ok());
  expect_strided(logits, N, V, S, want_inplace, logits_p, logits_before, "strided in-place dlogits");
}

// The forward and the in-place backward in one call (one pass over each row on CUDA) against the
// two calls, bit for bit: lse, losses, the result and the gradient over the logits, on packed and
// on NaN-padded rows (the padding untouched by either), over vocabularies of several 16-byte
// groups a thread with a ragged end -- 4099 (CUDA stages the row in shared memory under 48 KiB),
// 30001 (over 48 KiB in 16 bits; over the staging limit in fp32: read twice) -- with targets at
// both ends of a row and one ignored.
TEST_P(StridedOpsTest, CrossEntropyForwardAndGradientInOneCallEqualTheTwoCalls) {
  struct Rows {
    int64_t V, stride;  // stride 0: packed
  };
  for (const Rows r : {Rows{4099, 0}, Rows{4099, 4160}, Rows{30001, 0}, Rows{30001, 30080}}) {
    const int64_t N = 5, V = r.V, S = r.stride;
    SCOPED_TRACE(::testing::Message() << "V " << V << (S == 0 ? ", packed rows" : ", padded rows"));
    const std::vector<int32_t> ids = {7, -1, int32_t(V - 1), 0, int32_t(V / 2)};
    const std::vector<double> values = random(N * V, -6.0, 6.0);
    const float dloss = 0.125f;
    Tensor two = S == 0 ? act(N * V, values) : padded(N, V, S, values, kPadNaN);
    Tensor one = S == 0 ? act(N * V, values) : padded(N, V, S, values, kPadNaN);
    Tensor targets = ints(ids), lse2 = f32(N), losses2 = f32(N), lse1 = f32(N), losses1 = f32(N);
    Tensor result2 = tensor(DType::u8, sizeof(kernels::CrossEntropyResult));
    Tensor result1 = tensor(DType::u8, sizeof(kernels::CrossEntropyResult));
    ASSERT_TRUE(ops()
                    .crossentropy_forward(dt(), lse2.f(), losses2.f(),
                                          static_cast<kernels::CrossEntropyResult*>(result2.data), two.data,
                                          targets.i(), N, V, S)
                    .is_ok());
    ASSERT_TRUE(
        ops().crossentropy_backward_inplace(dt(), two.data, lse2.f(), targets.i(), dloss, N, V, S).is_ok());
    ASSERT_TRUE(ops()
                    .crossentropy_forward_backward_inplace(dt(), lse1.f(), losses1.f(),
                                                           static_cast<kernels::CrossEntropyResult*>(result1.data),
                                                           one.data, targets.i(), dloss, N, V, S)
                    .is_ok());
    EXPECT_EQ(read_bytes(lse1), read_bytes(lse2)) << "lse";
    EXPECT_EQ(read_bytes(losses1), read_bytes(losses2)) << "losses";
    EXPECT_EQ(read_bytes(result1), read_bytes(result2)) << "loss sum, count and mean";
    EXPECT_EQ(read_bytes(one), read_bytes(two)) << "the gradient over the logits (and their padding)";
    // And it is a gradient: row 2's (target V - 1, the last column) sums to ~0 over the row.
    const std::vector<double> d = read(one);
    const int64_t ld = S == 0 ? V : S;
    double row_sum = 0.0;
    for (int64_t i = 0; i < V; ++i) row_sum += d[2 * ld + i];
    EXPECT_NEAR(row_sum, 0.0, 1e-2) << "softmax - onehot sums to 0";
    EXPECT_LT(d[2 * ld + V - 1], 0.0) << "the target's term is negative";
  }
}

// q, k and v as column blocks of one (N, S) tensor with a padded row, as the fused projection
// leaves them (and dq, dk, dv of one gradient tensor): RoPE in place on q and k, attention forward
// and backward, RoPE's backward in place on dq and dk give the bits of the packed layout on every
// backend (the kernels do the same operations in the same order; the layout only moves the
// loads), and the padding columns (a known value) are never written. Head size 64: CUDA's tiled
// kernels in 16 bits (T 70: a whole and a partial tile), its one-warp kernels in fp32.
TEST_P(StridedOpsTest, AttentionAndRopeOverColumnBlocksOfOneQkvTensorEqualPacked) {
  const ref::Attention a{2, 70, 4, 2, 64};  // B, T, NH, NKV, HS
  const int64_t N = a.B * a.T, QC = a.NH * a.HS, KC = a.NKV * a.HS, S = QC + 2 * KC + 8, pos = 3;
  const float theta = 10000.0f;
  const size_t es = dtype_size(dt());
  const double kPadValue = -1536.0;
  const int64_t begin[3] = {0, QC, QC + KC}, width[3] = {QC, KC, KC};
  // The fused image of three packed blocks, and the bytes of block p of a fused tensor, packed.
  const auto fuse = [&](const std::vector<double>* parts[3]) {
    std::vector<double> image(static_cast<size_t>(N * S), kPadValue);
    for (int p = 0; p < 3; ++p)
      for (int64_t r = 0; r < N; ++r)
        for (int64_t c = 0; c < width[p]; ++c) image[r * S + begin[p] + c] = (*parts[p])[r * width[p] + c];
    return image;
  };
  const auto block = [&](const std::vector<uint8_t>& bytes, int p) {
    std::vector<uint8_t> out;
    for (int64_t r = 0; r < N; ++r) {
      const auto at = bytes.begin() + static_cast<std::ptrdiff_t>((r * S + begin[p]) * es);
      out.insert(out.end(), at, at + static_cast<std::ptrdiff_t>(width[p] * es));
    }
    return out;
  };
  const auto at = [&](const Tensor& t, int p) { return static_cast<std::byte*>(t.data) + begin[p] * es; };

  Tensor q = act(N * QC, random(N * QC)), k = act(N * KC, random(N * KC)), v = act(N * KC, random(N * KC));
  const std::vector<double>* inputs[3] = {&q.host, &k.host, &v.host};
  Tensor qkv = act(N * S, fuse(inputs));
  Tensor dq = act(N * QC, random(N * QC)), dk = act(N * KC, random(N * KC)), dv = act(N * KC, random(N * KC));
  const std::vector<double>* grads[3] = {&dq.host, &dk.host, &dv.host};
  Tensor dqkv = act(N * S, fuse(grads));
  const std::vector<uint8_t> qkv_before = read_bytes(qkv), dqkv_before = read_bytes(dqkv);
  Tensor out = act(N * QC), lse = f32(a.B * a.NH * a.T), out_f = act(N * QC), lse_f = f32(a.B * a.NH * a.T);
  Tensor dout = act(N * QC, random(N * QC));

  // Packed.
  ASSERT_TRUE(ops().rope_forward(dt(), q.data, q.data, a.B, a.T, a.NH, a.HS, theta, pos).is_ok());
  ASSERT_TRUE(ops().rope_forward(dt(), k.data, k.data, a.B, a.T, a.NKV, a.HS, theta, pos).is_ok());
  ASSERT_TRUE(ops().attention_forward(dt(), out.data, lse.f(), q.data, k.data, v.data, a.B, a.T, a.NH, a.NKV, a.HS)
                  .is_ok());
  ASSERT_TRUE(ops().attention_backward(dt(), dq.data, dk.data, dv.data, dout.data, q.data, k.data, v.data, out.data,
                                       lse.f(), a.B, a.T, a.NH, a.NKV, a.HS).is_ok());
  ASSERT_TRUE(ops().rope_backward(dt(), dq.data, dq.data, a.B, a.T, a.NH, a.HS, theta, pos).is_ok());
  ASSERT_TRUE(ops().rope_backward(dt(), dk.data, dk.data, a.B, a.T, a.NKV, a.HS, theta, pos).is_ok());
  // Fused, rows S elements apart.
  ASSERT_TRUE(ops().rope_forward(dt(), at(qkv, 0), at(qkv, 0), a.B, a.T, a.NH, a.HS, theta, pos, S).is_ok());
  ASSERT_TRUE(ops().rope_forward(dt(), at(qkv, 1), at(qkv, 1), a.B, a.T, a.NKV, a.HS, theta, pos, S).is_ok());
  ASSERT_TRUE(ops().attention_forward(dt(), out_f.data, lse_f.f(), at(qkv, 0), at(qkv, 1), at(qkv, 2), a.B, a.T,
                                      a.NH, a.NKV, a.HS, S).is_ok());
  ASSERT_TRUE(ops().attention_backward(dt(), at(dqkv, 0), at(dqkv, 1), at(dqkv, 2), dout.data, at(qkv, 0),
                                       at(qkv, 1), at(qkv, 2), out_f.data, lse_f.f(), a.B, a.T, a.NH, a.NKV, a.HS, S)
                  .is_ok());
  ASSERT_TRUE(ops().rope_backward(dt(), at(dqkv, 0), at(dqkv, 0), a.B, a.T, a.NH, a.HS, theta, pos, S).is_ok());
  ASSERT_TRUE(ops().rope_backward(dt(), at(dqkv, 1), at(dqkv, 1), a.B, a.T, a.NKV, a.HS, theta, pos, S).is_ok());

  EXPECT_EQ(read_bytes(out_f), read_bytes(out)) << "out";
  EXPECT_EQ(read_bytes(lse_f), read_bytes(lse)) << "lse";
  const std::vector<uint8_t> qkv_after = read_bytes(qkv), dqkv_after = read_bytes(dqkv);
  const char* names[3] = {"q", "k", "v"};
  const Tensor* packed[3] = {&q, &k, &v};
  const Tensor* packed_grads[3] = {&dq, &dk, &dv};
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(block(qkv_after, p), read_bytes(*packed[p])) << names[p] << " (after RoPE)";
    EXPECT_EQ(block(dqkv_after, p), read_bytes(*packed_grads[p])) << "d" << names[p];
  }
  for (int64_t r = 0; r < N; ++r) {
    const size_t pad0 = static_cast<size_t>((r * S + QC + 2 * KC) * es), pad1 = static_cast<size_t>((r + 1) * S * es);
    EXPECT_TRUE(std::equal(qkv_after.begin() + pad0, qkv_after.begin() + pad1, qkv_before.begin() + pad0))
        << "row " << r << ": qkv's padding was written";
    EXPECT_TRUE(std::equal(dqkv_after.begin() + pad0, dqkv_after.begin() + pad1, dqkv_before.begin() + pad0))
        << "row " << r << ": dqkv's padding was written";
  }
  // The packed results are attention's (the suite's reference test holds them; here out once).
  std::vector<double> want_q(N * QC, 0.0), want_k(N * KC, 0.0), want_out, want_lse, none;
  ref::rope(want_q, q.host, a.B, a.T, a.NH, a.HS, theta, pos, false);
  ref::rope(want_k, k.host, a.B, a.T, a.NKV, a.HS, theta, pos, false);
  a.run(want_out, want_lse, want_q, want_k, v.host, {}, none, none, none);
  expect_near(read(out_f), want_out, act_tol(), "out over the fused rows");

  // A stride shorter than q's row is refused, naming it.
  const Status bad = ops().attention_forward(dt(), out_f.data, lse_f.f(), at(qkv, 0), at(qkv, 1), at(qkv, 2), a.B,
                                             a.T, a.NH, a.NKV, a.HS, QC - 1);
  EXPECT_EQ(bad.code(), Code::invalid_argument);
  EXPECT_NE(bad.message().find("qkv_stride = 255 is less than NH * HS = 256"), std::string::npos) << bad.to_string();
  const Status bad_rope = ops().rope_forward(dt(), at(qkv, 0), at(qkv, 0), a.B, a.T, a.NH, a.HS, theta, pos, 8);
  EXPECT_EQ(bad_rope.code(), Code::invalid_argument);
  EXPECT_NE(bad_rope.message().find("stride = 8 is less than NH * HS = 256"), std::string::npos)
      << bad_rope.to_string();
}

// A row stride below the row length, and a strided span past its block, are invalid_argument
// naming the argument, and queue nothing.
TEST_P(StridedOpsTest, BadRowStridesAreInvalidArgument) {
  const int64_t N = 4, C = 8, OC = 6, S = 8;
  Tensor inp = act(N * C, random(N * C)), w = act(OC * C, random(OC * C)), out = act(N * S);
  Tensor stats = f32(N), tokens = ints({0, 1, 2, 3});
  const std::vector<uint8_t> untouched(out.bytes(), kSentinel);
  struct Case {
    Status status;
    std::vector<const char*> words;
  };
  const Case cases[] = {
      {ops().matmul_forward(dt(), out.data, inp.data, w.data, nullptr, N, C, OC, OC - 1),
       {"matmul_forward", "out_stride = 5 is less than OC = 6"}},
      {ops().matmul_backward(dt(), inp.data, nullptr, nullptr, out.data, inp.data, w.data, N, C, OC, -3),
       {"matmul_backward", "dout_stride = -3"}},
      {ops().crossentropy_forward(dt(), stats.f(), stats.f(), nullptr, out.data, tokens.i(), N, OC, 2),
       {"crossentropy_forward", "logits_stride = 2 is less than V = 6"}},
      {ops().crossentropy_backward_inplace(dt(), out.data, stats.f(), tokens.i(), 1.0f, N, OC, 1),
       {"crossentropy_backward_inplace", "logits_stride = 1"}},
      // (N - 1) * 1000 + 6 elements run far past the block (guards included), while N * OC = 24
      // would fit: the strided span is what is checked.
      {ops().matmul_forward(dt(), out.data, inp.data, w.data, nullptr, N, C, OC, 1000),
       {"matmul_forward out", "not inside one live block"}},
      {ops().matmul_backward(dt(), inp.data, nullptr, nullptr, out.data, inp.data, w.data, N, C, OC, 1000),
       {"matmul_backward dout", "not inside one live block"}},
      {ops().crossentropy_backward(dt(), out.data, inp.data, stats.f(), tokens.i(), 1.0f, N, OC, 1000),
       {"crossentropy_backward dlogits", "not inside one live block"}},
      {ops().crossentropy_backward_inplace(dt(), out.data, stats.f(), tokens.i(), 1.0f, N, OC, 1000),
       {"crossentropy_backward_inplace logits_to_dlogits", "not inside one live block"}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), Code::invalid_argument) << c.status.to_string();
    for (const char* word : c.words) {
      EXPECT_NE(c.status.message().find(word), std::string::npos) << c.status.to_string();
    }
  }
  // The largest stride that fits is accepted: (N - 1) * 8 + 6 = 30 <= 32 elements.
  EXPECT_TRUE(ops().matmul_forward(dt(), out.data, inp.data, w.data, nullptr, N, C, OC, S).is_ok());
  ASSERT_TRUE(backend().synchronize_all().is_ok());
  const std::vector<uint8_t> after = read_bytes(out);
  EXPECT_EQ(padding_bytes(after, N, OC, S), padding_bytes(untouched, N, OC, S)) << "padding written";
}

}  // namespace strata::ops_test
