// WidenedArgs and Fp32Scratch (runtime/cpu_widened_args.h): fp32 passes through untouched, 16-bit
// tensors are widened exactly and narrowed with one round-to-nearest-even, null stays null,
// outputs are written back only by narrow(), strided (padded-row) views convert only the rows'
// real columns, listed-row views only the listed rows, and scratch is reused across ops.
#include "runtime/cpu_widened_args.h"

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace strata {
namespace {

using kernels::FloatFormat;

TEST(WidenedArgs, Fp32ViewsAreTheTensorsThemselves) {
  Fp32Scratch scratch;
  std::vector<float> x = {1.5f, -2.0f}, y(2, 0.0f);
  WidenedArgs a(FloatFormat::f32, scratch);
  EXPECT_EQ(a.in(x.data(), 2), x.data());
  EXPECT_EQ(a.out(y.data(), 2), y.data());
  EXPECT_EQ(a.inout(y.data(), 2), y.data());
  EXPECT_EQ(a.in(nullptr, 2), nullptr);
  a.narrow();
  EXPECT_EQ(y, std::vector<float>(2, 0.0f));
  EXPECT_EQ(scratch.bytes(), 0u) << "fp32 needs no scratch";
}

// 16-bit bits of each value as `format` stores it.
std::vector<uint16_t> encode(FloatFormat format, const std::vector<float>& values) {
  std::vector<uint16_t> h;
  for (float x : values) h.push_back(format == FloatFormat::bf16 ? kernels::float_to_bf16(x) : kernels::float_to_fp16(x));
  return h;
}

float decode(FloatFormat format, uint16_t h) {
  return format == FloatFormat::bf16 ? kernels::bf16_to_float(h) : kernels::fp16_to_float(h);
}

TEST(WidenedArgs, SixteenBitViewsWidenExactlyAndNarrowOnce) {
  for (FloatFormat format : {FloatFormat::bf16, FloatFormat::f16}) {
    SCOPED_TRACE(std::string(kernels::float_format_name(format)));
    Fp32Scratch scratch;
    const std::vector<uint16_t> x = encode(format, {0.1f, -3.0f, 1e-3f});
    std::vector<uint16_t> grad = encode(format, {1.0f, 2.0f, -0.5f}), y = encode(format, {7.0f, 7.0f, 7.0f});
    const std::vector<uint16_t> grad_before = grad, y_before = y;

    WidenedArgs a(format, scratch);
    const float* xv = a.in(x.data(), 3);
    float* yv = a.out(y.data(), 3);
    float* gv = a.inout(grad.data(), 3);
    EXPECT_EQ(a.inout(nullptr, 3), nullptr) << "a gradient that is not computed stays null";
    ASSERT_NE(static_cast<const void*>(xv), static_cast<const void*>(x.data()));
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(xv[i], decode(format, x[i])) << "input widened exactly";
      EXPECT_EQ(gv[i], decode(format, grad_before[i])) << "inout starts from the stored gradient";
    }
    for (int i = 0; i < 3; ++i) {
      yv[i] = xv[i] * 3.0f + 1e-4f;  // values that need rounding
      gv[i] += xv[i];
    }
    EXPECT_EQ(y, y_before) << "outputs change only at narrow()";
    EXPECT_EQ(grad, grad_before);
    a.narrow();
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(y[i], encode(format, {yv[i]})[0]) << "out rounded to nearest even";
      EXPECT_EQ(grad[i], encode(format, {decode(format, grad_before[i]) + decode(format, x[i])})[0])
          << "old + delta in fp32, rounded once";
    }
  }
}

// An output may alias an input (gelu in place): the input is widened before the kernel runs and
// the output narrowed after, so the kernel sees the old values.
TEST(WidenedArgs, AnOutputMayAliasAnInput) {
  Fp32Scratch scratch;
  std::vector<uint16_t> t = encode(FloatFormat::bf16, {1.0f, 2.0f});
  WidenedArgs a(FloatFormat::bf16, scratch);
  float* out = a.out(t.data(), 2);
  const float* in = a.in(t.data(), 2);
  ASSERT_NE(static_cast<const float*>(out), in);
  for (int i = 0; i < 2; ++i) out[i] = in[i] * 2.0f;
  a.narrow();
  EXPECT_EQ(t, encode(FloatFormat::bf16, {2.0f, 4.0f}));
}

// Tensors above the conversion grain are converted over oneTBB tasks: every element still
// converts exactly as the scalar functions, whatever the split.
TEST(WidenedArgs, LargeTensorsConvertElementByElement) {
  const int64_t n = 100003;  // several tasks and a ragged end
  for (FloatFormat format : {FloatFormat::bf16, FloatFormat::f16}) {
    SCOPED_TRACE(std::string(kernels::float_format_name(format)));
    std::vector<float> values(n);
    for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 1000) * 0.37f - 150.0f;
    const std::vector<uint16_t> x = encode(format, values);
    std::vector<uint16_t> y(n, 0);
    Fp32Scratch scratch;
    WidenedArgs a(format, scratch);
    const float* xv = a.in(x.data(), n);
    float* yv = a.out(y.data(), n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      bad += xv[i] != decode(format, x[i]);
      yv[i] = values[i] / 3.0f;
    }
    EXPECT_EQ(bad, 0) << "elements widened wrongly";
    a.narrow();
    EXPECT_EQ(y, encode(format, std::vector<float>(yv, yv + n)));
  }
}

