// Linear layer GEMMs on the GPU through cuBLAS / cuBLASLt (fp32 accumulation), with the semantics
// of kernels/cpu/ops_matmul.h: out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias, and a backward
// that ACCUMULATES (+=) into dinp, dweight and dbias. T is float, __nv_bfloat16 or __half (inputs
// and outputs in T, CUBLAS_COMPUTE_32F). "fp32 inside, round once": every output element is formed
// in fp32 -- split-K partial sums, the bias, and for the accumulating GEMMs the old value -- and
// rounded to T once. (cuBLAS and cuBLASLt with beta = 1 and a 16-bit C round the product to 16
// bits BEFORE adding C -- measured on an H100 with cuBLAS 13, every Lt algorithm the heuristic
// offered: up to 254 ulp off where the sum cancels -- so neither is used for 16-bit accumulation:
// the product goes to an fp32 workspace tile and one kernel forms round(old + product). fp32 T
// keeps cuBLAS's beta = 1.) fp32 may opt into TF32 tensor cores.
// The caller owns every handle and buffer in GemmContext; each call binds the cuBLAS handle to
// `stream`, host pointer mode and the math mode GemmOptions implies, so a mode left on the handle
// by someone else never changes the arithmetic. Not thread-safe per context (as cuBLAS), and the
// workspaces are stream-ordered scratch: one stream at a time. dbias is a fixed-order column sum,
// or, beside an overwriting 16-bit dweight, cuBLASLt's BGRADB epilogue of that same matmul (its
// sums in fp32, rounded once); everything is deterministic run to run on one GPU. Asynchronous;
// returns the first failure.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace strata::kernels::cuda {

// The outcome of a GEMM call: a cuBLAS(Lt) failure, a CUDA launch failure (bias / add kernels),
// or success.
struct GemmStatus {
  cublasStatus_t cublas = CUBLAS_STATUS_SUCCESS;
  cudaError_t cuda = cudaSuccess;
  bool ok() const { return cublas == CUBLAS_STATUS_SUCCESS && cuda == cudaSuccess; }
};

// allow_tf32 (fp32 GEMMs only; 16-bit ones ignore it): true lets cuBLAS round the inputs to TF32
// (10 mantissa bits) for the tensor cores of sm_80+, still accumulating in fp32
// (CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_TF32_TENSOR_OP_MATH); about 1e-3 relative error. False is
// full fp32 (CUBLAS_COMPUTE_32F with CUBLAS_DEFAULT_MATH, which keeps at least fp32's mantissa
// bits). NVIDIA_TF32_OVERRIDE=0 in the environment makes cuBLAS ignore a TF32 request.
struct GemmOptions {
  bool allow_tf32 = false;
};

// Cached cuBLASLt descriptors and heuristic choices of the biased forward, one entry per (type,
// math, shape, output row stride, pointer alignments), at most kLtPlanCacheEntries (later shapes
// are planned per call).
// Owned by the caller beside its cublasLtHandle_t; destroy it before that handle. Not thread-safe.
inline constexpr int kLtPlanCacheEntries = 64;
class LtPlanCache {
 public:
  LtPlanCache();
  ~LtPlanCache();
  LtPlanCache(const LtPlanCache&) = delete;
  LtPlanCache& operator=(const LtPlanCache&) = delete;

