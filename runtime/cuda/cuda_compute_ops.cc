// CudaComputeOps: each op one kernels/cuda launcher on the compute stream, dispatched on the
// activation dtype (contract in cuda_compute_ops.h). Arguments arrive validated by ComputeOps;
// here only the CUDA-only limits (attention head size) are checked. Not where kernels live.
#include "runtime/cuda/cuda_compute_ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <spdlog/spdlog.h>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/grad_accumulate.cuh"
#include "kernels/cuda/loss.cuh"
#include "kernels/cuda/norm.cuh"
#include "kernels/cuda/optimizer.cuh"
#include "runtime/cuda/cuda_check.h"
#include "runtime/units.h"

namespace strata {
namespace {

namespace kc = kernels::cuda;

template <typename T>
struct TypeTag {
  using type = T;
};

// The one place an activation DType becomes a device element type: returns fn(TypeTag<T>{}) with
// T = float, __nv_bfloat16 or __half (kernels/cuda instantiate every op for exactly these). `dt`
// has passed check_activation_dtype, so no other value reaches here.
template <typename Fn>
auto with_element_type(DType dt, Fn&& fn) {
  switch (dt) {
    case DType::bf16: return fn(TypeTag<__nv_bfloat16>{});
    case DType::f16: return fn(TypeTag<__half>{});
    case DType::f32:
    default: return fn(TypeTag<float>{});
  }
}

template <typename T>
T* as(void* p) {
  return static_cast<T*>(p);
}
template <typename T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}

Status gemm_status(kc::GemmStatus st, const char* op) {
  if (st.cublas != CUBLAS_STATUS_SUCCESS) return cublas_status(st.cublas, op, __FILE__, __LINE__);
  return cuda_status(st.cuda, op, __FILE__, __LINE__);
}

kernels::FloatFormat format_of(DType dt) { return float_format_of(dt, "").value(); }

Status check_head_size(std::string_view op, int64_t HS) {
  if (HS <= kc::kAttentionMaxHeadSize) return Status::ok();
  return error(Code::invalid_argument, "{}: head size HS = {} exceeds the CUDA attention kernel's limit of {}", op,
               HS, kc::kAttentionMaxHeadSize);
}

}  // namespace

StatusOr<std::unique_ptr<CudaComputeOps>> CudaComputeOps::create(int device, cudaStream_t compute,
                                                                  cublasHandle_t cublas, bool tf32,
                                                                  const Arena& arena, const void* base) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  std::unique_ptr<CudaComputeOps> ops(new CudaComputeOps(device, compute, cublas, tf32, arena, base));
  STRATA_CUDA_RETURN_IF_ERROR(cudaMalloc(&ops->norm_scratch_, kc::kGradNormScratchFloats * sizeof(float)));
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&ops->lt_));
  ops->lt_plans_ = std::make_unique<kc::LtPlanCache>();
  constexpr size_t kWorkspace = kc::kGemmLtWorkspaceBytes + kc::kGemmProductFloats * sizeof(float);
  void* workspace = nullptr;
  Status malloc_status = STRATA_CUDA_STATUS(cudaMalloc(&workspace, kWorkspace));
  if (!malloc_status.is_ok()) {
    return malloc_status.with_context(
        fmt::format("reserving the {} GEMM / embedding workspace on device {} (outside the --gpu-mem arena); lower "
                    "--gpu-mem",
                    format_size(kWorkspace), device));
  }
  ops->workspace_ = static_cast<std::byte*>(workspace);
  return ops;
}

CudaComputeOps::~CudaComputeOps() {
  lt_plans_.reset();  // its descriptors before the handle (host memory only)
  Status s = STRATA_CUDA_STATUS(cudaSetDevice(device_));
  if (s.is_ok()) {  // each release is tried; the first failure is reported
    const auto keep_first = [&s](Status t) {
      if (s.is_ok()) s = std::move(t);
    };
    if (lt_ != nullptr) keep_first(STRATA_CUBLAS_STATUS(cublasLtDestroy(lt_)));
    if (workspace_ != nullptr) keep_first(STRATA_CUDA_STATUS(cudaFree(workspace_)));
    if (norm_scratch_ != nullptr) keep_first(STRATA_CUDA_STATUS(cudaFree(norm_scratch_)));
  }
  if (!s.is_ok()) spdlog::warn("CUDA compute ops teardown: {}", s.message());
}

