// CRC-32C (Castagnoli, the iSCSI/ext4 checksum): the checksum NvmeStore writes with every extent
// and checks on read. crc32c() uses the CPU's crc32 instruction (SSE4.2, three interleaved
// streams) when cpuid has it, else the table-driven scalar reference, which the fast path is
// tested against. Pure functions: no I/O, no state beyond constant tables.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata::kernels {

// The CRC-32C of `n` bytes, continuing from `crc` (0 to start): crc32c(crc32c(0, a), b) is the
// CRC of a followed by b. crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t crc32c(uint32_t crc, const void* data, size_t n);

// The reference (one table lookup per byte) and the hardware path, for tests and benches.
// crc32c_hw must only be called when crc32c_hw_supported().
uint32_t crc32c_scalar(uint32_t crc, const void* data, size_t n);
uint32_t crc32c_hw(uint32_t crc, const void* data, size_t n);
bool crc32c_hw_supported();

}  // namespace strata::kernels
