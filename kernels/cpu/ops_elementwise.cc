// GELU, SwiGLU and residual add forward/backward (see ops_elementwise.h): plain fp32 loops split
// over the caller's oneTBB arena.
#include "kernels/cpu/ops_elementwise.h"

#include <cmath>

#include "kernels/cpu/ops_parallel.h"

namespace strata::kernels {
namespace {

constexpr int64_t kElementGrain = 8192;
constexpr int64_t kRowGrain = 16;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float x = inp[i];
      out[i] = 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + kGeluCubic * x * x * x)));
    }
  });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float x = inp[i];
      const float t = std::tanh(kGeluScale * (x + kGeluCubic * x * x * x));
      const float sech2 = 1.0f - t * t;
      const float local_grad =
          0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
      dinp[i] += local_grad * dout[i];
    }
  });
}

void swiglu_forward(float* out, const float* inp, int64_t N, int64_t H) {
  parallel_ranges(N, kRowGrain, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* gate = inp + n * 2 * H;
      const float* up = gate + H;
      float* y = out + n * H;
      for (int64_t i = 0; i < H; ++i) {
        const float g = gate[i];
        y[i] = g / (1.0f + std::exp(-g)) * up[i];
      }
    }
  });
}

void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t H) {
  parallel_ranges(N, kRowGrain, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* gate = inp + n * 2 * H;
      const float* up = gate + H;
      float* dgate = dinp + n * 2 * H;
      float* dup = dgate + H;
      const float* dy = dout + n * H;
      for (int64_t i = 0; i < H; ++i) {
        const float g = gate[i];
        const float sig = 1.0f / (1.0f + std::exp(-g));
        // d silu(g) / dg = sig (1 + g (1 - sig))
        dgate[i] += dy[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
        dup[i] += dy[i] * g * sig;
      }
    }
  });
}

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
  });
}

void residual_backward(float* da, float* db, const float* dout, int64_t n) {
  parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
    if (da != nullptr) {
      for (int64_t i = i0; i < i1; ++i) da[i] += dout[i];
    }
    if (db != nullptr) {
      for (int64_t i = i0; i < i1; ++i) db[i] += dout[i];
    }
  });
}

}  // namespace strata::kernels
