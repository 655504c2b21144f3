// ComputeOps: the compute a transformer step needs (GEMM, norms, activations, embeddings, RoPE,
// causal attention, fused cross-entropy, casts, gradient norm / finite check, AdamW), written once
// here and run by each Backend on its compute stream. Every public method validates its arguments
// (shape, dtype, device ranges) and returns invalid_argument naming the problem BEFORE anything is
// queued; then it queues the op on Stream::compute and returns at once. Errors raised while the op
// runs surface at the next synchronize. Not a tensor library: device pointers, a DType, shapes.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "kernels/cpu/adam.h"
#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/ops_loss.h"
#include "runtime/arena.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

namespace strata {

// Conventions for every op below:
// - Pointers are device pointers from the owning backend's allocate(); each tensor's byte range,
//   computed from the shape, must lie inside one live block (Arena::check_range), else
//   invalid_argument naming the op and the argument. Empty tensors (0 elements) are not checked.
//   A tensor (R, M) with a row stride S >= M spans (R - 1) * S + M elements.
// - `dt` is the element type of the activations, weights and their gradients of the op: fp32,
//   bf16 or fp16 on every backend. Arithmetic is fp32 inside every op (GEMMs accumulate in fp32);
//   only the stored tensors are 16-bit, rounded to nearest even on each store, so a backward op
//   that accumulates (+=) into a 16-bit gradient reads it, adds in fp32 and rounds once. The CPU
//   backend widens 16-bit operands to fp32 scratch, runs its fp32 kernel and narrows the outputs.
//   Statistics (mean, rstd, lse, losses) are always fp32; token ids and targets int32.
// - Backward ops ACCUMULATE (+=) into every gradient (zero them first with Backend::fill_zero);
//   a gradient marked "may be null" is then not computed. Where a GradStore argument is given,
//   GradStore::overwrite stores the value instead (see GradStore).
// - Outputs must not alias inputs unless stated. Token ids must lie in [0, vocab) (the embedding
//   ops' V may be a tile of it, see there) and targets in [0, V) or -1: they are device data, so
//   the ops cannot check them (the data loader does).
// - Scalar results (loss, grad norm, finite flag) are written to device memory: the host reads
//   them with copy_to_host after an event, so no op ever synchronizes.
// Thread-safety: like the compute stream: one thread drives it at a time.
// Lifetime: owned by its Backend (Backend::ops()); valid while the backend lives.

// How a backward op stores a gradient it computes. add: grad += value (the default; the sum
// formed in fp32 and rounded once). overwrite: grad = value, whatever the buffer held -- the bits
// that fill_zero and then add give (on the GPU the sign of an exact zero aside: -0 + +0 is +0),
// without reading the old value: the GPU writes a 16-bit gradient straight from its GEMM, rounded
// once, with no fp32 product pass and no zero fill. Use it for a gradient's first contribution
// into a buffer that would otherwise be zeroed for it.
enum class GradStore : uint8_t { add, overwrite };

// One projection's share of an input gradient (matmul_backward_input_sum): dout (N, OC) @ weight
// (OC, C), both `dt` elements; dout's rows start dout_stride elements apart (0 means OC, else >=
// OC), so the terms may be column blocks of one tensor (the fused q, k, v projection's gradient).
struct InputGradTerm {
  const void* dout = nullptr;
  const void* weight = nullptr;
  int64_t OC = 0;
  int64_t dout_stride = 0;
};

class ComputeOps {
 public:
  virtual ~ComputeOps() = default;
  ComputeOps(const ComputeOps&) = delete;
  ComputeOps& operator=(const ComputeOps&) = delete;

