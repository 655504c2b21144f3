// GPU tests of the kernels/cuda GEMM wrappers' rounding contract ("fp32 inside, round once"):
// 16-bit accumulating GEMMs (dinp +=, dweight +=) and the biased forward land within half an ulp
// of T of the exactly rounded result (plus the fp32 accumulation's own error), with the product
// workspace large, small enough to tile by columns, and smaller than one column (rows tiled too),
// with and without cuBLASLt; LM-head shapes (V = 50257: dweight tiled by the real 64 MiB workspace,
// and the forward), checked on sampled elements; a padded row stride that splits OC into cuBLAS's
// aligned rows and strata's tail kernels (forward, dinp, dweight, dbias; the whole OC a tail too;
// the LM head at V = 50257 with its stride 50304), adding and overwriting, the padding never read
// or written; the two-pass bias-gradient sum; and bit-identical results run to run.
#include <gtest/gtest.h>

#include "gpu_required.h"

#if defined(STRATA_HAVE_CUDA)

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/gemm.cuh"
#include "tests/kernels/cuda_gemm_test_support.h"
#include "tests/kernels/cuda_gpu_test_support.h"
#include "tests/kernels/ops_test_support.h"

namespace strata::kernels::cuda {
namespace {

using strata::kernels::testing::random_floats;
using testing::DeviceTensor;
using testing::GemmTestOptions;
using testing::round_all;
using testing::TestGemmContext;

// An exact (double) result per element and the sum of its terms' magnitudes.
struct Exact {
  std::vector<double> value, magnitude;
  explicit Exact(size_t n) : value(n, 0.0), magnitude(n, 0.0) {}
};

// out (N, OC) = bias + inp (N, C) @ w (OC, C)^T.
Exact forward_exact(const std::vector<float>& inp, const std::vector<float>& w, const std::vector<float>& bias,
                    int64_t N, int64_t C, int64_t OC) {
  Exact e(N * OC);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < OC; ++o) {
      double sum = bias[o], mag = std::fabs(bias[o]);
      for (int64_t c = 0; c < C; ++c) {
        const double term = static_cast<double>(inp[n * C + c]) * w[o * C + c];
        sum += term;
        mag += std::fabs(term);
      }
      e.value[n * OC + o] = sum;
      e.magnitude[n * OC + o] = mag;
    }
  }
  return e;
}

// dinp (N, C) = g0 + dout (N, OC) @ w (OC, C).
Exact dinp_exact(const std::vector<float>& g0, const std::vector<float>& dout, const std::vector<float>& w, int64_t N,
                 int64_t C, int64_t OC) {
  Exact e(N * C);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      double sum = g0[n * C + c], mag = std::fabs(g0[n * C + c]);
      for (int64_t o = 0; o < OC; ++o) {
        const double term = static_cast<double>(dout[n * OC + o]) * w[o * C + c];
        sum += term;
        mag += std::fabs(term);
      }
      e.value[n * C + c] = sum;
      e.magnitude[n * C + c] = mag;
    }
  }
  return e;
}

// dweight[o, c] = g0 + sum_n dout[n, o] inp[n, c], for one element.
void dweight_exact_at(const std::vector<float>& g0, const std::vector<float>& dout, const std::vector<float>& inp,
                      int64_t N, int64_t C, int64_t OC, int64_t o, int64_t c, double* value, double* magnitude) {
  double sum = g0[o * C + c], mag = std::fabs(g0[o * C + c]);
  for (int64_t n = 0; n < N; ++n) {
    const double term = static_cast<double>(dout[n * OC + o]) * inp[n * C + c];
    sum += term;
    mag += std::fabs(term);
  }
  *value = sum;
  *magnitude = mag;
}

Exact dweight_exact(const std::vector<float>& g0, const std::vector<float>& dout, const std::vector<float>& inp,
                    int64_t N, int64_t C, int64_t OC) {
  Exact e(OC * C);
  for (int64_t o = 0; o < OC; ++o) {
    for (int64_t c = 0; c < C; ++c) {
      dweight_exact_at(g0, dout, inp, N, C, OC, o, c, &e.value[o * C + c], &e.magnitude[o * C + c]);
    }
  }
  return e;
}

