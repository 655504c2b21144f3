// CpuComputeOps: each op a closure on the compute CpuStream calling kernels/cpu in fp32 (contract
// in cpu_compute_ops.h). Arguments arrive validated by ComputeOps; nothing here checks ranges.
// Not where the math lives, except the small format loops (cast, grad norm) written here.
#include "runtime/cpu_compute_ops.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/half.h"
#include "kernels/cpu/ops_attention.h"
#include "kernels/cpu/ops_elementwise.h"
#include "kernels/cpu/ops_embedding.h"
#include "kernels/cpu/ops_matmul.h"
#include "kernels/cpu/ops_norm.h"
#include "kernels/cpu/ops_rope.h"

namespace strata {
namespace {

float* f32(void* p) { return static_cast<float*>(p); }
const float* f32(const void* p) { return static_cast<const float*>(p); }

// Element i of n elements of `format` at p, as fp32.
float load_as_float(const void* p, kernels::FloatFormat format, int64_t i) {
  switch (format) {
    case kernels::FloatFormat::f32: return static_cast<const float*>(p)[i];
    case kernels::FloatFormat::bf16: return kernels::bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case kernels::FloatFormat::f16: return kernels::fp16_to_float(static_cast<const uint16_t*>(p)[i]);
  }
  return 0.0f;
}

void store_from_float(void* p, kernels::FloatFormat format, int64_t i, float x) {
  switch (format) {
    case kernels::FloatFormat::f32: static_cast<float*>(p)[i] = x; return;
    case kernels::FloatFormat::bf16: static_cast<uint16_t*>(p)[i] = kernels::float_to_bf16(x); return;
    case kernels::FloatFormat::f16: static_cast<uint16_t*>(p)[i] = kernels::float_to_fp16(x); return;
  }
}

// ComputeOps validated the format already; this only converts.
kernels::FloatFormat format_of(DType dt) { return float_format_of(dt, "").value(); }

// OpenBLAS takes int dimensions.
Status check_blas_dims(std::string_view op, int64_t N, int64_t C, int64_t OC) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (N <= kIntMax && C <= kIntMax && OC <= kIntMax) return Status::ok();
  return error(Code::invalid_argument,
               "{}: N = {}, C = {}, OC = {} exceed the BLAS int range of the CPU backend; split the GEMM into tiles",
               op, N, C, OC);
}

}  // namespace

Status CpuComputeOps::check_activation_dtype(DType dt, std::string_view op) const {
  if (dt == DType::f32) return Status::ok();
  return error(Code::invalid_argument,
               "{}: activations in {}: the CPU backend computes in fp32; use --dtype fp32 or the CUDA backend", op,
               dtype_name(dt));
}

Status CpuComputeOps::queue_matmul_forward(DType, void* out, const void* inp, const void* weight, const void* bias,
                                           int64_t N, int64_t C, int64_t OC) {
  STRATA_RETURN_IF_ERROR(check_blas_dims("matmul_forward", N, C, OC));
  return stream_.enqueue([=] { kernels::matmul_forward(f32(out), f32(inp), f32(weight), f32(bias), N, C, OC); });
}

Status CpuComputeOps::queue_matmul_backward(DType, void* dinp, void* dweight, void* dbias, const void* dout,
                                            const void* inp, const void* weight, int64_t N, int64_t C, int64_t OC) {
  STRATA_RETURN_IF_ERROR(check_blas_dims("matmul_backward", N, C, OC));
  return stream_.enqueue([=] {
    kernels::matmul_backward(f32(dinp), f32(dweight), f32(dbias), f32(dout), f32(inp), f32(weight), N, C, OC);
  });
}

Status CpuComputeOps::queue_layernorm_forward(DType, void* out, float* mean, float* rstd, const void* inp,
                                              const void* weight, const void* bias, int64_t N, int64_t C, float eps) {
  return stream_.enqueue(
      [=] { kernels::layernorm_forward(f32(out), mean, rstd, f32(inp), f32(weight), f32(bias), N, C, eps); });
}

