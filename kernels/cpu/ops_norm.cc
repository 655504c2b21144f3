// LayerNorm and RMSNorm forward/backward (see ops_norm.h). Row statistics in double, elementwise
// math in fp32. The backward runs twice over the data: once by rows (dinp, which needs per-row
// sums) and once by column blocks (dweight/dbias, summed over rows in row order).
#include "kernels/cpu/ops_norm.h"

#include <cmath>

#include "kernels/cpu/ops_parallel.h"

namespace strata::kernels {
namespace {

constexpr int64_t kRowGrain = 16;

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps) {
  parallel_ranges(N, kRowGrain, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* x = inp + n * C;
      double sum = 0.0;
      for (int64_t i = 0; i < C; ++i) sum += x[i];
      const double m = sum / static_cast<double>(C);
      double sq = 0.0;
      for (int64_t i = 0; i < C; ++i) {
        const double d = x[i] - m;
        sq += d * d;
      }
      const float mf = static_cast<float>(m);
      const float s = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(C) + eps));
      float* y = out + n * C;
      for (int64_t i = 0; i < C; ++i) y[i] = (x[i] - mf) * s * weight[i] + bias[i];
      mean[n] = mf;
      rstd[n] = s;
    }
  });
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  if (dinp != nullptr) {
    parallel_ranges(N, kRowGrain, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        const float* x = inp + n * C;
        const float* dy = dout + n * C;
        const float m = mean[n], s = rstd[n];
        double sum_dnorm = 0.0, sum_dnorm_norm = 0.0;
        for (int64_t i = 0; i < C; ++i) {
          const float norm = (x[i] - m) * s;
          const float dnorm = weight[i] * dy[i];
          sum_dnorm += dnorm;
          sum_dnorm_norm += static_cast<double>(dnorm) * norm;
        }
        const float dnorm_mean = static_cast<float>(sum_dnorm / static_cast<double>(C));
        const float dnorm_norm_mean = static_cast<float>(sum_dnorm_norm / static_cast<double>(C));
        float* dx = dinp + n * C;
        for (int64_t i = 0; i < C; ++i) {
          const float norm = (x[i] - m) * s;
          const float dnorm = weight[i] * dy[i];
          dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
      }
    });
  }
  if (dweight != nullptr) {
    add_column_sums(dweight, N, C, [&](int64_t n, int64_t i) {
      return (inp[n * C + i] - mean[n]) * rstd[n] * dout[n * C + i];
    });
  }
  if (dbias != nullptr) {
    add_column_sums(dbias, N, C, [&](int64_t n, int64_t i) { return dout[n * C + i]; });
  }
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                     float eps) {
  parallel_ranges(N, kRowGrain, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* x = inp + n * C;
      double sq = 0.0;
      for (int64_t i = 0; i < C; ++i) sq += static_cast<double>(x[i]) * x[i];
      const float s = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(C) + eps));
      float* y = out + n * C;
      for (int64_t i = 0; i < C; ++i) y[i] = x[i] * s * weight[i];
      rstd[n] = s;
    }
  });
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C) {
  if (dinp != nullptr) {
    parallel_ranges(N, kRowGrain, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        const float* x = inp + n * C;
        const float* dy = dout + n * C;
        const float s = rstd[n];
        double sum_dnorm_norm = 0.0;
        for (int64_t i = 0; i < C; ++i) sum_dnorm_norm += static_cast<double>(weight[i] * dy[i]) * (x[i] * s);
        const float dnorm_norm_mean = static_cast<float>(sum_dnorm_norm / static_cast<double>(C));
        float* dx = dinp + n * C;
        for (int64_t i = 0; i < C; ++i) dx[i] += (weight[i] * dy[i] - x[i] * s * dnorm_norm_mean) * s;
      }
    });
  }
  if (dweight != nullptr) {
    add_column_sums(dweight, N, C,
                    [&](int64_t n, int64_t i) { return inp[n * C + i] * rstd[n] * dout[n * C + i]; });
  }
}

}  // namespace strata::kernels
