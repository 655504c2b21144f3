// Tests of the memory-ceiling kernel (kernels/cpu/stream_ceiling.h): each variant touches every
// stream with its trivial arithmetic (p += g, m += 1, v += g; 8-bit codes += 1; copy = convert(p)),
// so the bandwidth it measures is Adam's access pattern, not a shortcut.
#include "kernels/cpu/stream_ceiling.h"

#include <random>

#include <gtest/gtest.h>

#include "tests/kernels/optim_test_support.h"

namespace strata::kernels {
namespace {

class StreamCeilingTest : public ::testing::TestWithParam<SimdLevel> {};

TEST_P(StreamCeilingTest, TouchesEveryStream) {
  const SimdLevel level = GetParam();
  STRATA_SKIP_IF_UNSUPPORTED(level);
  const size_t n = 1000;  // not a multiple of 16: the tail too
  // The copy starting on a 64-byte boundary (streamed, as the Adam kernels do) and 2 bytes past one.
  for (size_t offset : {size_t{0}, size_t{2}}) {
    for (bool eight_bit : {false, true}) {
      const std::vector<float> p0 = testing::random_floats(n, 61, -1.0f, 1.0f);
      const std::vector<float> g = testing::random_floats(n, 62, -1.0f, 1.0f);
      const auto g16 = testing::encode_floats(g, FloatFormat::bf16);
      std::vector<float> p = p0, m(n, 2.0f), v(n, 3.0f);
      std::vector<uint8_t> mc(n, 7), vc(n, 254);
      std::vector<uint16_t> copy(n + 64);
      uint16_t* out = copy.data() + ((64 - reinterpret_cast<uintptr_t>(copy.data()) % 64) % 64 + offset) / 2;
      const CeilingSpan s{p.data(), eight_bit ? static_cast<void*>(mc.data()) : m.data(),
                          eight_bit ? static_cast<void*>(vc.data()) : v.data(), g16.data(), out, n};
      EXPECT_EQ(stream_ceiling(AdamFormats{FloatFormat::bf16, CopyOut::bf16}, eight_bit, s, level), level);
      for (size_t i = 0; i < n; ++i) {
        const float gi = bf16_to_float(float_to_bf16(g[i]));
        ASSERT_EQ(p[i], p0[i] + gi) << i;
        ASSERT_EQ(out[i], float_to_bf16(p[i])) << i;
        if (eight_bit) {
          ASSERT_EQ(mc[i], 8) << i;
          ASSERT_EQ(vc[i], 255) << i;
        } else {
          ASSERT_EQ(m[i], 3.0f) << i;
          ASSERT_EQ(v[i], 3.0f + gi) << i;
        }
      }
    }
  }
}

// The vector bf16/fp16 conversions (simd_ops.h, shared by the Adam, 8-bit Adam and ceiling
// kernels) against the scalar ones of half.h on edge cases: ties, subnormals, overflow, Inf, NaN.
// The ceiling kernel with a zero gradient writes convert(p + 0) = convert(p) (only -0 becomes +0).
TEST_P(StreamCeilingTest, CopyOutConvertsEdgeCasesLikeTheScalarConversions) {
  const SimdLevel level = GetParam();
  STRATA_SKIP_IF_UNSUPPORTED(level);
  std::vector<uint32_t> patterns = {
      0x00000000u, 0x00000001u, 0x00008000u, 0x00018000u, 0x007fffffu, 0x00800000u, 0x3f808000u,
      0x3f818000u, 0x3f807fffu, 0x3f800fffu, 0x3f801000u, 0x3f803000u, 0x7f7fffffu, 0x7f800000u,
      0xff800000u, 0x7fc00000u, 0x7fa00001u, 0xffc12345u, 0x477fe000u, 0x477ff000u, 0x477fefffu,
      0x33000000u, 0x33000001u, 0x337fffffu, 0x38800000u, 0x387fe000u, 0x387ff000u, 0xb3c00000u,
      0x34000000u, 0x7f7f8000u, 0x3380ffffu, 0xc77ff000u};
  std::mt19937 rng(3);
  while (patterns.size() < 4099) patterns.push_back(rng() & 0xffbfffffu);  // every exponent; no sNaN
  const size_t n = patterns.size();
  for (CopyOut copy : {CopyOut::bf16, CopyOut::f16}) {
    std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n, 0.0f);
    for (size_t i = 0; i < n; ++i) p[i] = bits_float(patterns[i]);
    std::vector<uint16_t> out(n);
    stream_ceiling(AdamFormats{FloatFormat::f32, copy}, false, CeilingSpan{p.data(), m.data(), v.data(), g.data(), out.data(), n},
                   level);
    for (size_t i = 0; i < n; ++i) {
      const float x = bits_float(patterns[i]);
      const uint16_t expect = copy == CopyOut::bf16 ? float_to_bf16(x) : float_to_fp16(x);
      ASSERT_EQ(out[i], expect) << "pattern 0x" << std::hex << patterns[i] << " copy " << copy_out_name(copy);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Simd, StreamCeilingTest,
                         ::testing::Values(SimdLevel::scalar, SimdLevel::avx2, SimdLevel::avx512),
                         [](const auto& info) { return std::string(simd_level_name(info.param)); });

}  // namespace
}  // namespace strata::kernels
