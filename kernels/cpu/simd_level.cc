// cpuid-based SIMD level detection (GCC/Clang __builtin_cpu_supports, which also checks that the
// OS saves the vector state).
#include "kernels/cpu/simd_level.h"

namespace strata::kernels {

bool simd_level_supported(SimdLevel level) {
  switch (level) {
    case SimdLevel::scalar: return true;
    case SimdLevel::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case SimdLevel::avx512:
      return simd_level_supported(SimdLevel::avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
  }
  return false;
}

SimdLevel best_simd_level() {
  if (simd_level_supported(SimdLevel::avx512)) return SimdLevel::avx512;
  if (simd_level_supported(SimdLevel::avx2)) return SimdLevel::avx2;
  return SimdLevel::scalar;
}

std::string_view simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::scalar: return "scalar";
    case SimdLevel::avx2: return "avx2";
    case SimdLevel::avx512: return "avx512";
  }
  return "?";
}

bool parse_simd_level(std::string_view name, SimdLevel* out) {
  for (SimdLevel l : {SimdLevel::scalar, SimdLevel::avx2, SimdLevel::avx512}) {
    if (name == simd_level_name(l)) {
      *out = l;
      return true;
    }
  }
  return false;
}

}  // namespace strata::kernels
