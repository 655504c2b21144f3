// Embedding lookups on the CPU: GPT-2's encoder (token + learned position embedding) and LLaMA's
// plain token embedding, forward and backward (a scatter-add into the tables), fp32. Pure compute:
// no allocation, no globals, no I/O. Token ids must lie in [0, V) (the caller validates data).
// Backward ACCUMULATES (+=): each table row gets one += of its summed gradient (the rows of one
// token summed in row order), so results are bit-identical whatever the thread count. The backward
// allocates O(N) scratch (the rows sorted by token).
#pragma once

#include <cstdint>

namespace strata::kernels {

// out (B, T, C) = wte[tokens[b, t]] + wpe[t]; tokens (B, T), wte (V, C), wpe (maxT >= T, C).
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                     int64_t T, int64_t C);
// dwte (V, C) += scatter of dout (B, T, C) by token; dwpe (maxT, C) rows 0..T-1 += sum over b.
// Either gradient may be null.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                      int64_t T, int64_t C);

// out (N, C) = wte[tokens[n]]; tokens (N), wte (V, C).
void token_embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t N, int64_t C);
// dwte (V, C) += scatter of dout (N, C) by token.
void token_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t N, int64_t C);

}  // namespace strata::kernels
