// Linear layer on the CPU: out = inp @ weight^T + bias, and its backward, through OpenBLAS sgemm.
// Pure compute in fp32: no allocation, no globals, no I/O. Not a general GEMM wrapper (one layout:
// row-major activations, weight stored (OC, C) as in PyTorch's nn.Linear and llm.c).
// Threads: OpenBLAS's own pool runs the GEMMs (bounded by OPENBLAS_NUM_THREADS, not by the
// caller's TBB arena); the bias loops use oneTBB. Results are deterministic for a fixed BLAS
// thread count. Dimensions must fit in int (the BLAS interface).
#pragma once

#include <cstdint>

namespace strata::kernels {

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be null. out is overwritten and
// must not alias inp or weight. out_stride: out's row stride in elements (0 means OC, else >= OC);
// columns [OC, out_stride) of each row are not touched. The values do not depend on the stride.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t N, int64_t C, int64_t OC, int64_t out_stride = 0);

// Accumulates (+=) the gradients of matmul_forward given dout (N, OC):
//   dinp (N, C) += dout @ weight;  dweight (OC, C) += dout^T @ inp;  dbias (OC) += sum_n dout[n].
// Each of dinp, dweight, dbias may be null (not computed). dinp and dweight use sgemm with beta = 1
// (BLAS may add long K sums in blocks); dbias sums rows in row order per channel, then adds once.
// dout_stride: dout's row stride in elements (0 means OC, else >= OC); its padding is never read.
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t C, int64_t OC, int64_t dout_stride = 0);

}  // namespace strata::kernels
