// Adam/AdamW with 8-bit states, AVX-512 + AVX512_BF16 (adam8bit_bf16.h): the block loop of
// adam8bit_kernel.h instantiated with Avx512Bf16Ops, which differ from Avx512Ops only in the bf16
// store. Compiled with the AVX-512 flags plus -mavx512bf16 (both from the file name,
// kernels/CMakeLists.txt; GCC and clang accept the same flags); called only after cpuid says so.
#include <bit>

#include "kernels/cpu/adam8bit_bf16.h"
#include "kernels/cpu/adam8bit_kernel.h"

namespace strata::kernels {
namespace {

struct Avx512Bf16Ops : Avx512Ops {
  // vcvtneps2bf16 rounds to nearest even and quiets NaN exactly as float_to_bf16 (half.h), but reads
  // denormal inputs as zero: a vector holding a denormal (rare: |x| < 2^-126) takes the integer
  // conversion of Avx512Ops instead, so the bits match float_to_bf16 for every input.
  static void store_bf16(uint16_t* p, F x) {
    if (__builtin_expect(_mm512_fpclass_ps_mask(x, 0x20) != 0, 0)) {  // 0x20: denormal
      Avx512Ops::store_bf16(p, x);
      return;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), std::bit_cast<__m256i>(_mm512_cvtneps_pbh(x)));
  }
};

}  // namespace

namespace detail {

void adam8bit_update_avx512_bf16(const AdamConstants& c, const AdamFormats& f, const Adam8bitSpan& s) {
  adam8bit_dispatch<Avx512Bf16Ops>(c, f, s);
}

}  // namespace detail
}  // namespace strata::kernels