kc::GemmContext CudaComputeOps::gemm_context() const {
  kc::GemmContext ctx;
  ctx.cublas = cublas_;
  ctx.lt = lt_;
  ctx.lt_workspace = workspace_;
  ctx.lt_workspace_bytes = kc::kGemmLtWorkspaceBytes;
  ctx.product = reinterpret_cast<float*>(workspace_ + kc::kGemmLtWorkspaceBytes);
  ctx.product_floats = kc::kGemmProductFloats;
  ctx.plans = lt_plans_.get();
  return ctx;
}

Status CudaComputeOps::check_activation_dtype(DType dt, std::string_view op) const {
  if (dt == DType::f32 || dt == DType::bf16 || dt == DType::f16) return Status::ok();
  return error(Code::invalid_argument, "{}: activations in {}: the CUDA backend computes in fp32, bf16 or fp16; use "
               "--dtype bf16, fp16 or fp32", op, dtype_name(dt));
}

template <typename Launch>
Status CudaComputeOps::launch(DType dt, const char* op, Launch&& fn) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return cuda_status(with_element_type(dt, fn), op, __FILE__, __LINE__);
}

// Every op: launch() (or, for GEMMs, with_element_type) binds the device, picks T (the tag's type)
// from dt and converts the error.

Status CudaComputeOps::queue_matmul_forward(DType dt, void* out, const void* inp, const void* weight,
                                            const void* bias, int64_t N, int64_t C, int64_t OC, int64_t out_stride) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const auto gemm = [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::matmul_forward(gemm_context(), as<T>(out), as<T>(inp), as<T>(weight), as<T>(bias), N, C, OC,
                              kc::GemmOptions{tf32_}, stream_, out_stride);
  };
  return gemm_status(with_element_type(dt, gemm), "matmul_forward");
}

Status CudaComputeOps::queue_matmul_backward(DType dt, void* dinp, void* dweight, void* dbias, const void* dout,
                                             const void* inp, const void* weight, int64_t N, int64_t C, int64_t OC,
                                             int64_t dout_stride, GradStore dinp_store, GradStore dweight_store) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const kc::GradStores stores{dinp_store == GradStore::overwrite, dweight_store == GradStore::overwrite};
  const auto gemm = [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::matmul_backward(gemm_context(), as<T>(dinp), as<T>(dweight), as<T>(dbias), as<T>(dout),
                               as<T>(inp), as<T>(weight), N, C, OC, kc::GemmOptions{tf32_}, stream_, dout_stride,
                               stores);
  };
  return gemm_status(with_element_type(dt, gemm), "matmul_backward");
}

Status CudaComputeOps::queue_matmul_backward_input_sum(DType dt, void* dinp, std::span<const InputGradTerm> terms,
                                                       int64_t N, int64_t C, GradStore dinp_store) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const auto gemm = [&](auto tag) {
    using T = typename decltype(tag)::type;
    kc::DinpTerm<T> typed[ComputeOps::kMaxInputGradTerms];
    for (size_t i = 0; i < terms.size(); ++i) {
      typed[i] = {as<T>(terms[i].dout), as<T>(terms[i].weight), terms[i].OC, terms[i].dout_stride};
    }
    return kc::matmul_backward_input_sum(gemm_context(), as<T>(dinp), std::span<const kc::DinpTerm<T>>(typed, terms.size()),
                                         N, C, kc::GemmOptions{tf32_}, stream_, dinp_store == GradStore::overwrite);
  };
  return gemm_status(with_element_type(dt, gemm), "matmul_backward_input_sum");
}

// The 16-bit GELU epilogues of cuBLASLt where they apply (kernels/cuda/gemm.cuh), else the two ops.
Status CudaComputeOps::queue_matmul_forward_gelu(DType dt, void* act, void* pre, const void* inp, const void* weight,
                                                 const void* bias, int64_t N, int64_t C, int64_t OC) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  bool fused = false;
  const auto gemm = [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::matmul_forward_gelu(gemm_context(), as<T>(act), as<T>(pre), as<T>(inp), as<T>(weight), as<T>(bias), N,
                                   C, OC, kc::GemmOptions{tf32_}, stream_, &fused);
  };
  STRATA_RETURN_IF_ERROR(gemm_status(with_element_type(dt, gemm), "matmul_forward_gelu"));
  if (fused) return Status::ok();
  return ComputeOps::queue_matmul_forward_gelu(dt, act, pre, inp, weight, bias, N, C, OC);
}

