// Row normalisations on the CPU: LayerNorm (GPT-2) and RMSNorm (LLaMA), forward and backward, fp32
// with per-row statistics accumulated in double. Pure compute: no allocation, no globals, no I/O.
// Rows are spread over the caller's oneTBB arena; every reduction has a fixed order (per row, or
// per channel over rows in row order), so results are bit-identical whatever the thread count.
// Backward ops ACCUMULATE (+=) into every gradient, one += per element (a weight's sum over rows
// is formed first), so a call adds the same amount whatever the gradient held. No aliasing.
#pragma once

#include <cstdint>

namespace strata::kernels {

// out (N, C) = (inp - mean) * rstd * weight (C) + bias (C), per row of inp (N, C).
// Saves mean (N) and rstd (N) = 1 / sqrt(var + eps) (biased variance) for the backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps);

// Given dout (N, C) and the saved mean/rstd: dinp (N, C) +=, dweight (C) +=, dbias (C) +=.
// Any of dinp, dweight, dbias may be null (not computed).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C);

// out (N, C) = inp * rstd * weight (C), rstd = 1 / sqrt(mean(inp^2) + eps) per row; saves rstd (N).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                     float eps);

// Given dout (N, C) and the saved rstd: dinp (N, C) +=, dweight (C) +=; either may be null.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C);

}  // namespace strata::kernels