  // ---- linear layer: out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be null --
  // out_stride: the row stride of out in elements (0 means OC, else >= OC): out is (N, out_stride)
  // of which columns [0, OC) are written and the rest of each row is left untouched. A stride that
  // keeps rows 16-byte aligned (GPT-2's V = 50257 padded to 50304) lets the GPU's GEMMs use their
  // vectorized kernels. The CPU backend writes the same bits for every stride; cuBLAS may pick
  // another kernel for another stride (fp32 accumulation either way).
  Status matmul_forward(DType dt, void* out, const void* inp, const void* weight, const void* bias, int64_t N,
                        int64_t C, int64_t OC, int64_t out_stride = 0);
  // dinp (N, C) += dout @ weight; dweight (OC, C) += dout^T @ inp; dbias (OC) += column sums of
  // dout (N, OC). Each gradient may be null. dout_stride: the row stride of dout (0 means OC, else
  // >= OC); columns past OC are never read. dinp_store applies to dinp, dweight_store to dweight
  // and dbias.
  Status matmul_backward(DType dt, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                         const void* weight, int64_t N, int64_t C, int64_t OC, int64_t dout_stride = 0,
                         GradStore dinp_store = GradStore::add, GradStore dweight_store = GradStore::add);
  // dinp (N, C) += (or = by dinp_store) the sum over `terms` of dout_t @ weight_t: the input
  // gradient of projections that share one input (q, k and v). In a 16-bit type it is formed in
  // fp32 over all the terms and rounded once, where one matmul_backward per term would round after
  // each; an fp32 dinp is its own accumulator (one fp32 add per term, as separate calls). 1 to
  // kMaxInputGradTerms terms, none aliasing dinp. The CPU backend sums term by term (one sgemm
  // each, so the layout never changes its bits); the CUDA backend runs adjacent terms (column
  // blocks of one dout in the same rows, row blocks of one weight) as one GEMM over their joined K
  // (in fp32 too: one add for the joined terms).
  static constexpr size_t kMaxInputGradTerms = 4;
  Status matmul_backward_input_sum(DType dt, void* dinp, std::span<const InputGradTerm> terms, int64_t N, int64_t C,
                                   GradStore dinp_store = GradStore::add);
  // A projection and its GELU (GPT-2's MLP): pre (N, OC) = inp @ weight^T + bias and act (N, OC) =
  // gelu(pre), both overwritten. By default matmul_forward then gelu_forward; a backend may form
  // both in one pass (CUDA, 16-bit: GELU of the unrounded fp32 pre-activation, which may differ from
  // the two ops' result in the last bit of an element; kernels/cuda/gemm.cuh). Rows packed.
  Status matmul_forward_gelu(DType dt, void* act, void* pre, const void* inp, const void* weight, const void* bias,
                             int64_t N, int64_t C, int64_t OC);
  // The input gradient through that GELU: dpre (N, C) = gelu'(pre) * (dout (N, OC) @ weight (OC,
  // C)), overwritten. By default matmul_backward into dact (N, C, scratch: overwritten) then
  // gelu_backward; a fusing backend (CUDA, 16-bit) rounds once and leaves dact alone.
  Status matmul_backward_input_gelu(DType dt, void* dpre, void* dact, const void* dout, const void* weight,
                                    const void* pre, int64_t N, int64_t C, int64_t OC);

  // ---- norms over rows of (N, C); eps > 0 ------------------------------------------------------
  // out = (inp - mean) * rstd * weight (C) + bias (C); saves mean (N), rstd (N) fp32.
  Status layernorm_forward(DType dt, void* out, float* mean, float* rstd, const void* inp, const void* weight,
                           const void* bias, int64_t N, int64_t C, float eps);
  // dinp (N, C) +=, dweight (C) +=, dbias (C) +=; each may be null.
  Status layernorm_backward(DType dt, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                            const void* weight, const float* mean, const float* rstd, int64_t N, int64_t C);
  // out = inp * rstd * weight (C), rstd (N) = 1 / sqrt(mean(inp^2) + eps), saved.
  Status rmsnorm_forward(DType dt, void* out, float* rstd, const void* inp, const void* weight, int64_t N, int64_t C,
                         float eps);
  // dinp (N, C) +=, dweight (C) +=; either may be null.
  Status rmsnorm_backward(DType dt, void* dinp, void* dweight, const void* dout, const void* inp,
                          const void* weight, const float* rstd, int64_t N, int64_t C);

