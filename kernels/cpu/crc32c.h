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

// The CRC-32C of A followed by B from crc32c(0, A) = `crc_a`, crc32c(0, B) = `crc_b` and B's
// length: crc32c_combine(crc32c(0, a, na), crc32c(0, b, nb), nb) == crc32c(crc32c(0, a, na), b, nb).
// What lets pieces of one file checksummed apart (by different processes) give the file's CRC.
// O(log len_b) multiplications mod P; no data is read.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// The reference (one table lookup per byte) and the hardware path, for tests and benches.
// crc32c_hw must only be called when crc32c_hw_supported().
uint32_t crc32c_scalar(uint32_t crc, const void* data, size_t n);
uint32_t crc32c_hw(uint32_t crc, const void* data, size_t n);
bool crc32c_hw_supported();

}  // namespace strata::kernels
