// accumulate_widened and the deterministic sum of squares (kernels/cpu/grad_accumulate.h) against
// straightforward references written from the definitions: bit for bit, over every 16-bit value,
// any split of the range, every SIMD level this CPU has, and any number of threads.
#include "kernels/cpu/grad_accumulate.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/thread_pool.h"

namespace strata::kernels {
namespace {

uint64_t dbits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
}

// Bit-equal, except that any NaN matches any NaN (which payload an fp32 addition of two NaNs
// keeps depends on operand order, which the contract leaves open).
::testing::AssertionResult same_float(float got, float want) {
  if (std::isnan(got) && std::isnan(want)) return ::testing::AssertionSuccess();
  if (float_bits(got) == float_bits(want)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << " (0x" << std::hex << float_bits(got) << ") want " << want
                                       << " (0x" << float_bits(want) << ")";
}

float widen(FloatFormat f, const void* src, size_t i) {
  switch (f) {
    case FloatFormat::f32: return static_cast<const float*>(src)[i];
    case FloatFormat::bf16: return bf16_to_float(static_cast<const uint16_t*>(src)[i]);
    case FloatFormat::f16: return fp16_to_float(static_cast<const uint16_t*>(src)[i]);
  }
  return 0.0f;
}

std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> out = {SimdLevel::scalar};
  if (simd_level_supported(SimdLevel::avx2)) out.push_back(SimdLevel::avx2);
  if (simd_level_supported(SimdLevel::avx512)) out.push_back(SimdLevel::avx512);
  return out;
}

// Accumulator start values: ordinary, tiny, huge, signed zeros, subnormals, infinities, NaN.
std::vector<float> interesting_floats(size_t n, uint64_t seed) {
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 1e-40f, -1e-42f, 65504.0f, 3.0e38f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 1.17549435e-38f};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = rng();
    v[i] = (r % 7 == 0) ? specials[(r >> 8) % std::size(specials)] : normal(rng) * std::ldexp(1.0f, int((r >> 16) % 40) - 20);
  }
  return v;
}

TEST(AccumulateWidened, EverySixteenBitValueWidensExactly) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (FloatFormat f : {FloatFormat::bf16, FloatFormat::f16}) {
    for (SimdLevel level : levels()) {
      SCOPED_TRACE(std::string(float_format_name(f)) + " " + std::string(simd_level_name(level)));
      std::vector<float> acc(all.size(), 123.0f);
      accumulate_widened(f, all.data(), acc.data(), all.size(), /*first=*/true, level);
      // A copy: bit for bit, NaN payloads included (-0 stays -0, subnormals kept).
      for (size_t i = 0; i < all.size(); ++i) {
        ASSERT_EQ(float_bits(acc[i]), float_bits(widen(f, all.data(), i))) << "value 0x" << std::hex << i;
      }
      const std::vector<float> start = interesting_floats(all.size(), 7);
      acc = start;
      accumulate_widened(f, all.data(), acc.data(), all.size(), /*first=*/false, level);
      for (size_t i = 0; i < all.size(); ++i) {
        ASSERT_TRUE(same_float(acc[i], start[i] + widen(f, all.data(), i))) << "value 0x" << std::hex << i;
      }
    }
  }
}

TEST(AccumulateWidened, Fp32CopiesThenAddsWithSignedZerosAndSpecials) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::numeric_limits<float>::denorm_min();
  const std::vector<float> src = {-0.0f, 0.0f, -0.0f, tiny, inf, -inf, nan, 1.5f, 3.4e38f};
  std::vector<float> acc(src.size(), 7.0f);
  accumulate_widened(FloatFormat::f32, src.data(), acc.data(), src.size(), true);
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(float_bits(acc[i]), float_bits(src[i])) << i;
  EXPECT_TRUE(std::signbit(acc[0]));  // the first contribution is a copy: -0 stays -0
  accumulate_widened(FloatFormat::f32, src.data(), acc.data(), src.size(), false);
  EXPECT_EQ(float_bits(acc[0]), float_bits(-0.0f));  // -0 + -0 = -0
  EXPECT_EQ(float_bits(acc[1]), float_bits(0.0f));
  EXPECT_EQ(acc[3], 2 * tiny);  // subnormals add exactly, never flushed
  EXPECT_EQ(acc[4], inf);
  EXPECT_EQ(acc[5], -inf);
  EXPECT_TRUE(std::isnan(acc[6]));
  EXPECT_EQ(acc[7], 3.0f);
  EXPECT_EQ(acc[8], inf);  // overflow rounds to Inf
  // +0 + -0 = +0 (round to nearest)
  std::vector<float> a = {0.0f};
  const float mz = -0.0f;
  accumulate_widened(FloatFormat::f32, &mz, a.data(), 1, false);
  EXPECT_FALSE(std::signbit(a[0]));
}

TEST(AccumulateWidened, AnySplitGivesTheSameBitsAsOneCall) {
  std::mt19937_64 rng(11);
  for (FloatFormat f : {FloatFormat::f32, FloatFormat::bf16, FloatFormat::f16}) {
    SCOPED_TRACE(std::string(float_format_name(f)));
    const size_t n = 10007;
    std::vector<uint8_t> src(n * float_format_size(f));
    for (auto& b : src) b = static_cast<uint8_t>(rng());
    const std::vector<float> start = interesting_floats(n, 3);
    for (int micro = 0; micro < 3; ++micro) {
      std::vector<float> whole = start;
      accumulate_widened(f, src.data(), whole.data(), n, micro == 0);
      for (SimdLevel level : levels()) {
        std::vector<float> parts = start;
        size_t i = 0;
        while (i < n) {
          const size_t len = std::min<size_t>(n - i, 1 + rng() % 700);
          accumulate_widened(f, src.data() + i * float_format_size(f), parts.data() + i, len, micro == 0, level);
          i += len;
        }
        for (size_t k = 0; k < n; ++k) {
          ASSERT_TRUE(same_float(parts[k], whole[k])) << k;
          const float want = micro == 0 ? widen(f, src.data(), k) : start[k] + widen(f, src.data(), k);
          ASSERT_TRUE(same_float(whole[k], want)) << k;
        }
      }
    }
  }
}