// The spacing of T's values at |x| (bf16: 8 significant bits, fp16: 11, with its subnormals).
template <typename T>
double ulp_of(double x) {
  int exponent = 0;
  std::frexp(x == 0.0 ? 1e-30 : x, &exponent);  // |x| in [2^(exponent-1), 2^exponent)
  const int lead = exponent - 1;
  if constexpr (std::is_same_v<T, __half>) return std::ldexp(1.0, (lead < -14 ? -14 : lead) - 10);
  return std::ldexp(1.0, (lead < -126 ? -126 : lead) - 7);
}

// Rounding once from an fp32 value: within half an ulp of T of the exact result, plus the fp32
// accumulation error of a k-term sum (2 k 2^-24 sum|terms|, a loose bound). Rounding the product
// to T first and then adding the old value (the double rounding this guards against) misses by
// up to half an ulp of the PRODUCT, far more where the sum cancels.
template <typename T>
bool rounded_once(double got, double exact, double magnitude, int64_t k) {
  const double half_ulp = 0.5 * ulp_of<T>(std::fmax(std::fabs(exact), std::fabs(got)));
  const double fp32_error = 2.0 * static_cast<double>(k) * std::ldexp(1.0, -24) * magnitude;
  return std::fabs(got - exact) <= half_ulp * (1.0 + 1e-9) + fp32_error;
}

template <typename T>
void expect_rounded_once(const std::vector<float>& got, const Exact& want, int64_t k, const char* what) {
  ASSERT_EQ(got.size(), want.value.size());
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (rounded_once<T>(got[i], want.value[i], want.magnitude[i], k)) continue;
    if (bad++ < 3) {
      first += " [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " exact " +
               std::to_string(want.value[i]) + ";";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements not rounded once:" << first;
}

template <typename T>
class CudaGemmRoundingTest : public ::testing::Test {};
using SixteenBitTypes = ::testing::Types<__nv_bfloat16, __half>;
TYPED_TEST_SUITE(CudaGemmRoundingTest, SixteenBitTypes, testing::ElementTypeNames);

// dinp (m = C = 96, n = N = 64), dweight (m = 96, n = OC = 80), forward (m = OC = 80, n = 64): the
// product workspace holds everything, 1000 floats (column tiles of 10), or 50 floats (less than one
// 96-row column: row tiles of 50 too).
TYPED_TEST(CudaGemmRoundingTest, AccumulateAndBiasRoundOnceAtEveryTiling) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const int64_t N = 64, C = 96, OC = 80;
  const auto inp = round_all<T>(random_floats(N * C, 211)), w = round_all<T>(random_floats(OC * C, 212));
  const auto bias = round_all<T>(random_floats(OC, 213)), dout = round_all<T>(random_floats(N * OC, 214));
  const auto g0_in = round_all<T>(random_floats(N * C, 215, -4.0f, 4.0f));
  const auto g0_w = round_all<T>(random_floats(OC * C, 216, -4.0f, 4.0f));
  const Exact want_out = forward_exact(inp, w, bias, N, C, OC);
  const Exact want_din = dinp_exact(g0_in, dout, w, N, C, OC);
  const Exact want_dw = dweight_exact(g0_w, dout, inp, N, C, OC);
  for (const GemmTestOptions options : {GemmTestOptions{}, GemmTestOptions{1000, true}, GemmTestOptions{50, true},
                                        GemmTestOptions{1000, false}, GemmTestOptions{50, false}}) {
    SCOPED_TRACE(::testing::Message() << "product floats " << options.product_floats << " cuBLASLt "
                                      << options.use_lt);
    const TestGemmContext gemm(options);
    DeviceTensor<T> d_inp(inp), d_w(w), d_b(bias), d_dout(dout), d_out(N * OC), d_din(g0_in), d_dw(g0_w);
    EXPECT_TRUE(matmul_forward(gemm.ctx(), d_out.data(), d_inp.data(), d_w.data(), d_b.data(), N, C, OC, {}, nullptr)
                    .ok());
    EXPECT_TRUE(matmul_backward(gemm.ctx(), d_din.data(), d_dw.data(), static_cast<T*>(nullptr), d_dout.data(),
                                d_inp.data(), d_w.data(), N, C, OC, {}, nullptr)
                    .ok());
    expect_rounded_once<T>(d_out.download(), want_out, C, "out");
    expect_rounded_once<T>(d_din.download(), want_din, OC, "dinp");
    expect_rounded_once<T>(d_dw.download(), want_dw, N, "dweight");
    EXPECT_TRUE(d_out.guards_intact() && d_din.guards_intact() && d_dw.guards_intact()) << "guard bytes";
  }
}