// Strided views (a padded leading dimension): the view keeps the tensor's stride, only columns
// [0, cols) of each row are widened and narrowed, and the tensor's padding keeps its bytes. Rows
// of 3 columns in a stride of 5; 20000 rows so the row loop runs over several oneTBB tasks.
TEST(WidenedArgs, StridedViewsConvertOnlyTheRealColumns) {
  const int64_t cols = 3, stride = 5;
  for (const int64_t rows : {int64_t{4}, int64_t{20000}}) {
    for (FloatFormat format : {FloatFormat::bf16, FloatFormat::f16}) {
      SCOPED_TRACE(std::string(kernels::float_format_name(format)) + " rows " + std::to_string(rows));
      const int64_t span = (rows - 1) * stride + cols;
      std::vector<float> values(span);
      for (int64_t i = 0; i < span; ++i) values[i] = static_cast<float>(i % 997) * 0.25f - 100.0f;
      const std::vector<uint16_t> x = encode(format, values);
      std::vector<uint16_t> y(span, 0xabcd), g = x;
      Fp32Scratch scratch;
      WidenedArgs a(format, scratch);
      const float* xv = a.in_rows(x.data(), rows, cols, stride);
      float* yv = a.out_rows(y.data(), rows, cols, stride);
      float* gv = a.inout_rows(g.data(), rows, cols, stride);
      int64_t bad = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t i = r * stride + c;
          bad += xv[i] != decode(format, x[i]) || gv[i] != decode(format, x[i]);
          yv[i] = xv[i] / 3.0f;
          gv[i] += 1.0f;
        }
        // The view's padding is scratch the kernel never reads; scribble on it to show that
        // narrow() does not carry it back.
        if (r + 1 < rows) {
          for (int64_t c = cols; c < stride; ++c) yv[r * stride + c] = gv[r * stride + c] = 12345.0f;
        }
      }
      EXPECT_EQ(bad, 0) << "elements widened wrongly";
      a.narrow();
      for (int64_t i = 0; i < span; ++i) {
        if (i % stride < cols) {
          bad += y[i] != encode(format, {decode(format, x[i]) / 3.0f})[0];
          bad += g[i] != encode(format, {decode(format, x[i]) + 1.0f})[0];
        } else {
          bad += y[i] != 0xabcd || g[i] != x[i];  // padding untouched
        }
      }
      EXPECT_EQ(bad, 0) << "elements narrowed wrongly or padding written";
    }
  }
}

TEST(Fp32Scratch, BuffersAreReusedAndGrowOnlyWhenNeeded) {
  Fp32Scratch scratch;
  float* first = scratch.buffer(0, 1000);
  float* second = scratch.buffer(1, 10);
  EXPECT_NE(first, second);
  EXPECT_EQ(scratch.bytes(), (1000u + 10u) * sizeof(float));
  EXPECT_EQ(scratch.buffer(0, 500), first) << "a smaller view reuses the slot's buffer";
  EXPECT_EQ(scratch.buffer(1, 0), second) << "an empty view still gets a valid pointer";
  scratch.buffer(1, 2000);
  EXPECT_EQ(scratch.bytes(), (1000u + 2000u) * sizeof(float));
}

// Listed-row views (the embedding ops over a table tile): only the listed rows are widened and
// narrowed; the tensor's other rows keep their bytes even when the view's are scribbled on. 20000
// rows with every third listed, so the row loop runs over several oneTBB tasks; and an empty list.
TEST(WidenedArgs, ListedRowViewsConvertOnlyTheListedRows) {
  const int64_t cols = 4;
  for (const int64_t rows : {int64_t{5}, int64_t{20000}}) {
    std::vector<int64_t> listed;
    for (int64_t r = 1; r < rows; r += 3) listed.push_back(r);
    for (FloatFormat format : {FloatFormat::bf16, FloatFormat::f16}) {
      SCOPED_TRACE(std::string(kernels::float_format_name(format)) + " rows " + std::to_string(rows));
      std::vector<float> values(rows * cols);
      for (int64_t i = 0; i < rows * cols; ++i) values[i] = static_cast<float>(i % 997) * 0.25f - 100.0f;
      const std::vector<uint16_t> x = encode(format, values);
      std::vector<uint16_t> y(rows * cols, 0xabcd), untouched(rows * cols, 0x1234);
      Fp32Scratch scratch;
      WidenedArgs a(format, scratch);
      const float* xv = a.in_listed_rows(x.data(), rows, cols, listed);
      float* yv = a.out_listed_rows(y.data(), rows, cols, listed);
      float* none = a.out_listed_rows(untouched.data(), rows, cols, {});
      int64_t bad = 0;
      for (int64_t r : listed) {
        for (int64_t c = 0; c < cols; ++c) bad += xv[r * cols + c] != decode(format, x[r * cols + c]);
      }
      EXPECT_EQ(bad, 0) << "listed rows widened wrongly";
      for (int64_t i = 0; i < rows * cols; ++i) yv[i] = none[i] = values[i] / 3.0f;  // every row of the view
      a.narrow();
      for (int64_t i = 0; i < rows * cols; ++i) {
        const bool is_listed = (i / cols) % 3 == 1;
        bad += y[i] != (is_listed ? encode(format, {values[i] / 3.0f})[0] : uint16_t{0xabcd});
      }
      EXPECT_EQ(bad, 0) << "listed rows narrowed wrongly or other rows written";
      EXPECT_EQ(untouched, std::vector<uint16_t>(rows * cols, 0x1234)) << "an empty list narrows nothing";
    }
  }
  Fp32Scratch scratch;
  WidenedArgs a(FloatFormat::f32, scratch);
  std::vector<float> t(8, 1.0f);
  EXPECT_EQ(a.out_listed_rows(t.data(), 2, 4, std::vector<int64_t>{1}), t.data()) << "fp32: the tensor itself";
}

}  // namespace
}  // namespace strata
