// Linear layer forward/backward on OpenBLAS (see ops_matmul.h). Row-major sgemm calls; the bias
// broadcast and the bias gradient are oneTBB loops.
#include "kernels/cpu/ops_matmul.h"

#include <cblas.h>

#include <cstring>

#include "kernels/cpu/ops_parallel.h"

namespace strata::kernels {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int64_t C, int64_t OC, int64_t out_stride) {
  if (N <= 0 || OC <= 0) return;
  const int64_t ldo = out_stride == 0 ? OC : out_stride;
  float beta = 0.0f;
  if (bias != nullptr) {
    parallel_ranges(N, 64, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) std::memcpy(out + n * ldo, bias, sizeof(float) * OC);
    });
    beta = 1.0f;
  }
  // out (N, OC; row stride ldo) = inp (N, C) . weight (OC, C)^T [+ out]
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(N), static_cast<int>(OC),
              static_cast<int>(C), 1.0f, inp, static_cast<int>(C), weight, static_cast<int>(C), beta, out,
              static_cast<int>(ldo));
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t C, int64_t OC, int64_t dout_stride) {
  if (N <= 0 || OC <= 0 || C <= 0) return;
  const int n = static_cast<int>(N), c = static_cast<int>(C), oc = static_cast<int>(OC);
  const int64_t ldd = dout_stride == 0 ? OC : dout_stride;
  const int ld_dout = static_cast<int>(ldd);
  if (dinp != nullptr) {
    // dinp (N, C) += dout (N, OC; row stride ldd) . weight (OC, C)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, c, oc, 1.0f, dout, ld_dout, weight, c, 1.0f, dinp, c);
  }
  if (dweight != nullptr) {
    // dweight (OC, C) += dout (N, OC; row stride ldd)^T . inp (N, C)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, c, n, 1.0f, dout, ld_dout, inp, c, 1.0f, dweight, c);
  }
  if (dbias != nullptr) {
    add_column_sums(dbias, N, OC, [&](int64_t n, int64_t o) { return dout[n * ldd + o]; });
  }
}

}  // namespace strata::kernels