// The accumulation where it matters most: old values that cancel the product, so the exact result
// is small. A product rounded to T before the add would keep its error (half an ulp of the product).
TYPED_TEST(CudaGemmRoundingTest, AccumulateIntoACancellingOldValueRoundsOnce) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const int64_t N = 48, C = 64, OC = 72;
  const auto w = round_all<T>(random_floats(OC * C, 221)), dout = round_all<T>(random_floats(N * OC, 222));
  const Exact product = dinp_exact(std::vector<float>(N * C, 0.0f), dout, w, N, C, OC);
  std::vector<float> g0(N * C);
  const auto jitter = random_floats(N * C, 223, -0.05f, 0.05f);
  for (size_t i = 0; i < g0.size(); ++i) {
    g0[i] = testing::round_as<T>(static_cast<float>(-product.value[i]) + jitter[i]);
  }
  const Exact want = dinp_exact(g0, dout, w, N, C, OC);
  const TestGemmContext gemm(GemmTestOptions{700, true});
  DeviceTensor<T> d_w(w), d_dout(dout), d_din(g0);
  EXPECT_TRUE(matmul_backward(gemm.ctx(), d_din.data(), static_cast<T*>(nullptr), static_cast<T*>(nullptr),
                              d_dout.data(), static_cast<const T*>(nullptr), d_w.data(), N, C, OC, {}, nullptr)
                  .ok());
  expect_rounded_once<T>(d_din.download(), want, OC, "dinp");
}

// GPT-2's LM head: dweight (V = 50257, C = 768) is 38.6 M fp32 products, more than the 16 Mi-float
// workspace: three column tiles (the last one short). The forward (rows of V elements, not 16-byte
// multiples) with and without a bias too. Checked on sampled elements, of every tile.
TYPED_TEST(CudaGemmRoundingTest, LmHeadShapesTiledByTheRealWorkspace) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const int64_t N = 400, C = 768, OC = 50257;
  const auto inp = round_all<T>(random_floats(N * C, 231)), dout = round_all<T>(random_floats(N * OC, 232));
  const auto g0 = round_all<T>(random_floats(OC * C, 233)), bias = round_all<T>(random_floats(OC, 234));
  const TestGemmContext gemm;
  {
    DeviceTensor<T> d_inp(inp), d_w(g0), d_b(bias), d_out(N * OC), d_out_nobias(N * OC);
    EXPECT_TRUE(
        matmul_forward(gemm.ctx(), d_out.data(), d_inp.data(), d_w.data(), d_b.data(), N, C, OC, {}, nullptr).ok());
    EXPECT_TRUE(matmul_forward(gemm.ctx(), d_out_nobias.data(), d_inp.data(), d_w.data(),
                               static_cast<const T*>(nullptr), N, C, OC, {}, nullptr)
                    .ok());
    const std::vector<float> out = d_out.download(), out_nobias = d_out_nobias.download();
    int64_t bad = 0, checked = 0;
    for (int64_t n = 0; n < N; n += 7) {
      for (const int64_t o : {int64_t{0}, int64_t{1}, int64_t{25000}, OC - 2, OC - 1, (n * 131) % OC}) {
        double sum = 0.0, mag = 0.0;
        for (int64_t c = 0; c < C; ++c) {
          const double term = static_cast<double>(inp[n * C + c]) * g0[o * C + c];
          sum += term;
          mag += std::fabs(term);
        }
        bad += !rounded_once<T>(out_nobias[n * OC + o], sum, mag, C);
        bad += !rounded_once<T>(out[n * OC + o], sum + bias[o], mag + std::fabs(bias[o]), C);
        checked += 2;
      }
    }
    EXPECT_EQ(bad, 0) << "of " << checked << " sampled forward elements";
    EXPECT_TRUE(d_out.guards_intact() && d_out_nobias.guards_intact());
  }
  DeviceTensor<T> d_inp(inp), d_dout(dout), d_dw(g0);
  EXPECT_TRUE(matmul_backward(gemm.ctx(), static_cast<T*>(nullptr), d_dw.data(), static_cast<T*>(nullptr),
                              d_dout.data(), d_inp.data(), static_cast<const T*>(nullptr), N, C, OC, {}, nullptr)
                  .ok());
  const std::vector<float> got = d_dw.download();
  int64_t bad = 0, checked = 0;
  for (int64_t o = 0; o < OC; o += 97) {  // rows of dweight across all three tiles, the last row too
    for (const int64_t c : {int64_t{0}, int64_t{1}, int64_t{383}, C - 1}) {
      const int64_t row = o + 97 >= OC ? OC - 1 : o;
      double value = 0.0, magnitude = 0.0;
      dweight_exact_at(g0, dout, inp, N, C, OC, row, c, &value, &magnitude);
      bad += !rounded_once<T>(got[row * C + c], value, magnitude, N);
      ++checked;
    }
  }
  EXPECT_EQ(bad, 0) << "of " << checked << " sampled dweight elements";
  EXPECT_TRUE(d_dw.guards_intact());
}

