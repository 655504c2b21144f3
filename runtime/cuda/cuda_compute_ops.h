// CudaComputeOps: ComputeOps on the CUDA backend. Each op launches the kernels/cuda kernel (GEMMs
// through the backend's cuBLAS handle and this object's cuBLASLt handle) on the compute stream,
// with fp32, bf16 or fp16 activations (fp32 arithmetic inside, 16-bit stores rounded to nearest
// even once, GEMMs accumulating in fp32), and
// turns the launch's cudaError_t / GemmStatus into a Status (runtime/cuda/cuda_check.h); faults
// while a kernel runs surface at the next synchronize. Integer activation types are
// invalid_argument. fp32 GEMMs use TF32 tensor cores only when created with tf32 = true.
// Device memory outside the arena (carved once at create, never inside a step; the arena is the
// backend's and const here): kDeviceWorkspaceBytes = the cuBLASLt workspace (32 MiB), the fp32
// product tiles of 16-bit accumulating GEMMs (64 MiB, also the token-embedding sort scratch, the
// bias-gradient partials and the fused norm backward's partials: every user is stream-ordered on
// the compute stream) and the 1 KiB
// grad-norm scratch. cuBLAS's own per-handle workspace comes on top (cuBLAS-managed).
// Not for model/ to include. Thread-safety and lifetime: as ComputeOps; owned by its CudaBackend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/optimizer.cuh"
#include "runtime/compute_ops.h"

namespace strata {

class CudaComputeOps final : public ComputeOps {
 public:
  // Device bytes this object holds outside the backend's arena (see the top of this file): for
  // memory reports; the --gpu-mem budget does not include them.
  static constexpr uint64_t kDeviceWorkspaceBytes =
      kernels::cuda::kGemmLtWorkspaceBytes + kernels::cuda::kGemmProductFloats * sizeof(float) +
      kernels::cuda::kGradNormScratchFloats * sizeof(float);

  // Binds `device`, creates a cuBLASLt handle and allocates the workspaces above (outside the
  // arena, once; out_of_memory with context when the device lacks them). `compute`, `cublas`
  // (already bound to `compute`), `arena` and `base` are the backend's and outlive this.
  // `tf32`: fp32 GEMMs may use TF32 tensor cores (kernels/cuda/gemm.cuh GemmOptions::allow_tf32);
  // every GEMM sets the handle's math mode accordingly, so the handle is not shared with others.
  static StatusOr<std::unique_ptr<CudaComputeOps>> create(int device, cudaStream_t compute, cublasHandle_t cublas,
                                                          bool tf32, const Arena& arena, const void* base);
  ~CudaComputeOps() override;

 protected:
  Status check_activation_dtype(DType dt, std::string_view op) const override;