Status CudaComputeOps::queue_matmul_backward_input_gelu(DType dt, void* dpre, void* dact, const void* dout,
                                                        const void* weight, const void* pre, int64_t N, int64_t C,
                                                        int64_t OC) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  bool fused = false;
  const auto gemm = [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::matmul_backward_input_dgelu(gemm_context(), as<T>(dpre), as<T>(dout), as<T>(weight), as<T>(pre), N, C,
                                           OC, kc::GemmOptions{tf32_}, stream_, &fused);
  };
  STRATA_RETURN_IF_ERROR(gemm_status(with_element_type(dt, gemm), "matmul_backward_input_gelu"));
  if (fused) return Status::ok();
  return ComputeOps::queue_matmul_backward_input_gelu(dt, dpre, dact, dout, weight, pre, N, C, OC);
}

Status CudaComputeOps::queue_layernorm_forward(DType dt, void* out, float* mean, float* rstd, const void* inp,
                                               const void* weight, const void* bias, int64_t N, int64_t C, float eps) {
  return launch(dt, "layernorm_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::layernorm_forward(as<T>(out), mean, rstd, as<T>(inp), as<T>(weight), as<T>(bias), N, C, eps, stream_);
  });
}

Status CudaComputeOps::queue_layernorm_backward(DType dt, void* dinp, void* dweight, void* dbias, const void* dout,
                                                const void* inp, const void* weight, const float* mean,
                                                const float* rstd, int64_t N, int64_t C) {
  return launch(dt, "layernorm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const kc::GemmContext ctx = gemm_context();  // the product tiles hold the fused backward's partials
    return kc::layernorm_backward(as<T>(dinp), as<T>(dweight), as<T>(dbias), as<T>(dout), as<T>(inp), as<T>(weight),
                                  mean, rstd, N, C, stream_, ctx.product, ctx.product_floats);
  });
}

Status CudaComputeOps::queue_rmsnorm_forward(DType dt, void* out, float* rstd, const void* inp, const void* weight,
                                             int64_t N, int64_t C, float eps) {
  return launch(dt, "rmsnorm_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::rmsnorm_forward(as<T>(out), rstd, as<T>(inp), as<T>(weight), N, C, eps, stream_);
  });
}

Status CudaComputeOps::queue_rmsnorm_backward(DType dt, void* dinp, void* dweight, const void* dout, const void* inp,
                                              const void* weight, const float* rstd, int64_t N, int64_t C) {
  return launch(dt, "rmsnorm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const kc::GemmContext ctx = gemm_context();  // the product tiles hold the fused backward's partials
    return kc::rmsnorm_backward(as<T>(dinp), as<T>(dweight), as<T>(dout), as<T>(inp), as<T>(weight), rstd, N, C,
                                stream_, ctx.product, ctx.product_floats);
  });
}

Status CudaComputeOps::queue_gelu_forward(DType dt, void* out, const void* inp, int64_t n) {
  return launch(dt, "gelu_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::gelu_forward(as<T>(out), as<T>(inp), n, stream_);
  });
}

Status CudaComputeOps::queue_gelu_backward(DType dt, void* dinp, const void* inp, const void* dout, int64_t n,
                                           GradStore store) {
  return launch(dt, "gelu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::gelu_backward(as<T>(dinp), as<T>(inp), as<T>(dout), n, stream_, store == GradStore::overwrite);
  });
}

Status CudaComputeOps::queue_swiglu_forward(DType dt, void* out, const void* inp, int64_t N, int64_t H) {
  return launch(dt, "swiglu_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::swiglu_forward(as<T>(out), as<T>(inp), N, H, stream_);
  });
}

Status CudaComputeOps::queue_swiglu_backward(DType dt, void* dinp, const void* inp, const void* dout, int64_t N,
                                             int64_t H, GradStore store) {
  return launch(dt, "swiglu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::swiglu_backward(as<T>(dinp), as<T>(inp), as<T>(dout), N, H, stream_, store == GradStore::overwrite);
  });
}

