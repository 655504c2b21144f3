// CRC-32C against published vectors (RFC 3720 appendix B.4 and the "123456789" check value), and
// the hardware path against the table-driven reference at every size and alignment class.
#include "kernels/cpu/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace strata::kernels {
namespace {

TEST(Crc32c, KnownVectors) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32c_scalar(0, check.data(), check.size()), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; i++) {
    up[i] = static_cast<uint8_t>(i);
    down[i] = static_cast<uint8_t>(31 - i);
  }
  EXPECT_EQ(crc32c_scalar(0, zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c_scalar(0, ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c_scalar(0, up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c_scalar(0, down.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(0, check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(crc32c(0, up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(0, nullptr, 0), 0u);
}

TEST(Crc32c, HardwareMatchesReferenceAtEverySize) {
  if (!crc32c_hw_supported()) GTEST_SKIP() << "this CPU has no SSE4.2 crc32 instruction";
  std::mt19937_64 rng(7);
  std::vector<uint8_t> data(3 * 4096 * 3 + 123);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  // Sizes around the 3 x 4 KiB interleaved block, and odd starts (unaligned loads).
  for (size_t n : {0, 1, 7, 8, 9, 63, 4096, 12287, 12288, 12289, 24576 + 5, 36864 + 100}) {
    for (size_t start : {0, 1, 3}) {
      ASSERT_LE(start + n, data.size());
      EXPECT_EQ(crc32c_hw(0x1234u, data.data() + start, n), crc32c_scalar(0x1234u, data.data() + start, n))
          << "n=" << n << " start=" << start;
    }
  }
}

TEST(Crc32c, ChainingEqualsOneShot) {
  std::vector<uint8_t> data(50000);
  std::mt19937 rng(3);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  uint32_t whole = crc32c(0, data.data(), data.size());
  uint32_t part = crc32c(0, data.data(), 12345);
  part = crc32c(part, data.data() + 12345, data.size() - 12345);
  EXPECT_EQ(part, whole);
  EXPECT_EQ(crc32c_scalar(0, data.data(), data.size()), whole);
  data[40000] ^= 0x01;  // one flipped bit changes the CRC
  EXPECT_NE(crc32c(0, data.data(), data.size()), whole);
}

TEST(Crc32c, CombineOfPiecesEqualsTheWhole) {
  std::vector<uint8_t> data(70000);
  std::mt19937 rng(5);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const uint32_t whole = crc32c(0, data.data(), data.size());
  for (size_t cut : {size_t(0), size_t(1), size_t(7), size_t(4096), size_t(12345), size_t(69999), data.size()}) {
    const uint32_t a = crc32c(0, data.data(), cut), b = crc32c(0, data.data() + cut, data.size() - cut);
    EXPECT_EQ(crc32c_combine(a, b, data.size() - cut), whole) << "cut at " << cut;
  }
  // Three pieces, folded left to right as a file's fragments are.
  const uint32_t p1 = crc32c(0, data.data(), 100), p2 = crc32c(0, data.data() + 100, 30000),
                 p3 = crc32c(0, data.data() + 30100, data.size() - 30100);
  EXPECT_EQ(crc32c_combine(crc32c_combine(p1, p2, 30000), p3, data.size() - 30100), whole);
  EXPECT_NE(crc32c_combine(p2, p1, 100), whole);  // the order matters
}

}  // namespace
}  // namespace strata::kernels