Status CpuComputeOps::queue_layernorm_backward(DType, void* dinp, void* dweight, void* dbias, const void* dout,
                                               const void* inp, const void* weight, const float* mean,
                                               const float* rstd, int64_t N, int64_t C) {
  return stream_.enqueue([=] {
    kernels::layernorm_backward(f32(dinp), f32(dweight), f32(dbias), f32(dout), f32(inp), f32(weight), mean, rstd, N,
                                C);
  });
}

Status CpuComputeOps::queue_rmsnorm_forward(DType, void* out, float* rstd, const void* inp, const void* weight,
                                            int64_t N, int64_t C, float eps) {
  return stream_.enqueue([=] { kernels::rmsnorm_forward(f32(out), rstd, f32(inp), f32(weight), N, C, eps); });
}

Status CpuComputeOps::queue_rmsnorm_backward(DType, void* dinp, void* dweight, const void* dout, const void* inp,
                                             const void* weight, const float* rstd, int64_t N, int64_t C) {
  return stream_.enqueue(
      [=] { kernels::rmsnorm_backward(f32(dinp), f32(dweight), f32(dout), f32(inp), f32(weight), rstd, N, C); });
}

Status CpuComputeOps::queue_gelu_forward(DType, void* out, const void* inp, int64_t n) {
  return stream_.enqueue([=] { kernels::gelu_forward(f32(out), f32(inp), n); });
}

Status CpuComputeOps::queue_gelu_backward(DType, void* dinp, const void* inp, const void* dout, int64_t n) {
  return stream_.enqueue([=] { kernels::gelu_backward(f32(dinp), f32(inp), f32(dout), n); });
}

Status CpuComputeOps::queue_swiglu_forward(DType, void* out, const void* inp, int64_t N, int64_t H) {
  return stream_.enqueue([=] { kernels::swiglu_forward(f32(out), f32(inp), N, H); });
}

Status CpuComputeOps::queue_swiglu_backward(DType, void* dinp, const void* inp, const void* dout, int64_t N,
                                            int64_t H) {
  return stream_.enqueue([=] { kernels::swiglu_backward(f32(dinp), f32(inp), f32(dout), N, H); });
}

Status CpuComputeOps::queue_residual_forward(DType, void* out, const void* a, const void* b, int64_t n) {
  return stream_.enqueue([=] { kernels::residual_forward(f32(out), f32(a), f32(b), n); });
}

Status CpuComputeOps::queue_residual_backward(DType, void* da, void* db, const void* dout, int64_t n) {
  return stream_.enqueue([=] { kernels::residual_backward(f32(da), f32(db), f32(dout), n); });
}

Status CpuComputeOps::queue_encoder_forward(DType, void* out, const int32_t* tokens, const void* wte,
                                            const void* wpe, int64_t B, int64_t T, int64_t C) {
  return stream_.enqueue([=] { kernels::encoder_forward(f32(out), tokens, f32(wte), f32(wpe), B, T, C); });
}

Status CpuComputeOps::queue_encoder_backward(DType, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                                             int64_t B, int64_t T, int64_t C) {
  return stream_.enqueue([=] { kernels::encoder_backward(f32(dwte), f32(dwpe), f32(dout), tokens, B, T, C); });
}

Status CpuComputeOps::queue_token_embedding_forward(DType, void* out, const int32_t* tokens, const void* wte,
                                                    int64_t N, int64_t C) {
  return stream_.enqueue([=] { kernels::token_embedding_forward(f32(out), tokens, f32(wte), N, C); });
}

Status CpuComputeOps::queue_token_embedding_backward(DType, void* dwte, const void* dout, const int32_t* tokens,
                                                     int64_t N, int64_t C) {
  return stream_.enqueue([=] { kernels::token_embedding_backward(f32(dwte), f32(dout), tokens, N, C); });
}

Status CpuComputeOps::queue_rope_forward(DType, void* out, const void* inp, int64_t B, int64_t T, int64_t NH,
                                         int64_t HS, float theta, int64_t pos_offset) {
  return stream_.enqueue([=] { kernels::rope_forward(f32(out), f32(inp), B, T, NH, HS, theta, pos_offset); });
}

