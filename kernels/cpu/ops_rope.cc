// RoPE forward/backward (see ops_rope.h). Split over positions: each task builds the cos/sin of
// its positions once (in double) and rotates every batch row and head at those positions.
#include "kernels/cpu/ops_rope.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/ops_parallel.h"

namespace strata::kernels {
namespace {

constexpr int64_t kPositionGrain = 4;

// dst = R(angle) src per pair (forward), or dst = R(angle)^T src (inverse, for the backward); dst
// may equal src (each pair is read before it is written). Forward of pair (x1, x2) = (x[i],
// x[i + HS/2]): (x1 cos - x2 sin, x2 cos + x1 sin).
void rotate(float* dst, const float* src, int64_t B, int64_t T, int64_t NH, int64_t HS, float theta,
            int64_t pos_offset, int64_t stride, bool inverse) {
  const int64_t half = HS / 2, ld = stride != 0 ? stride : NH * HS;
  parallel_ranges(T, kPositionGrain, [&](int64_t t0, int64_t t1) {
    std::vector<float> cos_table(half), sin_table(half);
    for (int64_t t = t0; t < t1; ++t) {
      const double pos = static_cast<double>(pos_offset + t);
      for (int64_t i = 0; i < half; ++i) {
        const double freq = std::pow(static_cast<double>(theta), -2.0 * i / static_cast<double>(HS));
        cos_table[i] = static_cast<float>(std::cos(pos * freq));
        sin_table[i] = static_cast<float>(std::sin(pos * freq));
      }
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < NH; ++h) {
          const int64_t offset = (b * T + t) * ld + h * HS;
          const float* x = src + offset;
          float* y = dst + offset;
          for (int64_t i = 0; i < half; ++i) {
            const float x1 = x[i], x2 = x[i + half], c = cos_table[i], s = sin_table[i];
            if (inverse) {
              y[i] = x1 * c + x2 * s;
              y[i + half] = x2 * c - x1 * s;
            } else {
              y[i] = x1 * c - x2 * s;
              y[i + half] = x2 * c + x1 * s;
            }
          }
        }
      }
    }
  });
}

}  // namespace

void rope_forward(float* out, const float* inp, int64_t B, int64_t T, int64_t NH, int64_t HS, float theta,
                  int64_t pos_offset, int64_t stride) {
  rotate(out, inp, B, T, NH, HS, theta, pos_offset, stride, /*inverse=*/false);
}

void rope_backward(float* dinp, const float* dout, int64_t B, int64_t T, int64_t NH, int64_t HS, float theta,
                   int64_t pos_offset, int64_t stride) {
  rotate(dinp, dout, B, T, NH, HS, theta, pos_offset, stride, /*inverse=*/true);
}

}  // namespace strata::kernels
