// Adam/AdamW entry points: the per-step constants, and the dispatch to a SIMD variant the CPU can
// run (this file is compiled for baseline x86-64 and calls an AVX variant only after cpuid).
#include "kernels/cpu/adam.h"

#include <cmath>

#include "kernels/cpu/optim_variants.h"

namespace strata::kernels {

std::string_view copy_out_name(CopyOut c) {
  switch (c) {
    case CopyOut::none: return "none";
    case CopyOut::bf16: return "bf16";
    case CopyOut::f16: return "fp16";
  }
  return "?";
}

size_t copy_out_size(CopyOut c) { return c == CopyOut::none ? 0 : 2; }

AdamConstants adam_constants(const AdamHyper& h) {
  const double beta1 = h.beta1, beta2 = h.beta2, lr = h.lr;
  const double step = static_cast<double>(h.step);
  const double bias1 = 1.0 - std::pow(beta1, step);
  const double bias2 = 1.0 - std::pow(beta2, step);
  AdamConstants c{};
  c.beta1 = h.beta1;
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  c.beta2 = h.beta2;
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  c.step_size = static_cast<float>(lr / bias1);
  c.inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
  c.eps = h.eps;
  c.decoupled = h.mode == AdamMode::adamw;
  c.lr_decay = c.decoupled ? static_cast<float>(lr * h.weight_decay) : 0.0f;
  c.l2 = c.decoupled ? 0.0f : h.weight_decay;
  c.grad_scale = h.grad_scale;
  return c;
}

SimdLevel runnable_simd_level(SimdLevel requested) {
  for (int l = static_cast<int>(requested); l > 0; --l)
    if (simd_level_supported(static_cast<SimdLevel>(l))) return static_cast<SimdLevel>(l);
  return SimdLevel::scalar;
}

SimdLevel adam_update(const AdamConstants& c, const AdamFormats& formats, const AdamSpan& span,
                      SimdLevel level) {
  const SimdLevel run = runnable_simd_level(level);
  switch (run) {
    case SimdLevel::avx512: detail::adam_update_avx512(c, formats, span); break;
    case SimdLevel::avx2: detail::adam_update_avx2(c, formats, span); break;
    case SimdLevel::scalar: detail::adam_update_scalar(c, formats, span); break;
  }
  return run;
}

bool grad_all_finite(const void* grad, FloatFormat format, size_t n, SimdLevel level) {
  switch (runnable_simd_level(level)) {
    case SimdLevel::avx512: return detail::grad_all_finite_avx512(grad, format, n);
    case SimdLevel::avx2: return detail::grad_all_finite_avx2(grad, format, n);
    case SimdLevel::scalar: break;
  }
  return detail::grad_all_finite_scalar(grad, format, n);
}

}  // namespace strata::kernels
