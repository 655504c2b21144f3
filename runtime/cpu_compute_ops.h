// CpuComputeOps: ComputeOps on the CPU backend. Each op is one closure queued on the compute
// CpuStream that calls kernels/cpu (GEMMs through OpenBLAS, loops through oneTBB, running inside
// the stream's worker thread). Activations in fp32, bf16 or fp16: the kernels compute in fp32, and
// for 16-bit tensors the closure widens the operands to fp32 scratch and rounds the outputs back
// once (runtime/cpu_widened_args.h), as the compute_ops.h contract says; fp32 runs the kernels on
// the tensors directly. Any other dt is invalid_argument. Not a fast backend.
// Thread-safety and lifetime: as ComputeOps; owned by the CpuBackend whose stream it queues on.
#pragma once

#include "runtime/compute_ops.h"
#include "runtime/cpu_stream.h"
#include "runtime/cpu_widened_args.h"

namespace strata {

class CpuComputeOps final : public ComputeOps {
 public:
  // `compute` is the backend's compute stream; `arena`/`base` its memory. All outlive this object.
  CpuComputeOps(CpuStream& compute, const Arena& arena, const void* base) : ComputeOps(arena, base), stream_(compute) {}

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
  // Queues kernel(WidenedArgs&) on the compute stream with fp32 views of `dt` tensors, then
  // narrows the outputs (runtime/cpu_widened_args.h).
  template <typename Kernel>
  Status enqueue_in_fp32(DType dt, Kernel kernel);

  CpuStream& stream_;
  Fp32Scratch scratch_;  // used only by closures on stream_, which drains before this is destroyed
};

}  // namespace strata