  // ---- elementwise -----------------------------------------------------------------------------
  // out (n) = gelu(inp) (tanh approximation); out may equal inp. dinp (n) += gelu'(inp) * dout.
  Status gelu_forward(DType dt, void* out, const void* inp, int64_t n);
  Status gelu_backward(DType dt, void* dinp, const void* inp, const void* dout, int64_t n,
                       GradStore store = GradStore::add);
  // inp (N, 2H) = [gate | up]; out (N, H) = silu(gate) * up. dinp (N, 2H) += given dout (N, H).
  Status swiglu_forward(DType dt, void* out, const void* inp, int64_t N, int64_t H);
  Status swiglu_backward(DType dt, void* dinp, const void* inp, const void* dout, int64_t N, int64_t H,
                         GradStore store = GradStore::add);
  // out (n) = a + b (out may equal a or b). da (n) += dout, db (n) += dout; either may be null.
  Status residual_forward(DType dt, void* out, const void* a, const void* b, int64_t n);
  Status residual_backward(DType dt, void* da, void* db, const void* dout, int64_t n);

  // ---- embeddings: tokens int32 (B, T) or (N), wte (V, C), wpe (>= T, C) ------------------------
  // wte is a table of V rows holding the token ids [row_begin, row_begin + V) (row r is id
  // row_begin + r): the whole vocabulary (row_begin = 0, V = vocab) or one row tile of it, so a
  // (vocab, C) table can be visited one tile at a time. row_begin >= 0. A row n whose token the
  // table does not hold is SKIPPED: the forward does not write out[n] (not even its position part),
  // the backward adds nothing for it. Visiting every tile of a partition of [0, vocab) with all the
  // rows writes the untiled call's bits to every row of out, and gives each dwte row the untiled
  // call's bits (its rows n summed in the same order, added once). The ops are not told the
  // vocabulary: the caller keeps tokens in [0, vocab) (a token outside it is in no tile, so its row
  // is never written or read; no table row past V is ever touched).
  // out (B, T, C) = wte[tokens[b, t] - row_begin] + wpe[t] (one fp32 add, as untiled).
  // dwte += scatter of dout by token over the rows the table holds; dwpe rows 0..T-1 += sum over b
  // of EVERY row, whatever row_begin (pass it in one tile's call only). Either may be null.
  Status encoder_forward(DType dt, void* out, const int32_t* tokens, const void* wte, const void* wpe, int64_t B,
                         int64_t T, int64_t C, int64_t V, int64_t row_begin = 0);
  Status encoder_backward(DType dt, void* dwte, void* dwpe, const void* dout, const int32_t* tokens, int64_t B,
                          int64_t T, int64_t C, int64_t V, int64_t row_begin = 0);
  // out (N, C) = wte[tokens[n] - row_begin]. dwte (V, C) += scatter of dout (N, C), as above.
  Status token_embedding_forward(DType dt, void* out, const int32_t* tokens, const void* wte, int64_t N, int64_t C,
                                 int64_t V, int64_t row_begin = 0);
  Status token_embedding_backward(DType dt, void* dwte, const void* dout, const int32_t* tokens, int64_t N,
                                  int64_t C, int64_t V, int64_t row_begin = 0);

  // ---- rotary embedding over (B, T, NH, HS), "rotate half" pairing, HS even, theta > 0 ----------
  // Position of row t is pos_offset + t (pos_offset >= 0). out may equal inp. dinp = the inverse
  // rotation of dout, overwritten; dinp may equal dout. stride: the row stride in elements between
  // consecutive positions (b, t) of both tensors (0 means NH * HS, else >= NH * HS), so q or k may
  // be a column block of the fused projection's output; other columns are never touched.
  Status rope_forward(DType dt, void* out, const void* inp, int64_t B, int64_t T, int64_t NH, int64_t HS,
                      float theta, int64_t pos_offset, int64_t stride = 0);
  Status rope_backward(DType dt, void* dinp, const void* dout, int64_t B, int64_t T, int64_t NH, int64_t HS,
                       float theta, int64_t pos_offset, int64_t stride = 0);

