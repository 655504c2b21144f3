// The copy-out alignment check shared by the fp32 and 8-bit Adam kernel tests: the kernels stream
// the bf16/fp16 copy with non-temporal stores when it starts on a vector boundary and store it
// plainly otherwise (kernels/cpu/adam_kernel.h). GuardedCopy puts the copy at any offset from a
// 64-byte boundary with guard bytes around it; expect_copy_out_at_every_offset runs a kernel with
// its copy at every 2-byte offset in a cache line against the scalar kernel.
// Not a general guarded allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/adam.h"
#include "tests/kernels/optim_test_support.h"

namespace strata::kernels::testing {

class GuardedCopy {
 public:
  GuardedCopy(size_t bytes, size_t offset) : bytes_(bytes), storage_(bytes + 192, kGuard) {
    begin_ = (64 - reinterpret_cast<uintptr_t>(storage_.data()) % 64) % 64 + 64 + offset % 64;
  }
  uint8_t* data() { return storage_.data() + begin_; }
  // Index of the first guard byte that changed, or SIZE_MAX if none did.
  size_t first_changed_guard() const {
    for (size_t i = 0; i < storage_.size(); ++i)
      if ((i < begin_ || i >= begin_ + bytes_) && storage_[i] != kGuard) return i;
    return SIZE_MAX;
  }

 private:
  static constexpr uint8_t kGuard = 0xab;
  size_t bytes_;
  std::vector<uint8_t> storage_;
  size_t begin_ = 0;
};

// make() returns fresh buffers (param, states, grad and a copy_out vector of copy_bytes, with
// span() and formats); update is adam_update or adam8bit_update. One default step each: the scalar
// kernel into the buffers' own copy, `level` into a GuardedCopy at the offset.
template <class Make, class Update>
void expect_copy_out_at_every_offset(const Make& make, Update update, SimdLevel level, size_t copy_bytes,
                                     const std::string& what) {
  const AdamConstants c = adam_constants(AdamHyper{});
  for (size_t offset = 0; offset < 64; offset += 2) {
    auto ref = make();
    auto got = make();
    GuardedCopy guarded(copy_bytes, offset);
    auto span = got.span();
    span.copy_out = guarded.data();
    EXPECT_EQ(update(c, ref.formats, ref.span(), SimdLevel::scalar), SimdLevel::scalar);
    EXPECT_EQ(update(c, got.formats, span, level), level);
    ASSERT_EQ(first_byte_mismatch(ref.copy_out.data(), guarded.data(), copy_bytes), copy_bytes)
        << what << " offset " << offset;
    EXPECT_EQ(guarded.first_changed_guard(), SIZE_MAX) << what << " offset " << offset;
  }
}

}  // namespace strata::kernels::testing
