// CRC-32C: table-driven reference and the SSE4.2 crc32-instruction path (see crc32c.h). The fast
// path runs three independent CRCs over adjacent blocks (the instruction has a 3-cycle latency
// and issues every cycle) and joins them with a multiplication by x^(8*block) mod P.
#include "kernels/cpu/crc32c.h"

#include <array>
#include <cstring>

namespace strata::kernels {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // CRC-32C, bit-reflected

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

// a * b mod P in the reflected representation (x^0 is the top bit), as in zlib's crc32_combine.
constexpr uint32_t mult_mod_p(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// x^(8 * bytes) mod P: multiplying a raw CRC by it appends `bytes` zero bytes.
constexpr uint32_t x_pow_8n(uint64_t bytes) {
  uint32_t result = 1u << 31;  // x^0
  uint32_t power = 1u << 23;   // x^8 (one byte)
  for (uint64_t n = bytes; n != 0; n >>= 1) {
    if (n & 1) result = mult_mod_p(power, result);
    power = mult_mod_p(power, power);
  }
  return result;
}

constexpr size_t kBlock = 4096;  // bytes per stream in the interleaved loop
constexpr uint32_t kShiftBlock = x_pow_8n(kBlock);
constexpr uint32_t kShift2Blocks = x_pow_8n(2 * kBlock);

uint32_t raw_scalar(uint32_t crc, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; i++) crc = kTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

__attribute__((target("sse4.2"))) uint32_t raw_hw_serial(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  auto c32 = static_cast<uint32_t>(c);
  for (; n > 0; n--, p++) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}

__attribute__((target("sse4.2"))) uint32_t raw_hw(uint32_t crc, const uint8_t* p, size_t n) {
  while (n >= 3 * kBlock) {
    uint64_t a = crc, b = 0, c = 0;
    for (size_t i = 0; i < kBlock; i += 8) {
      uint64_t va, vb, vc;
      std::memcpy(&va, p + i, 8);
      std::memcpy(&vb, p + kBlock + i, 8);
      std::memcpy(&vc, p + 2 * kBlock + i, 8);
      a = __builtin_ia32_crc32di(a, va);
      b = __builtin_ia32_crc32di(b, vb);
      c = __builtin_ia32_crc32di(c, vc);
    }
    crc = mult_mod_p(kShift2Blocks, static_cast<uint32_t>(a)) ^ mult_mod_p(kShiftBlock, static_cast<uint32_t>(b)) ^
          static_cast<uint32_t>(c);
    p += 3 * kBlock;
    n -= 3 * kBlock;
  }
  return raw_hw_serial(crc, p, n);
}

}  // namespace

uint32_t crc32c_scalar(uint32_t crc, const void* data, size_t n) {
  return ~raw_scalar(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t crc32c_hw(uint32_t crc, const void* data, size_t n) {
  return ~raw_hw(~crc, static_cast<const uint8_t*>(data), n);
}

bool crc32c_hw_supported() {
  static const bool supported = __builtin_cpu_supports("sse4.2");
  return supported;
}

uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
  return crc32c_hw_supported() ? crc32c_hw(crc, data, n) : crc32c_scalar(crc, data, n);
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  // Conditioned CRCs (pre- and post-inverted) combine like raw ones: A's CRC shifted over B's
  // length, plus B's (zlib's crc32_combine).
  return mult_mod_p(x_pow_8n(len_b), crc_a) ^ crc_b;
}

}  // namespace strata::kernels
