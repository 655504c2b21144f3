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

}  // namespace
}  // namespace strata::kernels