Status CpuComputeOps::queue_rope_backward(DType, void* dinp, const void* dout, int64_t B, int64_t T, int64_t NH,
                                          int64_t HS, float theta, int64_t pos_offset) {
  return stream_.enqueue([=] { kernels::rope_backward(f32(dinp), f32(dout), B, T, NH, HS, theta, pos_offset); });
}

Status CpuComputeOps::queue_attention_forward(DType, void* out, float* lse, const void* q, const void* k,
                                              const void* v, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                              int64_t HS) {
  return stream_.enqueue(
      [=] { kernels::attention_forward(f32(out), lse, f32(q), f32(k), f32(v), B, T, NH, NKV, HS); });
}

Status CpuComputeOps::queue_attention_backward(DType, void* dq, void* dk, void* dv, const void* dout, const void* q,
                                               const void* k, const void* v, const void* out, const float* lse,
                                               int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  return stream_.enqueue([=] {
    kernels::attention_backward(f32(dq), f32(dk), f32(dv), f32(dout), f32(q), f32(k), f32(v), f32(out), lse, B, T,
                                NH, NKV, HS);
  });
}

Status CpuComputeOps::queue_crossentropy_forward(DType, float* lse, float* losses,
                                                 kernels::CrossEntropyResult* result, const void* logits,
                                                 const int32_t* targets, int64_t N, int64_t V) {
  return stream_.enqueue([=] {
    const kernels::CrossEntropyResult r = kernels::crossentropy_forward(lse, losses, f32(logits), targets, N, V);
    if (result != nullptr) *result = r;
  });
}

Status CpuComputeOps::queue_crossentropy_backward(DType, void* dlogits, const void* logits, const float* lse,
                                                  const int32_t* targets, float dloss, int64_t N, int64_t V) {
  return stream_.enqueue(
      [=] { kernels::crossentropy_backward(f32(dlogits), f32(logits), lse, targets, dloss, N, V); });
}

Status CpuComputeOps::queue_crossentropy_backward_inplace(DType, void* logits_to_dlogits, const float* lse,
                                                          const int32_t* targets, float dloss, int64_t N, int64_t V) {
  return stream_.enqueue(
      [=] { kernels::crossentropy_backward_inplace(f32(logits_to_dlogits), lse, targets, dloss, N, V); });
}

Status CpuComputeOps::queue_cast(void* dst, DType to, const void* src, DType from, int64_t n) {
  const kernels::FloatFormat dst_format = format_of(to), src_format = format_of(from);
  return stream_.enqueue([=] {
    if (dst_format == src_format) {
      std::memcpy(dst, src, static_cast<size_t>(n) * kernels::float_format_size(src_format));
      return;
    }
    for (int64_t i = 0; i < n; ++i) store_from_float(dst, dst_format, i, load_as_float(src, src_format, i));
  });
}

Status CpuComputeOps::queue_grad_norm_squared(float* sum_squares, const void* grad, DType format, int64_t n) {
  const kernels::FloatFormat grad_format = format_of(format);
  return stream_.enqueue([=] {
    // Squares summed in double in element order, then one += in fp32: more accurate than the
    // CUDA kernel's fp32 tree, and independent of any thread count.
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double g = load_as_float(grad, grad_format, i);
      sum += g * g;
    }
    *sum_squares += static_cast<float>(sum);
  });
}

Status CpuComputeOps::queue_grad_check_finite(int32_t* all_finite, const void* grad, DType format, int64_t n) {
  const kernels::FloatFormat grad_format = format_of(format);
  return stream_.enqueue([=] {
    if (!kernels::grad_all_finite(grad, grad_format, static_cast<size_t>(n), kernels::best_simd_level())) {
      *all_finite = 0;
    }
  });
}

Status CpuComputeOps::queue_adam_update(const kernels::AdamConstants& constants, const kernels::AdamFormats& formats,
                                        const kernels::AdamSpan& span) {
  return stream_.enqueue([=] { (void)kernels::adam_update(constants, formats, span, kernels::best_simd_level()); });
}

}  // namespace strata