  // ---- causal attention, grouped-query heads (NH % NKV == 0), scale 1 / sqrt(HS) ---------------
  // q, out (B, T, NH, HS); k, v (B, T, NKV, HS); lse (B, NH, T) fp32 saved for the backward.
  // qkv_stride (both): the row stride in elements between consecutive positions (b, t) of q, k, v,
  // dq, dk and dv, so that they may be column blocks of one (B * T, qkv_stride) tensor (the fused
  // projection's output); 0 means packed, else >= NH * HS. out, dout and lse are always packed. The
  // values never depend on it.
  Status attention_forward(DType dt, void* out, float* lse, const void* q, const void* k, const void* v, int64_t B,
                           int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t qkv_stride = 0);
  // dq +=, dk +=, dv += (none may be null) given dout and the forward's out and lse.
  Status attention_backward(DType dt, void* dq, void* dk, void* dv, const void* dout, const void* q, const void* k,
                            const void* v, const void* out, const float* lse, int64_t B, int64_t T, int64_t NH,
                            int64_t NKV, int64_t HS, int64_t qkv_stride = 0);

  // ---- fused softmax cross-entropy over logits (N, V), V >= 1, targets (N) ----------------------
  // logits_stride: the row stride of logits and dlogits in elements (0 means V, else >= V); the
  // columns past V of each row (padding, see matmul_forward's out_stride) are never read or written.
  // Writes lse (N) and losses (N) (0 for ignored rows) and, if `result` (a device pointer) is not
  // null, the loss sum, the counted rows and their mean.
  Status crossentropy_forward(DType dt, float* lse, float* losses, kernels::CrossEntropyResult* result,
                              const void* logits, const int32_t* targets, int64_t N, int64_t V,
                              int64_t logits_stride = 0);
  // dlogits (N, V) += dloss * (softmax - onehot) for counted rows; dlogits must not alias logits.
  Status crossentropy_backward(DType dt, void* dlogits, const void* logits, const float* lse,
                               const int32_t* targets, float dloss, int64_t N, int64_t V, int64_t logits_stride = 0);
  // The same gradient written over the logits (ignored rows become 0): no second (N, V) buffer.
  // The padding columns keep whatever they held.
  Status crossentropy_backward_inplace(DType dt, void* logits_to_dlogits, const float* lse, const int32_t* targets,
                                       float dloss, int64_t N, int64_t V, int64_t logits_stride = 0);
  // crossentropy_forward, then crossentropy_backward_inplace with the lse it wrote: the same bits as
  // the two calls. A backend may do both in one pass over each row (CUDA does: the logits read once,
  // not twice); the default queues the two.
  Status crossentropy_forward_backward_inplace(DType dt, float* lse, float* losses,
                                               kernels::CrossEntropyResult* result, void* logits_to_dlogits,
                                               const int32_t* targets, float dloss, int64_t N, int64_t V,
                                               int64_t logits_stride = 0);

  // ---- casts, gradient checks, optimizer (every backend: fp32, bf16, fp16) ---------------------
  // dst (n elements of `to`) = src (n elements of `from`), round to nearest even, NaN kept quiet
  // (bit-identical to kernels/cpu/half.h). dst and src must not overlap.
  Status cast(void* dst, DType to, const void* src, DType from, int64_t n);
  // *sum_squares (one fp32 on the device) += sum of grad^2 over n elements of `format`; call once
  // per gradient tensor after zeroing it; sqrt on the host gives the global norm.
  Status grad_norm_squared(float* sum_squares, const void* grad, DType format, int64_t n);
  // The one definition of gradient accumulation and of the global norm's sum of squares
  // (kernels/cpu/grad_accumulate.h), for gradients kept on the device: bit-identical to the host's.
  // acc (n fp32) = widen(src) when `first`, else acc + widen(src); src holds n `format` elements.
  Status accumulate_widened(float* acc, const void* src, DType format, int64_t n, bool first);
  // partials[k] (double, on the device) = kernels::sum_squares_block of x's k-th block of
  // kernels::kSumSquaresBlock floats, for the ceil(n / kSumSquaresBlock) blocks of x (n elements of
  // `format`, each widened exactly to fp32: a 16-bit x gives the bits of its widened copy).
  Status sum_squares_blocks(double* partials, const void* x, DType format, int64_t n);
  // Writes 0 to *all_finite (one int32 on the device) if any grad element is Inf or NaN; never
  // writes 1 (set it to 1 before a step's first tensor).
  Status grad_check_finite(int32_t* all_finite, const void* grad, DType format, int64_t n);
  // One fused Adam/AdamW pass (kernels/cpu/adam.h) over optimizer states that live in this
  // backend's memory: span.param/m/v fp32, span.grad in formats.grad, span.copy_out in formats.copy
  // (ignored for CopyOut::none). Build `constants` with kernels::adam_constants.
  Status adam_update(const kernels::AdamConstants& constants, const kernels::AdamFormats& formats,
                     const kernels::AdamSpan& span);
  // The same pass with 8-bit moments (kernels/cpu/adam8bit.h: span.m_code/v_code one byte per
  // element, span.m_scale/v_scale one float per 256-element block, the range starting on a block
  // boundary of its tensor), the CPU kernels' bits on every backend.
  Status adam8bit_update(const kernels::AdamConstants& constants, const kernels::AdamFormats& formats,
                         const kernels::Adam8bitSpan& span);