  struct Impl;  // defined in gemm.cu
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Sizes a long-lived owner (runtime/cuda/cuda_compute_ops) gives the workspaces: cuBLASLt's
// recommended 32 MiB for Hopper, and 16 Mi floats (64 MiB) of fp32 product tiles.
inline constexpr size_t kGemmLtWorkspaceBytes = size_t{32} << 20;
inline constexpr size_t kGemmProductFloats = size_t{16} << 20;

// Everything a GEMM call uses beyond its operands; the caller creates it once (never per step).
struct GemmContext {
  cublasHandle_t cublas = nullptr;  // every GEMM without a bias epilogue
  cublasLtHandle_t lt = nullptr;    // the biased forward (CUBLASLT_EPILOGUE_BIAS) and dweight + dbias
                                    // (CUBLASLT_EPILOGUE_BGRADB); null: see below
  void* lt_workspace = nullptr;     // cuBLASLt scratch (256-byte aligned), lt_workspace_bytes of it
  size_t lt_workspace_bytes = 0;
  // fp32 product tiles: 16-bit accumulating GEMMs whose output (m x n) exceeds product_floats run
  // as several GEMMs over column (and if need be row) tiles that fit. Also holds the per-row-block
  // partials of the two-pass dbias sum. Required (non-null, >= 1 float) for 16-bit backward and
  // for a biased forward without cuBLASLt; 256-byte aligned.
  float* product = nullptr;
  size_t product_floats = 0;
  LtPlanCache* plans = nullptr;  // may be null: every biased forward plans afresh
};

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be null. out is overwritten
// and must not alias inp or weight. With a bias: one cuBLASLt matmul whose epilogue adds the bias
// in fp32 before the single rounding; when cuBLASLt is absent (ctx.lt null) or offers no
// algorithm for the shape, the product goes through ctx.product tiles and one kernel adds the bias
// (same single rounding). Without a bias: cublasGemmEx, beta = 0.
// Speed: an OC that is not a whole number of 16-byte vectors of T (GPT-2's V = 50257) leaves cuBLAS
// only its unvectorized "align1" kernels, forward and backward (measured on an H100, N = 16384,
// C = 768: forward 13.2 ms, backward 17.5 ms; with V = 50304: 1.6 ms and 6.9 ms), even with a padded
// leading dimension (measured: the GEMM's own dimension decides). So the caller pads the row
// stride -- out_stride, the row stride of out in elements (0 means OC, else >= OC; columns
// [OC, out_stride) of each row are never written) -- and when that stride, C and the pointers keep
// 16-byte vectors, the GEMMs here run over the first aligned_rows<T>(OC) rows of the weight
// (50256) through cuBLAS and the tail rows (fewer than a vector: 1 for GPT-2) through strata's own
// kernels (tail_forward_kernel; in the backward a tail term folded into the fp32 product tile and
// fixed-order column sums): every cuBLAS kernel vectorized, every element still formed in fp32 and
// rounded once. Without such a stride the whole OC goes to cuBLAS as before.
template <typename T>
GemmStatus matmul_forward(const GemmContext& ctx, T* out, const T* inp, const T* weight, const T* bias, int64_t N,
                          int64_t C, int64_t OC, GemmOptions options, cudaStream_t stream, int64_t out_stride = 0);

// How matmul_backward stores the gradients it computes. Adding (the default): grad += value, the
// sum with the old value formed in fp32 and rounded once -- for 16-bit T through the fp32 product
// tiles and a second pass (finish_tile_kernel), since cuBLAS rounds the product before adding.
// Overwriting: grad = value rounded once, the old contents never read: for 16-bit T one cuBLAS
// GEMM with beta = 0 straight into the gradient, no tile and no second pass. Overwriting gives what
// adding into a zeroed gradient gives (an exact zero's sign aside: -0 + +0 is +0). dbias follows
// dweight's choice.
struct GradStores {
  bool overwrite_dinp = false;
  bool overwrite_dweight = false;
};

// Given dout (N, OC): dinp (N, C) += dout @ weight; dweight (OC, C) += dout^T @ inp;
// dbias (OC) += sum_n dout[n] (or = each, by `stores`). Each gradient may be null (not computed).
// Each value is formed in fp32 and rounded once to T. dout_stride: dout's row stride in elements
// (0 means OC, else >= OC; its padding is never read), dout's leading dimension in both GEMMs; a
// padded stride splits OC as the forward does (see matmul_forward). When dweight and dbias are
// both overwritten, T is 16-bit, nothing is split and cuBLASLt offers an algorithm, one matmul
// with the BGRADB epilogue forms both (dbias's sums in that kernel's order, not the column sums').
template <typename T>
GemmStatus matmul_backward(const GemmContext& ctx, T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                           const T* weight, int64_t N, int64_t C, int64_t OC, GemmOptions options,
                           cudaStream_t stream, int64_t dout_stride = 0, GradStores stores = {});

// The rows of an OC-row weight whose GEMMs go through cuBLAS when the caller's row stride allows
// the split (see matmul_forward): OC rounded down to a whole number of 16-byte vectors of T.
template <typename T>
constexpr int64_t aligned_rows(int64_t OC) {
  constexpr int64_t kVector = 16 / static_cast<int64_t>(sizeof(T));
  return OC / kVector * kVector;
}

// One term of matmul_backward_input_sum: dout (N, OC) @ weight (OC, C); dout's rows start
// dout_stride elements apart (0 means OC, else >= OC).
template <typename T>
struct DinpTerm {
  const T* dout = nullptr;
  const T* weight = nullptr;
  int64_t OC = 0;
  int64_t dout_stride = 0;
};

// dinp (N, C) += (or = when `overwrite`) the sum over `terms` of dout_t @ weight_t, each element
// formed in fp32 and rounded once to T: for 16-bit T the terms' GEMMs add into one fp32 product
// tile (the first with beta = 0, the rest with beta = 1 into fp32) and one pass forms round(old +
// sum), or round(sum); column tiles when (C x N) exceeds ctx.product_floats. fp32 T: cuBLAS with
// beta = 1 straight into dinp. The projections that share an input (q, k, v) get one rounding
// instead of one per projection, and one pass over dinp instead of one per accumulating term.
// Adjacent terms -- the next one's dout the columns right after this one's in the same rows, its
// weight the rows right after this one's -- are one GEMM over their joined K (the fused q, k, v
// projection's gradient, column blocks of one (N, C + 2 KV) tensor: one GEMM straight into dinp,
// no product tile), so the sum's grouping, and its last bits, follow the layout.
template <typename T>
GemmStatus matmul_backward_input_sum(const GemmContext& ctx, T* dinp, std::span<const DinpTerm<T>> terms, int64_t N,
                                     int64_t C, GemmOptions options, cudaStream_t stream, bool overwrite);

// The GPT-2 MLP's fused GELU, for 16-bit T through cuBLASLt's epilogues (fp32 T: never fused).
// act (N, OC) = gelu(inp (N, C) @ weight (OC, C)^T + bias) and pre (N, OC) = that pre-activation,
// each element formed in fp32 and rounded once: GELU_AUX_BIAS applies cuBLASLt's tanh form of GELU
// to the unrounded fp32 value (the unfused path, gelu_forward, to the rounded pre: the two differ
// in the last bit of some elements). bias not null; act and pre do not alias.
// *fused = false (and success) when it does not apply -- fp32 T, no cuBLASLt, an empty shape, or
// no algorithm for the shape -- and nothing is written: the caller forms them apart.
template <typename T>
GemmStatus matmul_forward_gelu(const GemmContext& ctx, T* act, T* pre, const T* inp, const T* weight, const T* bias,
                               int64_t N, int64_t C, int64_t OC, GemmOptions options, cudaStream_t stream,
                               bool* fused);
// dpre (N, C) = gelu'(pre) * (dout (N, OC) @ weight (OC, C)), overwritten, the product and the
// GELU derivative (cuBLASLt's DGELU epilogue, of the tanh form) in fp32, rounded once (unfused:
// the product is rounded, then gelu_backward rounds again). *fused as above.
template <typename T>
GemmStatus matmul_backward_input_dgelu(const GemmContext& ctx, T* dpre, const T* dout, const T* weight, const T* pre,
                                       int64_t N, int64_t C, int64_t OC, GemmOptions options, cudaStream_t stream,
                                       bool* fused);

}  // namespace strata::kernels::cuda