Status CudaComputeOps::queue_residual_forward(DType dt, void* out, const void* a, const void* b, int64_t n) {
  return launch(dt, "residual_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::residual_forward(as<T>(out), as<T>(a), as<T>(b), n, stream_);
  });
}

Status CudaComputeOps::queue_residual_backward(DType dt, void* da, void* db, const void* dout, int64_t n) {
  return launch(dt, "residual_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::residual_backward(as<T>(da), as<T>(db), as<T>(dout), n, stream_);
  });
}

Status CudaComputeOps::queue_encoder_forward(DType dt, void* out, const int32_t* tokens, const void* wte,
                                             const void* wpe, int64_t B, int64_t T_len, int64_t C, int64_t V,
                                             int64_t row_begin) {
  return launch(dt, "encoder_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::encoder_forward(as<T>(out), tokens, as<T>(wte), as<T>(wpe), B, T_len, C, stream_,
                               kernels::TableRows{row_begin, V});
  });
}

Status CudaComputeOps::queue_encoder_backward(DType dt, void* dwte, void* dwpe, const void* dout,
                                              const int32_t* tokens, int64_t B, int64_t T_len, int64_t C, int64_t V,
                                              int64_t row_begin) {
  return launch(dt, "encoder_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const kc::GemmContext ctx = gemm_context();  // the product tiles are the sort's scratch
    return kc::encoder_backward(as<T>(dwte), as<T>(dwpe), as<T>(dout), tokens, B, T_len, C, ctx.product,
                                ctx.product_floats * sizeof(float), stream_, kernels::TableRows{row_begin, V});
  });
}

Status CudaComputeOps::queue_token_embedding_forward(DType dt, void* out, const int32_t* tokens, const void* wte,
                                                     int64_t N, int64_t C, int64_t V, int64_t row_begin) {
  return launch(dt, "token_embedding_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::token_embedding_forward(as<T>(out), tokens, as<T>(wte), N, C, stream_,
                                       kernels::TableRows{row_begin, V});
  });
}

Status CudaComputeOps::queue_token_embedding_backward(DType dt, void* dwte, const void* dout, const int32_t* tokens,
                                                      int64_t N, int64_t C, int64_t V, int64_t row_begin) {
  return launch(dt, "token_embedding_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const kc::GemmContext ctx = gemm_context();  // the product tiles are the sort's scratch
    return kc::token_embedding_backward(as<T>(dwte), as<T>(dout), tokens, N, C, ctx.product,
                                        ctx.product_floats * sizeof(float), stream_, kernels::TableRows{row_begin, V});
  });
}

Status CudaComputeOps::queue_rope_forward(DType dt, void* out, const void* inp, int64_t B, int64_t T_len, int64_t NH,
                                          int64_t HS, float theta, int64_t pos_offset, int64_t stride) {
  return launch(dt, "rope_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::rope_forward(as<T>(out), as<T>(inp), B, T_len, NH, HS, theta, pos_offset, stream_, stride);
  });
}

Status CudaComputeOps::queue_rope_backward(DType dt, void* dinp, const void* dout, int64_t B, int64_t T_len,
                                           int64_t NH, int64_t HS, float theta, int64_t pos_offset, int64_t stride) {
  return launch(dt, "rope_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::rope_backward(as<T>(dinp), as<T>(dout), B, T_len, NH, HS, theta, pos_offset, stream_, stride);
  });
}

Status CudaComputeOps::queue_attention_forward(DType dt, void* out, float* lse, const void* q, const void* k,
                                               const void* v, int64_t B, int64_t T_len, int64_t NH, int64_t NKV,
                                               int64_t HS, int64_t qkv_stride) {
  STRATA_RETURN_IF_ERROR(check_head_size("attention_forward", HS));
  return launch(dt, "attention_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::attention_forward(as<T>(out), lse, as<T>(q), as<T>(k), as<T>(v), B, T_len, NH, NKV, HS, stream_,
                                 qkv_stride);
  });
}

Status CudaComputeOps::queue_attention_backward(DType dt, void* dq, void* dk, void* dv, const void* dout,
                                                const void* q, const void* k, const void* v, const void* out,
                                                const float* lse, int64_t B, int64_t T_len, int64_t NH, int64_t NKV,
                                                int64_t HS, int64_t qkv_stride) {
  STRATA_RETURN_IF_ERROR(check_head_size("attention_backward", HS));
  return launch(dt, "attention_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const kc::GemmContext ctx = gemm_context();  // the product tiles hold the per-row terms
    return kc::attention_backward(as<T>(dq), as<T>(dk), as<T>(dv), as<T>(dout), as<T>(q), as<T>(k), as<T>(v),
                                  as<T>(out), lse, B, T_len, NH, NKV, HS, stream_, ctx.product, ctx.product_floats,
                                  qkv_stride);
  });
}

