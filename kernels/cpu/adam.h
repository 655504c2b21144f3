// CPU Adam / AdamW: one fused pass over a range of fp32 master weights and fp32 moments m and v,
// reading gradients in fp32, bf16 or fp16 and writing, in the same pass, the updated weights as a
// bf16 or fp16 working copy (or none). Bias correction, decoupled weight decay (AdamW) or L2 decay
// (Adam), and a gradient multiplier (1/loss-scale x clip coefficient) are fused in.
// Not a multi-threaded driver: each call is single-threaded pure compute over one range
// (offload/cpu_adam.h splits many tensors into blocks and runs them in parallel).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/cpu/half.h"
#include "kernels/cpu/simd_level.h"

namespace strata::kernels {

enum class AdamMode : uint8_t {
  adam,   // L2: g += weight_decay * p before the moments (torch.optim.Adam)
  adamw,  // decoupled: p *= 1 - lr * weight_decay before the update (torch.optim.AdamW)
};

// What the step writes besides the fp32 master weights.
enum class CopyOut : uint8_t { none, bf16, f16 };

std::string_view copy_out_name(CopyOut c);
size_t copy_out_size(CopyOut c);  // bytes per element: 0 or 2

// Hyper-parameters of one optimizer step (the same for every tensor of the step).
struct AdamHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;          // 1-based step number, for bias correction
  float grad_scale = 1.0f;   // raw gradient multiplier: (1 / loss scale) * clip coefficient
  AdamMode mode = AdamMode::adamw;
};

// The per-step constants every element uses, computed once in double and rounded to fp32, so
// every SIMD variant and every block sees the same numbers. Per element (torch's formulation):
//   g = grad * grad_scale          (adam: g += l2 * p;  adamw: p = p - lr_decay * p)
//   m = beta1 * m + one_minus_beta1 * g
//   v = beta2 * v + one_minus_beta2 * (g * g)
//   p = p - step_size * (m / (sqrt(v) * inv_sqrt_bias2 + eps))
// with step_size = lr / (1 - beta1^step), inv_sqrt_bias2 = 1 / sqrt(1 - beta2^step).
struct AdamConstants {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float step_size, inv_sqrt_bias2, eps;
  // adamw: lr * weight_decay; adam: 0 (unused). p - (lr*wd)*p rather than p*(1 - lr*wd): the
  // rounding of a factor near 1 would repeat every step (3e-6 relative drift in 100 steps).
  float lr_decay;
  float l2;     // adam: weight_decay; adamw: 0 (unused)
  float grad_scale;
  bool decoupled;
};

// Precondition (validated, with a Status, by offload/cpu_adam.h): step >= 1, 0 <= beta1, beta2 < 1,
// eps > 0, lr and weight_decay finite and >= 0.
AdamConstants adam_constants(const AdamHyper& hyper);

struct AdamFormats {
  FloatFormat grad = FloatFormat::f32;
  CopyOut copy = CopyOut::bf16;
};

// One range of one tensor, n elements; all pointers point at element 0 of the range.
// param, m, v: fp32, read and written in place. grad: `formats.grad` elements, read only.
// copy_out: `formats.copy` elements, written (ignored when copy == none). Buffers must not overlap
// each other (copy_out may be anywhere else, e.g. pinned memory bound for the GPU).
struct AdamSpan {
  float* param = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  const void* grad = nullptr;
  void* copy_out = nullptr;
  size_t n = 0;
};

// The level the kernels will actually run for a request: `requested` if this CPU supports it,
// otherwise the best level below it that it does. Never returns a level the CPU cannot execute.
SimdLevel runnable_simd_level(SimdLevel requested);

// One fused Adam/AdamW pass over `span`. Runs runnable_simd_level(level); returns that level.
// Every level produces the same bits (see simd_ops.h); the scalar level is the reference.
// Thread-safety: pure function of its inputs; concurrent calls on disjoint spans are fine.
SimdLevel adam_update(const AdamConstants& c, const AdamFormats& formats, const AdamSpan& span,
                      SimdLevel level);

// True if all n gradient elements are finite. Run over every gradient of a step *before* any
// update (a separate pass, not fused into the update): skipping a step on Inf/NaN must be decided
// for the whole model before the first tensor changes, and with offload the check runs as the
// gradients arrive during backward, long before the optimizer sees them.
bool grad_all_finite(const void* grad, FloatFormat format, size_t n, SimdLevel level);

}  // namespace strata::kernels
