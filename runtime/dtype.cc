// DType name parsing.
#include "runtime/dtype.h"

#include <utility>

namespace strata {

StatusOr<DType> parse_dtype(std::string_view name) {
  static const std::pair<std::string_view, DType> names[] = {
      {"fp32", DType::f32}, {"float32", DType::f32}, {"f32", DType::f32},  {"fp16", DType::f16},
      {"float16", DType::f16}, {"f16", DType::f16},  {"half", DType::f16}, {"bf16", DType::bf16},
      {"bfloat16", DType::bf16}, {"u8", DType::u8},  {"u16", DType::u16},  {"i32", DType::i32},
      {"u32", DType::u32}};
  for (const auto& [n, t] : names)
    if (n == name) return t;
  return error(Code::invalid_argument, "unknown dtype '{}' (use fp32, bf16 or fp16)", name);
}

}  // namespace strata