Status CudaComputeOps::queue_crossentropy_forward(DType dt, float* lse, float* losses,
                                                  kernels::CrossEntropyResult* result, const void* logits,
                                                  const int32_t* targets, int64_t N, int64_t V,
                                                  int64_t logits_stride) {
  return launch(dt, "crossentropy_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::crossentropy_forward(lse, losses, result, as<T>(logits), targets, N, V, stream_, logits_stride);
  });
}

Status CudaComputeOps::queue_crossentropy_backward(DType dt, void* dlogits, const void* logits, const float* lse,
                                                   const int32_t* targets, float dloss, int64_t N, int64_t V,
                                                   int64_t logits_stride) {
  return launch(dt, "crossentropy_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::crossentropy_backward(as<T>(dlogits), as<T>(logits), lse, targets, dloss, N, V, stream_,
                                     logits_stride);
  });
}

Status CudaComputeOps::queue_crossentropy_backward_inplace(DType dt, void* logits_to_dlogits, const float* lse,
                                                           const int32_t* targets, float dloss, int64_t N,
                                                           int64_t V, int64_t logits_stride) {
  return launch(dt, "crossentropy_backward_inplace", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::crossentropy_backward_inplace(as<T>(logits_to_dlogits), lse, targets, dloss, N, V, stream_,
                                             logits_stride);
  });
}

Status CudaComputeOps::queue_crossentropy_forward_backward_inplace(DType dt, float* lse, float* losses,
                                                                   kernels::CrossEntropyResult* result,
                                                                   void* logits_to_dlogits, const int32_t* targets,
                                                                   float dloss, int64_t N, int64_t V,
                                                                   int64_t logits_stride) {
  return launch(dt, "crossentropy_forward_backward_inplace", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kc::crossentropy_forward_backward_inplace(lse, losses, result, as<T>(logits_to_dlogits), targets, dloss, N,
                                                     V, stream_, logits_stride);
  });
}

Status CudaComputeOps::queue_cast(void* dst, DType to, const void* src, DType from, int64_t n) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return STRATA_CUDA_STATUS(kc::convert(dst, format_of(to), src, format_of(from), static_cast<size_t>(n), stream_));
}

Status CudaComputeOps::queue_grad_norm_squared(float* sum_squares, const void* grad, DType format, int64_t n) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return STRATA_CUDA_STATUS(
      kc::grad_norm_squared(sum_squares, norm_scratch_, grad, format_of(format), static_cast<size_t>(n), stream_));
}

Status CudaComputeOps::queue_accumulate_widened(float* acc, const void* src, DType format, int64_t n, bool first) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return STRATA_CUDA_STATUS(
      kc::accumulate_widened(acc, src, format_of(format), static_cast<size_t>(n), first, stream_));
}

Status CudaComputeOps::queue_sum_squares_blocks(double* partials, const void* x, DType format, int64_t n) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return STRATA_CUDA_STATUS(kc::sum_squares_blocks(partials, x, format_of(format), static_cast<size_t>(n), stream_));
}

Status CudaComputeOps::queue_grad_check_finite(int32_t* all_finite, const void* grad, DType format, int64_t n) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return STRATA_CUDA_STATUS(
      kc::grad_check_finite(all_finite, grad, format_of(format), static_cast<size_t>(n), stream_));
}

Status CudaComputeOps::queue_adam_update(const kernels::AdamConstants& constants, const kernels::AdamFormats& formats,
                                         const kernels::AdamSpan& span) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return STRATA_CUDA_STATUS(kc::adam_update(constants, formats, span, stream_));
}

Status CudaComputeOps::queue_adam8bit_update(const kernels::AdamConstants& constants,
                                             const kernels::AdamFormats& formats, const kernels::Adam8bitSpan& span) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return STRATA_CUDA_STATUS(kc::adam8bit_update(constants, formats, span, stream_));
}

}  // namespace strata