  Status queue_matmul_forward(DType dt, void* out, const void* inp, const void* weight, const void* bias, int64_t N,
                              int64_t C, int64_t OC, int64_t out_stride) override;
  Status queue_matmul_backward_input_sum(DType dt, void* dinp, std::span<const InputGradTerm> terms, int64_t N,
                                         int64_t C, GradStore dinp_store) override;
  Status queue_matmul_backward(DType dt, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                               const void* weight, int64_t N, int64_t C, int64_t OC, int64_t dout_stride,
                               GradStore dinp_store, GradStore dweight_store) override;
  Status queue_layernorm_forward(DType dt, void* out, float* mean, float* rstd, const void* inp, const void* weight,
                                 const void* bias, int64_t N, int64_t C, float eps) override;
  Status queue_layernorm_backward(DType dt, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                  const void* weight, const float* mean, const float* rstd, int64_t N,
                                  int64_t C) override;
  Status queue_rmsnorm_forward(DType dt, void* out, float* rstd, const void* inp, const void* weight, int64_t N,
                               int64_t C, float eps) override;
  Status queue_rmsnorm_backward(DType dt, void* dinp, void* dweight, const void* dout, const void* inp,
                                const void* weight, const float* rstd, int64_t N, int64_t C) override;
  Status queue_matmul_forward_gelu(DType dt, void* act, void* pre, const void* inp, const void* weight,
                                   const void* bias, int64_t N, int64_t C, int64_t OC) override;
  Status queue_matmul_backward_input_gelu(DType dt, void* dpre, void* dact, const void* dout, const void* weight,
                                          const void* pre, int64_t N, int64_t C, int64_t OC) override;
  Status queue_gelu_forward(DType dt, void* out, const void* inp, int64_t n) override;
  Status queue_gelu_backward(DType dt, void* dinp, const void* inp, const void* dout, int64_t n,
                             GradStore store) override;
  Status queue_swiglu_forward(DType dt, void* out, const void* inp, int64_t N, int64_t H) override;
  Status queue_swiglu_backward(DType dt, void* dinp, const void* inp, const void* dout, int64_t N, int64_t H,
                               GradStore store) override;
  Status queue_residual_forward(DType dt, void* out, const void* a, const void* b, int64_t n) override;
  Status queue_residual_backward(DType dt, void* da, void* db, const void* dout, int64_t n) override;
  Status queue_encoder_forward(DType dt, void* out, const int32_t* tokens, const void* wte, const void* wpe, int64_t B,
                               int64_t T, int64_t C, int64_t V, int64_t row_begin) override;
  Status queue_encoder_backward(DType dt, void* dwte, void* dwpe, const void* dout, const int32_t* tokens, int64_t B,
                                int64_t T, int64_t C, int64_t V, int64_t row_begin) override;
  Status queue_token_embedding_forward(DType dt, void* out, const int32_t* tokens, const void* wte, int64_t N,
                                       int64_t C, int64_t V, int64_t row_begin) override;
  Status queue_token_embedding_backward(DType dt, void* dwte, const void* dout, const int32_t* tokens, int64_t N,
                                        int64_t C, int64_t V, int64_t row_begin) override;
  Status queue_rope_forward(DType dt, void* out, const void* inp, int64_t B, int64_t T, int64_t NH, int64_t HS,
                            float theta, int64_t pos_offset, int64_t stride) override;
  Status queue_rope_backward(DType dt, void* dinp, const void* dout, int64_t B, int64_t T, int64_t NH, int64_t HS,
                             float theta, int64_t pos_offset, int64_t stride) override;
  Status queue_attention_forward(DType dt, void* out, float* lse, const void* q, const void* k, const void* v,
                                 int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                 int64_t qkv_stride) override;
  Status queue_attention_backward(DType dt, void* dq, void* dk, void* dv, const void* dout, const void* q,
                                  const void* k, const void* v, const void* out, const float* lse, int64_t B,
                                  int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t qkv_stride) override;
  Status queue_crossentropy_forward(DType dt, float* lse, float* losses, kernels::CrossEntropyResult* result,
                                    const void* logits, const int32_t* targets, int64_t N, int64_t V,
                                    int64_t logits_stride) override;
  Status queue_crossentropy_backward(DType dt, void* dlogits, const void* logits, const float* lse,
                                     const int32_t* targets, float dloss, int64_t N, int64_t V,
                                     int64_t logits_stride) override;
  Status queue_crossentropy_backward_inplace(DType dt, void* logits_to_dlogits, const float* lse,
                                             const int32_t* targets, float dloss, int64_t N, int64_t V,
                                             int64_t logits_stride) override;
  Status queue_crossentropy_forward_backward_inplace(DType dt, float* lse, float* losses,
                                                      kernels::CrossEntropyResult* result, void* logits_to_dlogits,
                                                      const int32_t* targets, float dloss, int64_t N, int64_t V,
                                                      int64_t logits_stride) override;
  Status queue_cast(void* dst, DType to, const void* src, DType from, int64_t n) override;
  Status queue_grad_norm_squared(float* sum_squares, const void* grad, DType format, int64_t n) override;
  Status queue_grad_check_finite(int32_t* all_finite, const void* grad, DType format, int64_t n) override;
  Status queue_accumulate_widened(float* acc, const void* src, DType format, int64_t n, bool first) override;
  Status queue_sum_squares_blocks(double* partials, const void* x, DType format, int64_t n) override;
  Status queue_adam_update(const kernels::AdamConstants& constants, const kernels::AdamFormats& formats,
                           const kernels::AdamSpan& span) override;
  Status queue_adam8bit_update(const kernels::AdamConstants& constants, const kernels::AdamFormats& formats,
                               const kernels::Adam8bitSpan& span) override;

 private:
  CudaComputeOps(int device, cudaStream_t compute, cublasHandle_t cublas, bool tf32, const Arena& arena,
                 const void* base)
      : ComputeOps(arena, base), device_(device), stream_(compute), cublas_(cublas), tf32_(tf32) {}
  // Binds the device, then runs `launch` with a type tag for `dt` (float, __nv_bfloat16 or __half)
  // and converts the cudaError_t it returns, naming `op`.
  template <typename Launch>
  Status launch(DType dt, const char* op, Launch&& fn);

  // The GEMM context of every matmul: cublas_, lt_, and the two workspaces carved from workspace_.
  kernels::cuda::GemmContext gemm_context() const;

  const int device_;
  cudaStream_t const stream_;
  cublasHandle_t const cublas_;
  const bool tf32_;  // fp32 GEMMs may use TF32 tensor cores
  float* norm_scratch_ = nullptr;  // kernels::cuda::kGradNormScratchFloats floats, cudaMalloc'd
  cublasLtHandle_t lt_ = nullptr;
  // One cudaMalloc: [cuBLASLt workspace | fp32 product tiles]. Used only on stream_.
  std::byte* workspace_ = nullptr;
  // Reset before lt_ is destroyed. Used only by the thread driving stream_.
  std::unique_ptr<kernels::cuda::LtPlanCache> lt_plans_;
};

}  // namespace strata
