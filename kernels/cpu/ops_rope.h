// Rotary position embedding (RoPE) on the CPU, forward and backward, fp32, applied to one tensor
// laid out (B, T, NH, HS) (q with NH = n_head, or k with NH = n_kv_head: call once for each).
// Pairing is the "rotate half" convention of GPT-NeoX and Hugging Face LLaMA: element i pairs with
// element i + HS/2, at frequency theta^(-2i/HS), i in [0, HS/2); HS must be even. The angle of
// position p = pos_offset + t is p * freq, computed in double. Pure compute: no globals, no I/O;
// each task holds HS floats of cos/sin scratch.
// stride (both functions): the row stride in elements between consecutive positions (b, t) of both
// tensors, so that q or k may be a column block of the fused projection's output; 0 means packed
// (NH * HS), else >= NH * HS. Elements outside the NH * HS columns of each row are never touched.
#pragma once

#include <cstdint>

namespace strata::kernels {

inline constexpr float kRopeThetaDefault = 10000.0f;

// out (B, T, NH, HS) = rotate(inp) by the angle of each position. out may equal inp (in place).
void rope_forward(float* out, const float* inp, int64_t B, int64_t T, int64_t NH, int64_t HS, float theta,
                  int64_t pos_offset, int64_t stride = 0);

// dinp (B, T, NH, HS) = rotate^-1(dout) (the inverse rotation, the transpose of the forward),
// overwritten. dinp may equal dout (in place: the attention's gradient of the rotated q or k turned
// into the projection's).
void rope_backward(float* dinp, const float* dout, int64_t B, int64_t T, int64_t NH, int64_t HS, float theta,
                   int64_t pos_offset, int64_t stride = 0);

}  // namespace strata::kernels