// A (rows, stride) image of packed (rows, cols) values, `pad` in columns [cols, stride).
std::vector<float> padded_image(const std::vector<float>& packed, int64_t rows, int64_t cols, int64_t stride,
                                float pad) {
  std::vector<float> image(static_cast<size_t>(rows * stride), pad);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) image[r * stride + c] = packed[r * cols + c];
  return image;
}

// Columns [0, cols) of each row of a (rows, stride) image, and whether every padding element still
// holds `pad` (bitwise: NaN padding must stay NaN).
std::vector<float> data_columns(const std::vector<float>& image, int64_t rows, int64_t cols, int64_t stride) {
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r) out.insert(out.end(), image.begin() + r * stride, image.begin() + r * stride + cols);
  return out;
}
bool padding_kept(const std::vector<float>& image, int64_t rows, int64_t cols, int64_t stride, float pad) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = cols; c < stride; ++c)
      if (std::memcmp(&image[r * stride + c], &pad, sizeof(float)) != 0) return false;
  return true;
}

// OC not a whole number of 16-byte vectors, in rows of a padded stride: cuBLAS runs the aligned rows
// and strata's kernels the tail (OC = 77: 72 + 5 rows at 16-bit, 76 + 1 at fp32; OC = 5 < one
// vector: all tail, the dinp GEMM an empty sum). Every output rounded once, whether it adds into
// the old gradient or overwrites a NaN-poisoned one, at every product-workspace tiling; the
// padding of out never written, that of dout (NaN) never read.
TYPED_TEST(CudaGemmRoundingTest, PaddedStrideTailRoundsOnceAddingAndOverwriting) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  for (const auto [OC, S] : {std::pair<int64_t, int64_t>{77, 80}, {5, 8}}) {
    const int64_t N = 64, C = 96;
    SCOPED_TRACE(::testing::Message() << "OC " << OC << " stride " << S);
    ASSERT_LT(aligned_rows<T>(OC), OC);
    const auto inp = round_all<T>(random_floats(N * C, 251)), w = round_all<T>(random_floats(OC * C, 252));
    const auto bias = round_all<T>(random_floats(OC, 253)), dout = round_all<T>(random_floats(N * OC, 254));
    const auto g0_in = round_all<T>(random_floats(N * C, 255, -4.0f, 4.0f));
    const auto g0_w = round_all<T>(random_floats(OC * C, 256, -4.0f, 4.0f));
    const auto g0_b = round_all<T>(random_floats(OC, 257, -4.0f, 4.0f));
    const Exact want_out = forward_exact(inp, w, bias, N, C, OC);
    const Exact want_out_nobias = forward_exact(inp, w, std::vector<float>(OC, 0.0f), N, C, OC);
    const std::vector<float> zeros_in(N * C, 0.0f), zeros_w(OC * C, 0.0f);
    const Exact add_din = dinp_exact(g0_in, dout, w, N, C, OC), set_din = dinp_exact(zeros_in, dout, w, N, C, OC);
    const Exact add_dw = dweight_exact(g0_w, dout, inp, N, C, OC), set_dw = dweight_exact(zeros_w, dout, inp, N, C, OC);
    for (const GemmTestOptions options : {GemmTestOptions{}, GemmTestOptions{1000, true}, GemmTestOptions{50, true}}) {
      SCOPED_TRACE(::testing::Message() << "product floats " << options.product_floats);
      const TestGemmContext gemm(options);
      const float kPad = -1536.0f;  // exact in every type, not a result of these inputs
      DeviceTensor<T> d_inp(inp), d_w(w), d_b(bias), d_dout(padded_image(dout, N, OC, S, kNaN));
      DeviceTensor<T> d_out(padded_image(std::vector<float>(N * OC, 0.0f), N, OC, S, kPad));
      DeviceTensor<T> d_out_nobias(padded_image(std::vector<float>(N * OC, 0.0f), N, OC, S, kPad));
      EXPECT_TRUE(matmul_forward(gemm.ctx(), d_out.data(), d_inp.data(), d_w.data(), d_b.data(), N, C, OC, {},
                                 nullptr, S).ok());
      EXPECT_TRUE(matmul_forward(gemm.ctx(), d_out_nobias.data(), d_inp.data(), d_w.data(),
                                 static_cast<const T*>(nullptr), N, C, OC, {}, nullptr, S).ok());
      const std::vector<float> out = d_out.download(), out_nobias = d_out_nobias.download();
      expect_rounded_once<T>(data_columns(out, N, OC, S), want_out, C, "out");
      expect_rounded_once<T>(data_columns(out_nobias, N, OC, S), want_out_nobias, C, "out without bias");
      EXPECT_TRUE(padding_kept(out, N, OC, S, kPad) && padding_kept(out_nobias, N, OC, S, kPad)) << "out padding";
      for (const bool overwrite : {false, true}) {
        SCOPED_TRACE(overwrite ? "overwrite" : "add");
        DeviceTensor<T> d_din(overwrite ? std::vector<float>(N * C, kNaN) : g0_in);
        DeviceTensor<T> d_dw(overwrite ? std::vector<float>(OC * C, kNaN) : g0_w);
        DeviceTensor<T> d_db(overwrite ? std::vector<float>(OC, kNaN) : g0_b);
        EXPECT_TRUE(matmul_backward(gemm.ctx(), d_din.data(), d_dw.data(), d_db.data(), d_dout.data(), d_inp.data(),
                                    d_w.data(), N, C, OC, {}, nullptr, S, GradStores{overwrite, overwrite})
                        .ok());
        expect_rounded_once<T>(d_din.download(), overwrite ? set_din : add_din, OC, "dinp");
        expect_rounded_once<T>(d_dw.download(), overwrite ? set_dw : add_dw, N, "dweight");
        std::vector<float> want_db = overwrite ? std::vector<float>(OC, 0.0f) : g0_b;
        for (int64_t o = 0; o < OC; ++o) {
          double sum = want_db[o];
          for (int64_t n = 0; n < N; ++n) sum += dout[n * OC + o];
          want_db[o] = static_cast<float>(sum);
        }
        testing::expect_matches(d_db, want_db, testing::Tolerance{2e-2, 1e-2}, "dbias");
        EXPECT_TRUE(d_din.guards_intact() && d_dw.guards_intact() && d_dout.guards_intact()) << "guard bytes";
      }
    }
  }
}

