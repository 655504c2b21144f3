// Fused softmax + cross-entropy over the vocabulary on the CPU, fp32 logits with double row sums.
// The forward saves only the log-sum-exp per row (N); the backward rebuilds each probability from
// the logit and lse as it writes dlogits, so the probabilities (N, V) are never stored.
// Targets are int32 in [0, V), or -1 for "ignored" (no loss, no gradient, not counted). Pure
// compute: no allocation, no globals, no I/O; rows run over the caller's oneTBB arena.
#pragma once

#include <cstdint>

namespace strata::kernels {

inline constexpr int32_t kIgnoreTarget = -1;

struct CrossEntropyResult {
  double loss_sum = 0.0;    // sum of -log p(target) over counted rows, summed in row order
  int64_t valid_count = 0;  // rows whose target is not kIgnoreTarget
  float mean_loss = 0.0f;   // loss_sum / valid_count; 0 when valid_count == 0
};

// logits_stride (every function below): the row stride of logits and dlogits in elements, 0 meaning
// V, else >= V; the columns past V of each row are never read or written.

// logits (N, V) with V >= 1, targets (N). Writes lse (N) (every row, ignored ones too) and, if losses is not
// null, losses (N) = -log softmax(logits[n])[targets[n]] (0 for ignored rows).
CrossEntropyResult crossentropy_forward(float* lse, float* losses, const float* logits, const int32_t* targets,
                                        int64_t N, int64_t V, int64_t logits_stride = 0);

// dlogits (N, V) += dloss * (softmax(logits[n]) - onehot(targets[n])) for every counted row;
// ignored rows are left as they are. dloss is the gradient of the loss being trained on each row's
// loss, typically 1 / valid_count for the mean. dlogits must not alias logits.
void crossentropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                           float dloss, int64_t N, int64_t V, int64_t logits_stride = 0);

// The same gradient written over the logits in place (logits_to_dlogits (N, V) becomes dlogits;
// ignored rows become 0), for a vocabulary head whose logits are not needed after the loss: saves
// the second (N, V) buffer.
void crossentropy_backward_inplace(float* logits_to_dlogits, const float* lse, const int32_t* targets,
                                   float dloss, int64_t N, int64_t V, int64_t logits_stride = 0);

}  // namespace strata::kernels
