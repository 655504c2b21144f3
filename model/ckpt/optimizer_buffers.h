// The checkpoint names of the optimizer state: one chunk's state (OptimizerStateLayout, offload/
// optimizer_pipeline.h), or one piece of it (StatePiece, model/plan/placement.h), as the named,
// typed buffers optimizer.safetensors stores (model/ckpt/checkpoint.h). Pure: names, dtypes, sizes
// and offsets, pointing into an image when given. Not the state itself (model/train/
// optimizer_state.h) and not the file format (model/hf/safetensors.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/hf/safetensors.h"
#include "model/plan/placement.h"
#include "offload/optimizer_pipeline.h"

namespace strata::model {

// One named buffer of a chunk's optimizer state, as a checkpoint stores it. fp32 moments:
// "m.<chunk>", "v.<chunk>" F32, the chunk's padded fp32 bytes. 8-bit moments: "m_code.<chunk>" I8
// and "v_code.<chunk>" U8 (one byte per padded fp32 element of the chunk), "m_scale.<chunk>",
// "v_scale.<chunk>" F32 (the block scales of the chunk's tensors, in order). A piece of the state
// (model/plan/placement.h) holds `bytes` of it from byte `offset` on; `data` points into the piece's
// image during a visit (null when only the names and sizes are wanted).
struct OptimizerBuffer {
  std::string name;
  SafeDType dtype = SafeDType::f32;
  std::byte* data = nullptr;
  uint64_t bytes = 0;
  uint64_t offset = 0;
};
// The whole buffers of chunk `chunk` whose state, as one image, is laid out as `layout` (offload/
// optimizer_pipeline.h), pointing into `image` when given (offsets 0).
std::vector<OptimizerBuffer> optimizer_buffers(size_t chunk, const OptimizerStateLayout& layout,
                                               std::byte* image = nullptr);
// The shares of its chunk's buffers (same order) that piece `piece`, laid out as `layout`, holds,
// pointing into `image` when given.
std::vector<OptimizerBuffer> optimizer_buffers(const StatePiece& piece, const OptimizerStateLayout& layout,
                                               std::byte* image = nullptr);

}  // namespace strata::model