 protected:
  // `arena` and `base` are the owning backend's: every device range is checked against them.
  ComputeOps(const Arena& arena, const void* base) : arena_(arena), base_(base) {}

  // ok if this backend runs activation ops in `dt` (fp32 everywhere); else invalid_argument.
  virtual Status check_activation_dtype(DType dt, std::string_view op) const = 0;

  // The queueing half of each op, called only with validated arguments. May still refuse a shape
  // that only this backend cannot run (before queueing); otherwise queues on the compute stream.
  // T-typed pointers are `dt` elements. Parameter meanings as in the public methods, except that
  // every row stride arrives resolved (>= the row's element count, never 0).
  virtual Status queue_matmul_forward(DType dt, void* out, const void* inp, const void* weight, const void* bias,
                                      int64_t N, int64_t C, int64_t OC, int64_t out_stride) = 0;
  virtual Status queue_matmul_backward(DType dt, void* dinp, void* dweight, void* dbias, const void* dout,
                                       const void* inp, const void* weight, int64_t N, int64_t C, int64_t OC,
                                       int64_t dout_stride, GradStore dinp_store, GradStore dweight_store) = 0;
  virtual Status queue_matmul_backward_input_sum(DType dt, void* dinp, std::span<const InputGradTerm> terms,
                                                 int64_t N, int64_t C, GradStore dinp_store) = 0;
  // Not pure: the default composes queue_matmul_forward and queue_gelu_forward (and the backward
  // queue_matmul_backward and queue_gelu_backward), the same bits as the separate ops.
  virtual Status queue_matmul_forward_gelu(DType dt, void* act, void* pre, const void* inp, const void* weight,
                                           const void* bias, int64_t N, int64_t C, int64_t OC);
  virtual Status queue_matmul_backward_input_gelu(DType dt, void* dpre, void* dact, const void* dout,
                                                  const void* weight, const void* pre, int64_t N, int64_t C,
                                                  int64_t OC);
  virtual Status queue_layernorm_forward(DType dt, void* out, float* mean, float* rstd, const void* inp,
                                         const void* weight, const void* bias, int64_t N, int64_t C, float eps) = 0;
  virtual Status queue_layernorm_backward(DType dt, void* dinp, void* dweight, void* dbias, const void* dout,
                                          const void* inp, const void* weight, const float* mean, const float* rstd,
                                          int64_t N, int64_t C) = 0;
  virtual Status queue_rmsnorm_forward(DType dt, void* out, float* rstd, const void* inp, const void* weight,
                                       int64_t N, int64_t C, float eps) = 0;
  virtual Status queue_rmsnorm_backward(DType dt, void* dinp, void* dweight, const void* dout, const void* inp,
                                        const void* weight, const float* rstd, int64_t N, int64_t C) = 0;
  virtual Status queue_gelu_forward(DType dt, void* out, const void* inp, int64_t n) = 0;
  virtual Status queue_gelu_backward(DType dt, void* dinp, const void* inp, const void* dout, int64_t n,
                                     GradStore store) = 0;
  virtual Status queue_swiglu_forward(DType dt, void* out, const void* inp, int64_t N, int64_t H) = 0;
  virtual Status queue_swiglu_backward(DType dt, void* dinp, const void* inp, const void* dout, int64_t N,
                                       int64_t H, GradStore store) = 0;
  virtual Status queue_residual_forward(DType dt, void* out, const void* a, const void* b, int64_t n) = 0;
  virtual Status queue_residual_backward(DType dt, void* da, void* db, const void* dout, int64_t n) = 0;
  virtual Status queue_encoder_forward(DType dt, void* out, const int32_t* tokens, const void* wte, const void* wpe,
                                       int64_t B, int64_t T, int64_t C, int64_t V, int64_t row_begin) = 0;
  virtual Status queue_encoder_backward(DType dt, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                                        int64_t B, int64_t T, int64_t C, int64_t V, int64_t row_begin) = 0;
  virtual Status queue_token_embedding_forward(DType dt, void* out, const int32_t* tokens, const void* wte,
                                               int64_t N, int64_t C, int64_t V, int64_t row_begin) = 0;
  virtual Status queue_token_embedding_backward(DType dt, void* dwte, const void* dout, const int32_t* tokens,
                                                int64_t N, int64_t C, int64_t V, int64_t row_begin) = 0;
  // stride and qkv_stride as the public op's (0: packed), checked.
  virtual Status queue_rope_forward(DType dt, void* out, const void* inp, int64_t B, int64_t T, int64_t NH,
                                    int64_t HS, float theta, int64_t pos_offset, int64_t stride) = 0;
  virtual Status queue_rope_backward(DType dt, void* dinp, const void* dout, int64_t B, int64_t T, int64_t NH,
                                     int64_t HS, float theta, int64_t pos_offset, int64_t stride) = 0;
  virtual Status queue_attention_forward(DType dt, void* out, float* lse, const void* q, const void* k,
                                         const void* v, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                         int64_t qkv_stride) = 0;
  virtual Status queue_attention_backward(DType dt, void* dq, void* dk, void* dv, const void* dout, const void* q,
                                          const void* k, const void* v, const void* out, const float* lse,
                                          int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                          int64_t qkv_stride) = 0;
  virtual Status queue_crossentropy_forward(DType dt, float* lse, float* losses, kernels::CrossEntropyResult* result,
                                            const void* logits, const int32_t* targets, int64_t N, int64_t V,
                                            int64_t logits_stride) = 0;
  virtual Status queue_crossentropy_backward(DType dt, void* dlogits, const void* logits, const float* lse,
                                             const int32_t* targets, float dloss, int64_t N, int64_t V,
                                             int64_t logits_stride) = 0;
  virtual Status queue_crossentropy_backward_inplace(DType dt, void* logits_to_dlogits, const float* lse,
                                                     const int32_t* targets, float dloss, int64_t N, int64_t V,
                                                     int64_t logits_stride) = 0;
  virtual Status queue_crossentropy_forward_backward_inplace(DType dt, float* lse, float* losses,
                                                              kernels::CrossEntropyResult* result,
                                                              void* logits_to_dlogits, const int32_t* targets,
                                                              float dloss, int64_t N, int64_t V,
                                                              int64_t logits_stride);
  virtual Status queue_cast(void* dst, DType to, const void* src, DType from, int64_t n) = 0;
  virtual Status queue_grad_norm_squared(float* sum_squares, const void* grad, DType format, int64_t n) = 0;
  virtual Status queue_grad_check_finite(int32_t* all_finite, const void* grad, DType format, int64_t n) = 0;
  virtual Status queue_accumulate_widened(float* acc, const void* src, DType format, int64_t n, bool first) = 0;
  virtual Status queue_sum_squares_blocks(double* partials, const void* x, DType format, int64_t n) = 0;
  virtual Status queue_adam_update(const kernels::AdamConstants& constants, const kernels::AdamFormats& formats,
                                   const kernels::AdamSpan& span) = 0;
  virtual Status queue_adam8bit_update(const kernels::AdamConstants& constants, const kernels::AdamFormats& formats,
                                       const kernels::Adam8bitSpan& span) = 0;

 private:
  friend class OpArgs;  // runtime/compute_ops.cc: the shared argument checks
  const Arena& arena_;
  const void* const base_;
};

// The kernels' float format for a DType (fp32, bf16, fp16); invalid_argument for integer types.
StatusOr<kernels::FloatFormat> float_format_of(DType dt, std::string_view what);

}  // namespace strata