// ---- sum of squares -----------------------------------------------------------------------------

// The definitions, written as plainly as possible.
double reference_block(const float* x, size_t n) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < n; ++i) lane[i % 8] = lane[i % 8] + double(x[i]) * double(x[i]);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

double reference_sum(const float* x, size_t n) {
  double total = 0.0;
  for (size_t b = 0; b < n; b += kSumSquaresBlock) total = total + reference_block(x + b, std::min(kSumSquaresBlock, n - b));
  return total;
}

std::vector<float> gradient_like(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  // Magnitudes spread over many binades, so rounding order matters and a reordering would show.
  for (auto& x : v) x = normal(rng) * std::ldexp(1.0f, int(rng() % 30) - 15);
  return v;
}

TEST(SumSquares, BlockMatchesTheDefinitionBitForBit) {
  const std::vector<float> x = gradient_like(kSumSquaresBlock, 5);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{15}, size_t{16}, size_t{17},
                   size_t{1000}, size_t{4095}, kSumSquaresBlock}) {
    EXPECT_EQ(dbits(sum_squares_block(x.data(), n)), dbits(reference_block(x.data(), n))) << n;
  }
  for (size_t off = 1; off < 8; ++off) {  // unaligned starts
    EXPECT_EQ(dbits(sum_squares_block(x.data() + off, 3001)), dbits(reference_block(x.data() + off, 3001))) << off;
  }
  EXPECT_EQ(dbits(sum_squares_block(x.data(), 0)), dbits(0.0));
  const float three[] = {1.0f, 2.0f, -2.0f};
  EXPECT_EQ(sum_squares_block(three, 3), 9.0);
}

TEST(SumSquares, WholeArrayMatchesTheDefinitionWithAndWithoutThreads) {
  auto p1 = ThreadPool::create(ThreadPoolOptions{.threads = 1, .pin = false, .name = "ss1"});
  auto p2 = ThreadPool::create(ThreadPoolOptions{.threads = 2, .pin = false, .name = "ss2"});
  ASSERT_TRUE(p1.is_ok()) << p1.status().to_string();
  ASSERT_TRUE(p2.is_ok()) << p2.status().to_string();
  auto via = [](ThreadPool& pool) -> ParallelFor {
    return [&pool](size_t n, size_t grain, const std::function<void(size_t, size_t)>& body) { pool.parallel_for(n, grain, body); };
  };
  // Reversed, one block per call: the worst order a pool could pick.
  ParallelFor backwards = [](size_t n, size_t, const std::function<void(size_t, size_t)>& body) {
    for (size_t k = n; k-- > 0;) body(k, k + 1);
  };
  const size_t big = 1100 * kSumSquaresBlock + 123;  // more than two stack batches of block results
  const std::vector<float> x = gradient_like(big, 9);
  for (size_t n : {size_t{0}, size_t{1}, kSumSquaresBlock - 1, kSumSquaresBlock, kSumSquaresBlock + 1,
                   3 * kSumSquaresBlock + 17, 512 * kSumSquaresBlock, big}) {
    SCOPED_TRACE(n);
    const uint64_t want = dbits(reference_sum(x.data(), n));
    EXPECT_EQ(dbits(sum_squares(x.data(), n)), want);
    EXPECT_EQ(dbits(sum_squares(x.data(), n, via(**p1))), want);
    EXPECT_EQ(dbits(sum_squares(x.data(), n, via(**p2))), want);
    EXPECT_EQ(dbits(sum_squares(x.data(), n, backwards)), want);
  }
  // The definition really is order-sensitive for this data (so the checks above mean something):
  // a plain sequential double sum differs.
  double plain = 0.0;
  for (size_t i = 0; i < big; ++i) plain += double(x[i]) * double(x[i]);
  EXPECT_NE(dbits(plain), dbits(reference_sum(x.data(), big)));
}

TEST(SumSquares, NonFiniteInputsPropagate) {
  std::vector<float> x = gradient_like(3 * kSumSquaresBlock, 2);
  x[5000] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(sum_squares(x.data(), x.size()), std::numeric_limits<double>::infinity());
  x[5000] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(sum_squares(x.data(), x.size()), std::numeric_limits<double>::infinity());
  x[100] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(sum_squares(x.data(), x.size())));
  x[5000] = 1.0f;
  EXPECT_TRUE(std::isnan(sum_squares(x.data(), x.size())));
  x[100] = 1.0f;
  x.back() = std::numeric_limits<float>::quiet_NaN();  // in the tail lane of the last block
  EXPECT_TRUE(std::isnan(sum_squares(x.data(), x.size())));
  // The largest float squared is finite in double.
  const float big[] = {3.4e38f, -3.4e38f};
  EXPECT_TRUE(std::isfinite(sum_squares(big, 2)));
}

}  // namespace
}  // namespace strata::kernels
