// cpuid-based SIMD level detection (GCC/Clang __builtin_cpu_supports, which also checks that the
// OS saves the vector state).
#include "kernels/cpu/simd_level.h"

#include <cpuid.h>

namespace strata::kernels {
namespace {

// F16C straight from cpuid (leaf 1, ECX bit 29): clang 14's __builtin_cpu_supports has no "f16c".
// GCC's own check is this bit plus OS support for the ymm state, which the avx2 test beside every
// call already requires, so the answer is the same under both compilers.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

// What this CPU supports, asked once: cpuid is slow under a hypervisor (each one traps to it, a
// microsecond or more), and the kernels ask per call, some per 4096-element block (the blocked
// norm of a 16-bit gradient: 30K cpuids a step for gpt2-124m, 5% of its CPU step in a VM).
struct CpuSimd {
  bool avx2 = false;
  bool avx512 = false;
};

CpuSimd detect_cpu_simd() {
  CpuSimd s;
  s.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  s.avx512 = s.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return s;
}

const CpuSimd& cpu_simd() {
  static const CpuSimd simd = detect_cpu_simd();  // thread-safe initialisation, once a process
  return simd;
}

}  // namespace

bool simd_level_supported(SimdLevel level) {
  switch (level) {
    case SimdLevel::scalar: return true;
    case SimdLevel::avx2: return cpu_simd().avx2;
    case SimdLevel::avx512: return cpu_simd().avx512;
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
