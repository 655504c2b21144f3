// Element types of tensors and buffers, with their sizes and names. Not a tensor library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/status.h"

namespace strata {

enum class DType : uint8_t { f32, f16, bf16, u8, u16, i32, u32 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::u8: return 1;
    case DType::u16: return 2;
    case DType::i32: return 4;
    case DType::u32: return 4;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::u8: return "u8";
    case DType::u16: return "u16";
    case DType::i32: return "i32";
    case DType::u32: return "u32";
  }
  return "?";
}

// Accepts fp32/float32/f32, fp16/float16/f16/half, bf16/bfloat16, u8, u16, i32, u32.
StatusOr<DType> parse_dtype(std::string_view name);

}  // namespace strata
