// SIMD levels the CPU kernels are compiled for, and which one this CPU runs best. Kernels take a
// SimdLevel argument (no global state); the caller picks best_simd_level() or a user override
// (config key `simd` / STRATA_SIMD). The scalar variant is the reference the others are tested
// against. Not a vector abstraction (that is per-kernel, in the *_avx2.cc / *_avx512.cc files).
#pragma once

#include <cstdint>
#include <string_view>

namespace strata::kernels {

enum class SimdLevel : uint8_t { scalar = 0, avx2 = 1, avx512 = 2 };

// By cpuid: avx512 needs AVX-512 F, BW, VL and DQ (and OS support for the zmm state); avx2 needs
// AVX2, FMA and F16C; anything else is scalar.
SimdLevel best_simd_level();
// True if this CPU can run `level`.
bool simd_level_supported(SimdLevel level);

std::string_view simd_level_name(SimdLevel level);
// "scalar", "avx2", "avx512"; false if the name is unknown.
bool parse_simd_level(std::string_view name, SimdLevel* out);

}  // namespace strata::kernels
