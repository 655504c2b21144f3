// Fused softmax + cross-entropy forward/backward (see ops_loss.h). The forward computes each
// row's log-sum-exp (max-shifted, summed in double) in parallel, then the losses in row order.
#include "kernels/cpu/ops_loss.h"

#include <cmath>

#include "kernels/cpu/ops_parallel.h"

namespace strata::kernels {
namespace {

constexpr int64_t kRowGrain = 1;  // a row is V (tens of thousands) of exps: enough work alone

// dst (V) = (or +=) dloss * (exp(logits - lse) - onehot(target)). dst may equal logits when
// `accumulate` is false (each element is read before it is written).
void write_row_gradient(float* dst, const float* logits, float lse, int32_t target, float dloss, int64_t V,
                        bool accumulate) {
  for (int64_t v = 0; v < V; ++v) {
    const float p = std::exp(logits[v] - lse);
    const float g = dloss * (p - (v == target ? 1.0f : 0.0f));
    dst[v] = accumulate ? dst[v] + g : g;
  }
}

}  // namespace

CrossEntropyResult crossentropy_forward(float* lse, float* losses, const float* logits, const int32_t* targets,
                                        int64_t N, int64_t V, int64_t logits_stride) {
  const int64_t ld = logits_stride == 0 ? V : logits_stride;
  parallel_ranges(N, kRowGrain, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* row = logits + n * ld;
      float max_logit = row[0];
      for (int64_t v = 1; v < V; ++v) max_logit = row[v] > max_logit ? row[v] : max_logit;
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - max_logit);
      lse[n] = max_logit + static_cast<float>(std::log(sum));
    }
  });
  CrossEntropyResult result;
  for (int64_t n = 0; n < N; ++n) {
    float loss = 0.0f;
    if (targets[n] != kIgnoreTarget) {
      loss = lse[n] - logits[n * ld + targets[n]];
      result.loss_sum += loss;
      ++result.valid_count;
    }
    if (losses != nullptr) losses[n] = loss;
  }
  if (result.valid_count > 0) {
    result.mean_loss = static_cast<float>(result.loss_sum / static_cast<double>(result.valid_count));
  }
  return result;
}

void crossentropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                           float dloss, int64_t N, int64_t V, int64_t logits_stride) {
  const int64_t ld = logits_stride == 0 ? V : logits_stride;
  parallel_ranges(N, kRowGrain, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      if (targets[n] == kIgnoreTarget) continue;
      write_row_gradient(dlogits + n * ld, logits + n * ld, lse[n], targets[n], dloss, V, /*accumulate=*/true);
    }
  });
}

void crossentropy_backward_inplace(float* logits_to_dlogits, const float* lse, const int32_t* targets,
                                   float dloss, int64_t N, int64_t V, int64_t logits_stride) {
  const int64_t ld = logits_stride == 0 ? V : logits_stride;
  parallel_ranges(N, kRowGrain, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      float* row = logits_to_dlogits + n * ld;
      if (targets[n] == kIgnoreTarget) {
        for (int64_t v = 0; v < V; ++v) row[v] = 0.0f;
        continue;
      }
      write_row_gradient(row, row, lse[n], targets[n], dloss, V, /*accumulate=*/false);
    }
  });
}

}  // namespace strata::kernels
