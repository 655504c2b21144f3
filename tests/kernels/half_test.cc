// Tests of the scalar fp32 <-> bf16 / fp16 conversions (kernels/cpu/half.h), the reference the
// vector conversions are compared with: exact known values, round-to-nearest-even ties, overflow,
// subnormals, NaN, and exhaustive round trips over all 65536 16-bit patterns.
#include "kernels/cpu/half.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace strata::kernels {
namespace {

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808000u)), 0x3f80);  // tie, lower is even: down
  EXPECT_EQ(float_to_bf16(bits_float(0x3f818000u)), 0x3f82);  // tie, lower is odd: up
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808001u)), 0x3f81);  // above the tie: up
  EXPECT_EQ(float_to_bf16(bits_float(0x3f807fffu)), 0x3f80);  // below the tie: down
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
}

TEST(Bf16, OverflowInfNanAndSubnormals) {
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to Inf
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(float_to_bf16(bits_float(0x7fc00000u)), 0x7fc0);
  EXPECT_EQ(float_to_bf16(bits_float(0x7f800001u)), 0x7fc0);  // signalling NaN, low payload: quiet, not Inf
  EXPECT_EQ(float_to_bf16(bits_float(0xff812345u)), 0xffc1);  // sign and top payload kept
  EXPECT_EQ(float_to_bf16(bits_float(0x00018000u)), 0x0002);  // subnormal tie to even (up)
  EXPECT_EQ(float_to_bf16(bits_float(0x00008000u)), 0x0000);  // subnormal tie to even (down)
  EXPECT_EQ(float_to_bf16(bits_float(0x80000000u)), 0x8000);  // -0 stays -0
}

TEST(Bf16, RoundTripsEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    EXPECT_EQ(float_bits(f), h << 16);
    const bool nan = (h & 0x7fff) > 0x7f80;
    const uint16_t expect = nan ? static_cast<uint16_t>(h | 0x40) : static_cast<uint16_t>(h);
    ASSERT_EQ(float_to_bf16(f), expect) << "pattern " << h;
  }
}

TEST(Fp16, KnownValuesAndTies) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16(-2.5f), 0xc100);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65519.99f), 0x7bff);  // below the tie with 65536
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);   // tie, rounds to even = Inf
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);                           // tie down
  EXPECT_EQ(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);                       // tie up
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);  // above
}

TEST(Fp16, SubnormalsUnderflowAndNan) {
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie with 0: even = 0
  EXPECT_EQ(float_to_fp16(std::ldexp(1.5f, -25)), 0x0001);  // above the tie
  EXPECT_EQ(float_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 * 2^-24: tie, to even 2
  EXPECT_EQ(float_to_fp16(std::ldexp(1023.5f, -24)), 0x0400);  // tie, carries into min normal
  EXPECT_EQ(float_to_fp16(-std::ldexp(1.0f, -30)), 0x8000);  // underflow keeps the sign
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_fp16(bits_float(0x7f800001u)), 0x7e00);  // signalling NaN -> quiet NaN
  EXPECT_EQ(float_to_fp16(bits_float(0xffc02000u)), 0xfe01);  // sign and top payload kept
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_float(0x83ff), -std::ldexp(1023.0f, -24));
  EXPECT_EQ(float_bits(fp16_to_float(0x7c01)), 0x7fc02000u);  // NaN becomes quiet
}

TEST(Fp16, RoundTripsEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_float(static_cast<uint16_t>(h));
    const bool nan = (h & 0x7fff) > 0x7c00;
    const uint16_t expect = nan ? static_cast<uint16_t>(h | 0x200) : static_cast<uint16_t>(h);
    ASSERT_EQ(float_to_fp16(f), expect) << "pattern " << h;
    if (!nan && (h & 0x7c00) != 0x7c00) {
      ASSERT_EQ(static_cast<double>(f), std::ldexp(static_cast<double>((h & 0x3ff) | ((h & 0x7c00) ? 0x400 : 0)),
                                                   std::max<int>((h >> 10) & 0x1f, 1) - 25) *
                                            ((h & 0x8000) ? -1.0 : 1.0))
          << "pattern " << h;
    }
  }
}

}  // namespace
}  // namespace strata::kernels
