// The checkpoint names of the optimizer state (see optimizer_buffers.h).
#include "model/ckpt/optimizer_buffers.h"

#include <string_view>

#include <fmt/format.h>

namespace strata::model {

std::vector<OptimizerBuffer> optimizer_buffers(size_t chunk, const OptimizerStateLayout& layout, std::byte* image) {
  const auto buffer = [&](std::string_view what, SafeDType dtype, const StateRegion& r) {
    return OptimizerBuffer{.name = fmt::format("{}.{}", what, chunk), .dtype = dtype,
                           .data = image == nullptr ? nullptr : image + r.offset, .bytes = r.bytes};
  };
  if (layout.states == AdamStates::f32) return {buffer("m", SafeDType::f32, layout.m), buffer("v", SafeDType::f32, layout.v)};
  return {buffer("m_code", SafeDType::i8, layout.m_code), buffer("v_code", SafeDType::u8, layout.v_code),
          buffer("m_scale", SafeDType::f32, layout.m_scale), buffer("v_scale", SafeDType::f32, layout.v_scale)};
}

std::vector<OptimizerBuffer> optimizer_buffers(const StatePiece& piece, const OptimizerStateLayout& layout,
                                               std::byte* image) {
  std::vector<OptimizerBuffer> buffers = optimizer_buffers(piece.chunk, layout, image);
  // fp32 m, v: 4 bytes per element; 8-bit codes: 1 byte per element, then the scales: 4 bytes each.
  const bool q8 = layout.states == AdamStates::q8;
  for (size_t i = 0; i < buffers.size(); ++i)
    buffers[i].offset = !q8 ? piece.element_begin * sizeof(float) : i < 2 ? piece.element_begin : piece.scale_begin * sizeof(float);
  return buffers;
}

}  // namespace strata::model
