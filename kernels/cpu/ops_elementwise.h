// Elementwise ops on the CPU: GELU (tanh approximation, as GPT-2 and llm.c), SwiGLU (LLaMA's MLP
// gate) and the residual add, forward and backward in fp32. Pure compute: no allocation, no
// globals, no I/O; loops over the caller's oneTBB arena (no reductions, so results never depend on
// scheduling). Backward ops ACCUMULATE (+=); a gradient must not alias the dout it is built from.
#pragma once

#include <cstdint>

namespace strata::kernels {

// out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = inp (n). out may equal inp.
void gelu_forward(float* out, const float* inp, int64_t n);
// dinp (n) += gelu'(inp) * dout.
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);

// SwiGLU over one fused input, the output of one matmul with weight (2H, C) whose first H rows are
// the gate projection (w1) and last H rows the up projection (w3):
//   inp (N, 2H): inp[n, 0:H] = gate, inp[n, H:2H] = up;  out (N, H) = silu(gate) * up,
//   silu(g) = g * sigmoid(g).
void swiglu_forward(float* out, const float* inp, int64_t N, int64_t H);
// dinp (N, 2H) += [d gate | d up] given dout (N, H).
void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t H);

// out (n) = a (n) + b (n). out may equal a or b.
void residual_forward(float* out, const float* a, const float* b, int64_t n);
// da (n) += dout, db (n) += dout; either may be null.
void residual_backward(float* da, float* db, const float* dout, int64_t n);

}  // namespace strata::kernels