// GPT-2's LM head as the model runs it: V = 50257 rows in logits rows of 50304 (16-byte aligned),
// so 50256 rows go through cuBLAS and 1 through the tail kernels. Sampled elements of the forward,
// of dinp (a 50257-term sum, overwritten) and of dweight (the tail row among them, overwritten).
TYPED_TEST(CudaGemmRoundingTest, LmHeadAtItsPaddedStrideSplitsOffTheLastRow) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const int64_t N = 256, C = 768, OC = 50257, S = 50304;
  ASSERT_EQ(aligned_rows<T>(OC), OC - 1);
  const auto inp = round_all<T>(random_floats(N * C, 261)), w = round_all<T>(random_floats(OC * C, 262));
  const auto dout = round_all<T>(random_floats(N * OC, 263));
  const TestGemmContext gemm;
  DeviceTensor<T> d_inp(inp), d_w(w), d_out(N * S);
  DeviceTensor<T> d_dout(padded_image(dout, N, OC, S, std::numeric_limits<float>::quiet_NaN()));  // never read
  DeviceTensor<T> d_din(N * C), d_dw(OC * C);
  EXPECT_TRUE(matmul_forward(gemm.ctx(), d_out.data(), d_inp.data(), d_w.data(), static_cast<const T*>(nullptr), N,
                             C, OC, {}, nullptr, S).ok());
  EXPECT_TRUE(matmul_backward(gemm.ctx(), d_din.data(), d_dw.data(), static_cast<T*>(nullptr), d_dout.data(),
                              d_inp.data(), d_w.data(), N, C, OC, {}, nullptr, S, GradStores{true, true})
                  .ok());
  const std::vector<float> out = d_out.download(), din = d_din.download(), dw = d_dw.download();
  int64_t bad = 0, checked = 0;
  for (int64_t n = 0; n < N; n += 5) {
    for (const int64_t o : {int64_t{0}, int64_t{7}, OC - 9, OC - 2, OC - 1, (n * 131) % OC}) {
      double sum = 0.0, mag = 0.0;
      for (int64_t c = 0; c < C; ++c) {
        const double term = static_cast<double>(inp[n * C + c]) * w[o * C + c];
        sum += term;
        mag += std::fabs(term);
      }
      bad += !rounded_once<T>(out[n * S + o], sum, mag, C);
      ++checked;
    }
    for (const int64_t c : {int64_t{0}, int64_t{5}, C - 1}) {
      double sum = 0.0, mag = 0.0;
      for (int64_t o = 0; o < OC; ++o) {
        const double term = static_cast<double>(dout[n * OC + o]) * w[o * C + c];
        sum += term;
        mag += std::fabs(term);
      }
      bad += !rounded_once<T>(din[n * C + c], sum, mag, OC);
      ++checked;
    }
  }
  const std::vector<float> no_old(OC * C, 0.0f);
  for (const int64_t o : {int64_t{0}, int64_t{25000}, OC - 2, OC - 1}) {
    for (const int64_t c : {int64_t{0}, int64_t{383}, C - 1}) {
      double value = 0.0, magnitude = 0.0;
      dweight_exact_at(no_old, dout, inp, N, C, OC, o, c, &value, &magnitude);
      bad += !rounded_once<T>(dw[o * C + c], value, magnitude, N);
      ++checked;
    }
  }
  EXPECT_EQ(bad, 0) << "of " << checked << " sampled elements";
  EXPECT_TRUE(d_out.guards_intact() && d_din.guards_intact() && d_dw.guards_intact());
}

