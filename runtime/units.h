// Parsing and printing of sizes and counts as users write them: "512MiB", "24GB", "1.5TiB",
// "4k", "100M" params. Binary units (KiB, MiB, GiB, TiB, and fio-style k/K, m/M, g/G, t/T for
// sizes) are powers of 1024; SI units (KB, MB, GB, TB) are powers of 1000. Not a general
// expression parser: one number, optional fraction, one optional unit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace strata {

// Bytes. "4096", "4k", "512MiB", "24GB", "1.5TiB", "8 MiB". Rejects negatives, unknown units,
// results above 2^63, and fractions that do not land on a whole byte only by rounding (they round
// to nearest). The error names the text and lists the accepted units.
StatusOr<uint64_t> parse_size(std::string_view text);

// Counts with SI suffixes: "100M" = 1e8, "1.5B" or "1.5G" = 1.5e9, "17", "4K" = 4000.
StatusOr<uint64_t> parse_count(std::string_view text);

// "1.5 GiB", "512 MiB", "4 KiB", "17 B": binary units, at most 3 significant digits (1000 MiB
// stays "1000 MiB"), no exponent.
std::string format_size(uint64_t bytes);
// "1.23 GB/s" from bytes and seconds (SI, as drive vendors and fio print throughput).
std::string format_rate(double bytes_per_second);
// "124M", "1.5B", "17": SI suffixes, formatted like format_size.
std::string format_count(double count);

}  // namespace strata