template <typename T>
class CudaGemmDeterminismTest : public ::testing::Test {};
TYPED_TEST_SUITE(CudaGemmDeterminismTest, testing::ElementTypes, testing::ElementTypeNames);

// Forward with bias and the full backward (dbias through the two-pass column sum: N = 2048 rows,
// OC = 72 columns), twice from the same state: the same bits. dbias also against the CPU sum.
TYPED_TEST(CudaGemmDeterminismTest, RunsTwiceBitIdentical) {
  STRATA_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const int64_t N = 2048, C = 96, OC = 72;
  const auto inp = round_all<T>(random_floats(N * C, 241)), w = round_all<T>(random_floats(OC * C, 242));
  const auto bias = round_all<T>(random_floats(OC, 243)), dout = round_all<T>(random_floats(N * OC, 244));
  const auto g0_in = round_all<T>(random_floats(N * C, 245)), g0_w = round_all<T>(random_floats(OC * C, 246));
  const auto g0_b = round_all<T>(random_floats(OC, 247));
  const TestGemmContext gemm(GemmTestOptions{50000, true});  // dinp (96 x 2048) in 4 column tiles
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    DeviceTensor<T> d_inp(inp), d_w(w), d_b(bias), d_dout(dout), d_out(N * OC), d_din(g0_in), d_dw(g0_w),
        d_db(g0_b);
    EXPECT_TRUE(
        matmul_forward(gemm.ctx(), d_out.data(), d_inp.data(), d_w.data(), d_b.data(), N, C, OC, {}, nullptr).ok());
    EXPECT_TRUE(matmul_backward(gemm.ctx(), d_din.data(), d_dw.data(), d_db.data(), d_dout.data(), d_inp.data(),
                                d_w.data(), N, C, OC, {}, nullptr)
                    .ok());
    std::vector<float> all = d_out.download();
    for (DeviceTensor<T>* t : {&d_din, &d_dw, &d_db}) {
      const std::vector<float> v = t->download();
      all.insert(all.end(), v.begin(), v.end());
    }
    if (run == 0) {
      std::vector<float> want_db = g0_b;
      for (int64_t o = 0; o < OC; ++o) {
        double sum = 0.0;
        for (int64_t n = 0; n < N; ++n) sum += dout[n * OC + o];
        want_db[o] = static_cast<float>(want_db[o] + sum);
      }
      // 2048-term fp32 sums of values in [-1, 1] (|sum| ~ 45): a few fp32 ulps, then T's rounding.
      testing::expect_matches(d_db, want_db, testing::Tolerance{2e-3, std::is_same_v<T, float> ? 1e-5 : 1e-2},
                              "dbias");
    }
    runs.push_back(std::move(all));
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), sizeof(float) * runs[0].size()), 0);
}

}  // namespace
}  // namespace strata::kernels::cuda

#else

TEST(CudaGemm, SkippedWithoutCudaBuild) { STRATA_GPU_SKIP("strata was built without the CUDA backend"); }

#endif
