// Linear-layer GEMMs (contract in gemm.cuh). cuBLAS is column-major: a row-major (R, K) matrix is
// its column-major transpose (K, R) with leading dimension K (or its row stride, for a padded out /
// dout: ldo / ldd below), so with ^T marking that view:
//   forward  out^T (OC, N)  = weight^T^T (OC, C) . inp^T (C, N)   -> gemm(T, N, m=OC, n=N, k=C)
//   dinp     dinp^T (C, N) += weight^T (C, OC) . dout^T (OC, N)   -> gemm(N, N, m=C,  n=N, k=OC)
//   dweight  dweight^T (C, OC) += inp^T (C, N) . dout (N, OC)     -> gemm(N, T, m=C,  n=OC, k=N)
// The biased forward is one cuBLASLt matmul with the bias epilogue (planned once per shape); so is
// an overwriting 16-bit dweight with its dbias (the BGRADB epilogue: dout's column sums over the N
// rows, in the same cublasLtMatmul call -- on an H200 cuBLASLt ran them as its own reduction
// kernel beside the GEMM, still faster than the column sums). A
// 16-bit accumulating GEMM writes its fp32 product, tile by tile, to ctx.product (beta = 0) and
// finish_tile_kernel forms round(old + product) in place; the Lt-less biased forward uses the same
// tiles with round(bias + product). An overwriting GEMM writes T straight (beta = 0). dbias is a
// fixed-order (two-pass when it pays) column sum. A padded row stride splits OC into the aligned
// rows (cuBLAS) and a tail of fewer than 16 bytes of rows: the tail's forward is
// tail_forward_kernel, its dinp term is added to the product tile before the one rounding
// (DinpTail), its dweight rows are fixed-order column sums (DweightTail).
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/gemm.cuh"

namespace strata::kernels::cuda {

// --- the cuBLASLt plan cache -----------------------------------------------------------------------
// D (m, n; leading dimension ldd) = op_a(A) op_b(B) with `epilogue`, column-major as cuBLAS. The
// defaults are the biased forward's: A = weight^T stored (k, m), B = inp^T stored (k, n).
struct LtPlanKey {
  cudaDataType_t type;
  bool tf32;
  int64_t m, n, k;
  int64_t ldd;  // the output's leading dimension (>= m)
  uint32_t align_a, align_b, align_d, align_bias;
  cublasOperation_t op_a = CUBLAS_OP_T, op_b = CUBLAS_OP_N;
  int64_t lda = 0, ldb = 0;  // 0: k (the biased forward's packed operands)
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  bool operator==(const LtPlanKey&) const = default;
};

// Descriptors of one cuBLASLt matmul shape (a biased forward, or a dweight with its bias gradient)
// and the algorithm the heuristic picked for it. The bias pointer is set on `desc` at each call.
struct LtPlan {
  LtPlanKey key{};
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;

  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    // Destroy failures are not reportable from here; they only leak host memory.
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

struct LtPlanCache::Impl {
  std::vector<std::unique_ptr<LtPlan>> plans;  // at most kLtPlanCacheEntries
};

LtPlanCache::LtPlanCache() : impl_(std::make_unique<Impl>()) {}
LtPlanCache::~LtPlanCache() = default;

namespace {

template <typename T>
constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return CUDA_R_16BF;
  if constexpr (std::is_same_v<T, __half>) return CUDA_R_16F;
}

template <typename T>
constexpr bool is_16bit() {
  return !std::is_same_v<T, float>;
}

template <typename T>
cublasComputeType_t compute_type(const GemmOptions& options) {
  if constexpr (std::is_same_v<T, float>) {
    if (options.allow_tf32) return CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  return CUBLAS_COMPUTE_32F;
}

// C (m, n) = alpha op(A) op(B) + beta C, all column-major; A and B in T, C in `c_type` (T, or
// CUDA_R_32F for a product tile).
template <typename T>
cublasStatus_t gemm(cublasHandle_t handle, cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n,
                    int64_t k, const T* A, int64_t lda, const T* B, int64_t ldb, float beta, void* Cm,
                    cudaDataType_t c_type, int64_t ldc, const GemmOptions& options) {
  const float alpha = 1.0f;
  return cublasGemmEx_64(handle, op_a, op_b, m, n, k, &alpha, A, data_type<T>(), lda, B, data_type<T>(), ldb, &beta,
                         Cm, c_type, ldc, compute_type<T>(options), CUBLAS_GEMM_DEFAULT);
}

// TF32 only when asked for an fp32 GEMM; reductions always in the fp32 accumulator, never in a
// 16-bit output type (the contract's "fp32 inside, round once").
template <typename T>
cublasMath_t math_mode(const GemmOptions& options) {
  const bool tf32 = std::is_same_v<T, float> && options.allow_tf32;
  return static_cast<cublasMath_t>((tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                                   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
}

template <typename T>
cublasStatus_t bind(cublasHandle_t handle, const GemmOptions& options, cudaStream_t stream) {
  if (cublasStatus_t st = cublasSetStream(handle, stream); st != CUBLAS_STATUS_SUCCESS) return st;
  if (cublasStatus_t st = cublasSetMathMode(handle, math_mode<T>(options)); st != CUBLAS_STATUS_SUCCESS) return st;
  return cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST);
}

bool valid_shape(int64_t N, int64_t C, int64_t OC, int64_t ld) { return N >= 0 && C >= 0 && OC >= 0 && ld >= OC; }

// The row stride of a (rows, OC) row-major operand: `stride`, or OC when it is 0.
int64_t row_stride(int64_t OC, int64_t stride) { return stride == 0 ? OC : stride; }

// --- fp32 product tiles --------------------------------------------------------------------------
// A tile (rows, cols) of a column-major output `out` (leading dimension ldc) whose fp32 product
// sits in `product` (leading dimension ldp >= rows). kAccumulate: out = round(out + product);
// otherwise out = round(bias[row] + product), or round(product) when bias is null (bias indexed by
// the tile's row). Grid: x strides over rows (coalesced), y over columns; no index divisions.
// No tail: the product tile is the whole value (never called).
struct NoTail {};

// The tail's part of dinp^T (C, N) at (c, n): sum over the tail rows j of dout[n, j] w[j, c], in
// j order (dout at the tail's first column, w at its first row).
template <typename T>
struct DinpTail {
  const T* dout;
  int64_t ldd;
  const T* w;
  int64_t C;
  int rows;
  __device__ float operator()(int64_t c, int64_t n) const {
    float sum = 0.0f;
    for (int j = 0; j < rows; ++j) sum += detail::load(dout + n * ldd + j) * detail::load(w + j * C + c);
    return sum;
  }
};

// Row tail of dweight as column sums: dweight[j, c] = sum_n dout[n, j] inp[n, c], the (rows, C)
// tail block seen as rows * C columns cc = j * C + c (dout at the tail's first column).
template <typename T>
struct DweightTail {
  const T* dout;
  int64_t ldd;
  const T* inp;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t cc) const {
    const int64_t j = cc / C, c = cc - j * C;
    return detail::load(dout + n * ldd + j) * detail::load(inp + n * C + c);
  }
};

// `tail(row, col)` (global indices of the GEMM's output, row r0 + r and column c0 + c) is added to
// the product before the old value or the bias: out = round(old + (product + tail)).
template <typename T, bool kAccumulate, typename Tail>
__global__ void finish_tile_kernel(T* out, int64_t ldc, const float* product, int64_t ldp, int64_t rows,
                                   int64_t cols, const T* bias, Tail tail, int64_t r0, int64_t c0) {
  const int64_t row_stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = blockIdx.y; c < cols; c += gridDim.y) {
    T* out_col = out + c * ldc;
    const float* product_col = product + c * ldp;
    for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += row_stride) {
      float p = product_col[r];
      if constexpr (!std::is_same_v<Tail, NoTail>) p += tail(r0 + r, c0 + c);
      if constexpr (kAccumulate) {
        detail::store(out_col + r, detail::load(out_col + r) + p);
      } else {
        detail::store(out_col + r, bias != nullptr ? detail::load(bias + r) + p : p);
      }
    }
  }
}

inline constexpr int64_t kFinishMaxGridY = 65535;

// Cm (m, n, ldc) = round(Cm + value + tail) for kAccumulate, or round(bias + value + tail)
// otherwise (bias may be null; the tail term is NoTail's 0 unless given), through product tiles of
// at most ctx.product_floats: columns [c0, c0 + cols) and, only when one column is larger than the
// workspace, rows [r0, r0 + rows). A tile's columns are padded to a multiple of 4 floats (16
// bytes), so the product's leading dimension never limits cuBLAS to unvectorized kernels. Each
// tile: `fill(r0, rows, c0, cols, ldp)` writes the tile's fp32 value at ctx.product (leading
// dimension ldp) and returns its status, then one finish_tile_kernel.
template <typename T, bool kAccumulate, typename Tail, typename Fill>
GemmStatus via_product_tiles(const GemmContext& ctx, int64_t m, int64_t n, T* Cm, int64_t ldc, const T* bias,
                             cudaStream_t stream, Tail tail, Fill fill) {
  GemmStatus status;
  if (ctx.product == nullptr || ctx.product_floats == 0) {
    status.cublas = CUBLAS_STATUS_NOT_INITIALIZED;
    return status;
  }
  const int64_t capacity = static_cast<int64_t>(ctx.product_floats);
  const int64_t tile_rows = m < capacity ? m : capacity;
  const int64_t padded = (tile_rows + 3) / 4 * 4;
  const int64_t ldp = padded <= capacity ? padded : tile_rows;
  const int64_t max_cols = capacity / ldp;
  const int64_t tile_cols = n < max_cols ? n : max_cols;
  for (int64_t c0 = 0; c0 < n; c0 += tile_cols) {
    const int64_t cols = n - c0 < tile_cols ? n - c0 : tile_cols;
    for (int64_t r0 = 0; r0 < m; r0 += tile_rows) {
      const int64_t rows = m - r0 < tile_rows ? m - r0 : tile_rows;
      if (status = fill(r0, rows, c0, cols, ldp); !status.ok()) return status;
      const int64_t row_blocks = (rows + detail::kBlock - 1) / detail::kBlock;
      const dim3 grid(static_cast<unsigned>(row_blocks < detail::kMaxGridX ? row_blocks : detail::kMaxGridX),
                      static_cast<unsigned>(cols < kFinishMaxGridY ? cols : kFinishMaxGridY));
      finish_tile_kernel<T, kAccumulate, Tail><<<grid, detail::kBlock, 0, stream>>>(
          Cm + c0 * ldc + r0, ldc, ctx.product, ldp, rows, cols, bias != nullptr ? bias + r0 : nullptr, tail, r0, c0);
      if (status.cuda = cudaGetLastError(); !status.ok()) return status;
    }
  }
  return status;
}

// value = op(A) op(B): one GEMM per tile with beta = 0 into fp32 (k = 0: the tile zeroed).
template <typename T, bool kAccumulate, typename Tail = NoTail>
GemmStatus gemm_via_product(const GemmContext& ctx, cublasOperation_t op_a, cublasOperation_t op_b, int64_t m,
                            int64_t n, int64_t k, const T* A, int64_t lda, const T* B, int64_t ldb, T* Cm, int64_t ldc,
                            const T* bias, const GemmOptions& options, cudaStream_t stream, Tail tail = {}) {
  return via_product_tiles<T, kAccumulate>(
      ctx, m, n, Cm, ldc, bias, stream, tail, [&](int64_t r0, int64_t rows, int64_t c0, int64_t cols, int64_t ldp) {
        GemmStatus st;
        // Column c of op(B) starts at B + c * ldb (op N) or B + c (op T); row r of op(A) at A + r
        // (op N) or A + r * lda (op T).
        const T* b_tile = op_b == CUBLAS_OP_N ? B + c0 * ldb : B + c0;
        const T* a_tile = op_a == CUBLAS_OP_N ? A + r0 : A + r0 * lda;
        if (k > 0) {
          st.cublas = gemm<T>(ctx.cublas, op_a, op_b, rows, cols, k, a_tile, lda, b_tile, ldb, 0.0f, ctx.product,
                              CUDA_R_32F, ldp, options);
        } else {  // an empty sum (the whole OC is a tail): the tile is zero
          st.cuda = cudaMemset2DAsync(ctx.product, ldp * sizeof(float), 0, rows * sizeof(float), cols, stream);
        }
        return st;
      });
}

// Cm (m, n) += op(A) op(B) + tail (or = when `overwrite`), each element rounded once to T. One
// cuBLAS GEMM when it can round once itself -- overwriting (beta = 0), or adding in fp32 (beta =
// 1) -- and no tail is given; otherwise product tiles (16-bit adding: cuBLAS would round the
// product before the add; a tail: it joins the product before the rounding).
template <typename T, typename Tail = NoTail>
GemmStatus gemm_store(const GemmContext& ctx, bool overwrite, cublasOperation_t op_a, cublasOperation_t op_b,
                      int64_t m, int64_t n, int64_t k, const T* A, int64_t lda, const T* B, int64_t ldb, T* Cm,
                      int64_t ldc, const GemmOptions& options, cudaStream_t stream, Tail tail = {}) {
  constexpr bool kTail = !std::is_same_v<Tail, NoTail>;
  if (!kTail && (overwrite || !is_16bit<T>())) {
    GemmStatus status;
    status.cublas = gemm<T>(ctx.cublas, op_a, op_b, m, n, k, A, lda, B, ldb, overwrite ? 0.0f : 1.0f, Cm,
                            data_type<T>(), ldc, options);
    return status;
  }
  if (overwrite) {
    return gemm_via_product<T, false>(ctx, op_a, op_b, m, n, k, A, lda, B, ldb, Cm, ldc, nullptr, options, stream,
                                      tail);
  }
  return gemm_via_product<T, true>(ctx, op_a, op_b, m, n, k, A, lda, B, ldb, Cm, ldc, nullptr, options, stream, tail);
}

// --- the biased forward through cuBLASLt -----------------------------------------------------------
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 16;  // the largest alignment cuBLASLt asks about
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

#define STRATA_LT_TRY(call)                                       \
  do {                                                            \
    if (const cublasStatus_t st_ = (call); st_ != CUBLAS_STATUS_SUCCESS) return st_; \
  } while (0)

template <typename T>
cublasStatus_t set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  return cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value));
}

// The epilogues with an auxiliary matrix (the GELU's input, written by GELU_AUX_BIAS, read by
// DGELU), laid out as D.
bool uses_aux(cublasLtEpilogue_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epilogue == CUBLASLT_EPILOGUE_DGELU;
}

// Builds the descriptors of `key` (the forward: out^T (m, n) = weight^T^T . inp^T + bias; the
// dweight: dweight^T (m, n) = inp^T . dout with dbias, see the top of this file) and asks the
// heuristic for one algorithm that reduces in fp32 (no reduction in the output type, none "in
// place" in the output buffer) and fits the workspace. plan.has_algo stays false when none does.
cublasStatus_t build_plan(const GemmContext& ctx, const LtPlanKey& key, cublasComputeType_t compute, LtPlan& plan) {
  plan.key = key;
  STRATA_LT_TRY(cublasLtMatmulDescCreate(&plan.desc, compute, CUDA_R_32F));
  STRATA_LT_TRY(set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(key.op_a)));
  STRATA_LT_TRY(set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(key.op_b)));
  STRATA_LT_TRY(set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(key.epilogue)));
  STRATA_LT_TRY(set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(key.type)));
  if (uses_aux(key.epilogue)) {  // the pre-activation, laid out as D
    STRATA_LT_TRY(set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, key.ldd));
  }
  // A as stored: (k, m) when transposed (the forward's weight^T), else (m, k) (the dweight's inp^T);
  // B: (k, n), or (n, k) when transposed (the dweight's dout^T); D: (m, n) with ld key.ldd (m, or
  // out's padded row stride).
  const bool ta = key.op_a == CUBLAS_OP_T, tb = key.op_b == CUBLAS_OP_T;
  const int64_t lda = key.lda != 0 ? key.lda : key.k, ldb = key.ldb != 0 ? key.ldb : key.k;
  STRATA_LT_TRY(cublasLtMatrixLayoutCreate(&plan.a, key.type, ta ? key.k : key.m, ta ? key.m : key.k, lda));
  STRATA_LT_TRY(cublasLtMatrixLayoutCreate(&plan.b, key.type, tb ? key.n : key.k, tb ? key.k : key.n, ldb));
  STRATA_LT_TRY(cublasLtMatrixLayoutCreate(&plan.d, key.type, key.m, key.n, key.ldd));

  cublasLtMatmulPreference_t pref = nullptr;
  STRATA_LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = ctx.lt_workspace != nullptr ? ctx.lt_workspace_bytes : 0;
  const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;  // NONE (0) is always allowed
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  const auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& value) {
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value));
  };
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace);
  set_pref(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(ctx.lt, plan.desc, plan.a, plan.b, plan.d, plan.d, pref, 1, &result, &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  // No algorithm for this shape is not an error: the caller takes the product-tile path.
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return CUBLAS_STATUS_SUCCESS;
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    plan.algo = result.algo;
    plan.has_algo = true;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// The plan for `key`: from ctx.plans, else built (and kept there while it has room) in `scratch`.
cublasStatus_t find_plan(const GemmContext& ctx, const LtPlanKey& key, cublasComputeType_t compute,
                         std::unique_ptr<LtPlan>& scratch, LtPlan** plan) {
  std::vector<std::unique_ptr<LtPlan>>* cached = ctx.plans != nullptr ? &ctx.plans->impl().plans : nullptr;
  if (cached != nullptr) {
    for (const std::unique_ptr<LtPlan>& p : *cached) {
      if (p->key == key) {
        *plan = p.get();
        return CUBLAS_STATUS_SUCCESS;
      }
    }
  }
  auto fresh = std::make_unique<LtPlan>();
  STRATA_LT_TRY(build_plan(ctx, key, compute, *fresh));
  *plan = fresh.get();
  if (cached != nullptr && cached->size() < static_cast<size_t>(kLtPlanCacheEntries)) {
    cached->push_back(std::move(fresh));
  } else {
    scratch = std::move(fresh);
  }
  return CUBLAS_STATUS_SUCCESS;
}

// D = op_a(A) op_b(B) with key's epilogue and `bias` (the bias it adds, or the bias gradient it
// writes) and `aux` (the GELU epilogues' pre-activation), beta = 0, through cuBLASLt; *done = false
// (and success) when cuBLASLt has no algorithm for the shape, so the caller falls back.
template <typename T>
cublasStatus_t lt_matmul(const GemmContext& ctx, const LtPlanKey& key, const GemmOptions& options, const T* A,
                         const T* B, T* D, const void* bias, cudaStream_t stream, bool* done,
                         const void* aux = nullptr) {
  *done = false;
  std::unique_ptr<LtPlan> uncached;
  LtPlan* plan = nullptr;
  STRATA_LT_TRY(find_plan(ctx, key, compute_type<T>(options), uncached, &plan));
  if (!plan->has_algo) return CUBLAS_STATUS_SUCCESS;
  STRATA_LT_TRY(set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias));
  if (uses_aux(key.epilogue)) STRATA_LT_TRY(set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux));
  const float alpha = 1.0f, beta = 0.0f;
  const uint64_t workspace = ctx.lt_workspace != nullptr ? ctx.lt_workspace_bytes : 0;
  const cublasStatus_t st = cublasLtMatmul(ctx.lt, plan->desc, &alpha, A, plan->a, B, plan->b, &beta, D, plan->d, D,
                                           plan->d, &plan->algo, ctx.lt_workspace, workspace, stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return CUBLAS_STATUS_SUCCESS;  // e.g. a bias alignment it rejects
  if (st == CUBLAS_STATUS_SUCCESS) *done = true;
  return st;
}

// out = weight . inp + bias (the BIAS epilogue).
template <typename T>
cublasStatus_t lt_biased_forward(const GemmContext& ctx, T* out, const T* inp, const T* weight, const T* bias,
                                 int64_t N, int64_t C, int64_t OC, int64_t ldo, const GemmOptions& options,
                                 cudaStream_t stream, bool* done) {
  const LtPlanKey key{data_type<T>(),       std::is_same_v<T, float> && options.allow_tf32,
                      OC,                   N,
                      C,                    ldo,
                      alignment_of(weight), alignment_of(inp),
                      alignment_of(out),    alignment_of(bias)};
  return lt_matmul<T>(ctx, key, options, weight, inp, out, bias, stream, done);
}

// dweight^T (C, OC) = inp^T (C, N) . dout (N, OC) and dbias (OC) = dout's column sums over the N
// rows, both overwritten, in one matmul (the BGRADB epilogue reduces op(B) = dout over k = N).
template <typename T>
cublasStatus_t lt_dweight_bias_grad(const GemmContext& ctx, T* dweight, T* dbias, const T* inp, const T* dout,
                                    int64_t N, int64_t C, int64_t OC, int64_t ldd, const GemmOptions& options,
                                    cudaStream_t stream, bool* done) {
  LtPlanKey key{data_type<T>(),     std::is_same_v<T, float> && options.allow_tf32,
                C,                  OC,
                N,                  C,
                alignment_of(inp),  alignment_of(dout),
                alignment_of(dweight), alignment_of(dbias)};
  key.op_a = CUBLAS_OP_N;
  key.op_b = CUBLAS_OP_T;
  key.lda = C;
  key.ldb = ldd;
  key.epilogue = CUBLASLT_EPILOGUE_BGRADB;
  return lt_matmul<T>(ctx, key, options, inp, dout, dweight, dbias, stream, done);
}

// act = gelu(weight . inp + bias) and pre = weight . inp + bias, both (OC, N) column-major with
// leading dimension OC (the GELU_AUX_BIAS epilogue: GELU on the fp32 value, pre its aux output).
template <typename T>
cublasStatus_t lt_forward_gelu(const GemmContext& ctx, T* act, T* pre, const T* inp, const T* weight, const T* bias,
                               int64_t N, int64_t C, int64_t OC, const GemmOptions& options, cudaStream_t stream,
                               bool* done) {
  LtPlanKey key{data_type<T>(),       false,
                OC,                   N,
                C,                    OC,
                alignment_of(weight), alignment_of(inp),
                std::min(alignment_of(act), alignment_of(pre)), alignment_of(bias)};
  key.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  return lt_matmul<T>(ctx, key, options, weight, inp, act, bias, stream, done, pre);
}

// dpre^T (C, N) = gelu'(pre^T) * (weight^T (C, OC) . dout^T (OC, N)): weight (OC, C) row-major is
// (C, OC) column-major, dout (N, OC) is (OC, N); the DGELU epilogue reads pre, laid out as dpre.
template <typename T>
cublasStatus_t lt_input_dgelu(const GemmContext& ctx, T* dpre, const T* dout, const T* weight, const T* pre,
                              int64_t N, int64_t C, int64_t OC, const GemmOptions& options, cudaStream_t stream,
                              bool* done) {
  LtPlanKey key{data_type<T>(),       false,
                C,                    N,
                OC,                   C,
                alignment_of(weight), alignment_of(dout),
                std::min(alignment_of(dpre), alignment_of(pre)), 16};
  key.op_a = CUBLAS_OP_N;
  key.op_b = CUBLAS_OP_N;
  key.lda = C;
  key.ldb = OC;
  key.epilogue = CUBLASLT_EPILOGUE_DGELU;
  return lt_matmul<T>(ctx, key, options, weight, dout, dpre, nullptr, stream, done, pre);
}

#undef STRATA_LT_TRY

// out (N, OC; row stride ldo) = bias in every row: the value of a biased GEMM with an empty sum
// (C == 0). The padding columns are not written.
template <typename T>
__global__ void broadcast_bias_kernel(T* out, const T* bias, int64_t N, int64_t OC, int64_t ldo) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N * OC; i += stride) {
    out[i / OC * ldo + i % OC] = bias[i % OC];
  }
}

// The OC split (gemm.cuh): tails have fewer than kMaxTailRows rows.
inline constexpr int kMaxTailRows = 8;
inline constexpr int kTailWarps = 8;  // rows n per block of tail_forward_kernel

// out[n, j] (row stride ldo) = round(bias[j] + sum_c inp[n, c] w[j, c]) for j < rows (the tail's
// out, w and bias start at its first row): one warp per row n, each lane summing its columns
// c = lane, lane + 32, ... in order, then the xor butterfly: a fixed order.
template <typename T>
__global__ void __launch_bounds__(32 * kTailWarps) tail_forward_kernel(T* out, int64_t ldo, const T* inp,
                                                                       const T* w, const T* bias, int64_t N,
                                                                       int64_t C, int rows) {
  const int lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kTailWarps + threadIdx.x / 32;
  if (n >= N) return;  // n is the same for the whole warp: it leaves together
  float acc[kMaxTailRows];
#pragma unroll
  for (int j = 0; j < kMaxTailRows; ++j) acc[j] = 0.0f;
  const T* x = inp + n * C;
  for (int64_t c = lane; c < C; c += 32) {
    const float xv = detail::load(x + c);
#pragma unroll
    for (int j = 0; j < kMaxTailRows; ++j) {
      if (j < rows) acc[j] += xv * detail::load(w + j * C + c);
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxTailRows; ++j) {
    if (j >= rows) break;
    const float sum = detail::warp_sum(acc[j]);
    if (lane == 0) detail::store(out + n * ldo + j, bias != nullptr ? detail::load(bias + j) + sum : sum);
  }
}

// The rows of OC that go through cuBLAS for a caller's row stride `ld` (of out or dout): all of
// them, unless OC is not a whole number of 16-byte vectors while ld, C and every pointer keep such
// vectors (then aligned_rows(OC), possibly 0: the rest is the tail).
template <typename T>
int64_t blas_rows(int64_t OC, int64_t ld, int64_t C, std::initializer_list<const void*> pointers) {
  const int64_t main = aligned_rows<T>(OC);
  if (main == OC || ld != aligned_rows<T>(ld) || C != aligned_rows<T>(C)) return OC;
  for (const void* p : pointers) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return OC;
  }
  return main;
}

template <typename T>
struct RowValue {
  const T* data;
  int64_t ld;  // row stride
  __device__ float operator()(int64_t n, int64_t c) const { return detail::load(data + n * ld + c); }
};

// out (N, OC) = inp . weight^T + bias through cuBLAS(Lt): the whole forward when nothing is split.
template <typename T>
GemmStatus forward_through_blas(const GemmContext& ctx, T* out, const T* inp, const T* weight, const T* bias,
                                int64_t N, int64_t C, int64_t OC, int64_t ldo, const GemmOptions& options,
                                cudaStream_t stream) {
  GemmStatus status;
  if (bias == nullptr) {
    status.cublas = gemm<T>(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, 0.0f, out,
                            data_type<T>(), ldo, options);
    return status;
  }
  if (ctx.lt != nullptr) {
    bool done = false;
    status.cublas = lt_biased_forward(ctx, out, inp, weight, bias, N, C, OC, ldo, options, stream, &done);
    if (!status.ok() || done) return status;
  }
  return gemm_via_product<T, false>(ctx, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, out, ldo, bias,
                                    options, stream);
}

}  // namespace

template <typename T>
GemmStatus matmul_forward(const GemmContext& ctx, T* out, const T* inp, const T* weight, const T* bias, int64_t N,
                          int64_t C, int64_t OC, GemmOptions options, cudaStream_t stream, int64_t out_stride) {
  GemmStatus status;
  const int64_t ldo = row_stride(OC, out_stride);
  if (!valid_shape(N, C, OC, ldo)) {
    status.cublas = CUBLAS_STATUS_INVALID_VALUE;
    return status;
  }
  if (N == 0 || OC == 0) return status;
  if (C == 0) {  // an empty sum: out = bias, or 0
    if (bias != nullptr) {
      broadcast_bias_kernel<<<detail::grid_for(N * OC), detail::kBlock, 0, stream>>>(out, bias, N, OC, ldo);
      status.cuda = cudaGetLastError();
    } else {
      status.cuda = cudaMemset2DAsync(out, sizeof(T) * ldo, 0, sizeof(T) * OC, N, stream);
    }
    return status;
  }
  if (status.cublas = bind<T>(ctx.cublas, options, stream); !status.ok()) return status;
  const int64_t main = blas_rows<T>(OC, ldo, C, {out, inp, weight, bias});
  if (main > 0) {
    status = forward_through_blas(ctx, out, inp, weight, bias, N, C, main, ldo, options, stream);
    if (!status.ok() || main == OC) return status;
  }
  const int64_t blocks = (N + kTailWarps - 1) / kTailWarps;
  if (blocks > 0x7fffffff) {
    status.cuda = cudaErrorInvalidValue;
    return status;
  }
  tail_forward_kernel<<<static_cast<unsigned>(blocks), 32 * kTailWarps, 0, stream>>>(
      out + main, ldo, inp, weight + main * C, bias != nullptr ? bias + main : nullptr, N, C,
      static_cast<int>(OC - main));
  status.cuda = cudaGetLastError();
  return status;
}

template <typename T>
GemmStatus matmul_backward(const GemmContext& ctx, T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                           const T* weight, int64_t N, int64_t C, int64_t OC, GemmOptions options,
                           cudaStream_t stream, int64_t dout_stride, GradStores stores) {
  GemmStatus status;
  const int64_t ldd = row_stride(OC, dout_stride);
  if (!valid_shape(N, C, OC, ldd)) {
    status.cublas = CUBLAS_STATUS_INVALID_VALUE;
    return status;
  }
  if (N == 0 || OC == 0) {  // every gradient term is an empty sum
    if (N == 0 && OC > 0 && C > 0 && stores.overwrite_dweight && dweight != nullptr) {
      status.cuda = cudaMemsetAsync(dweight, 0, sizeof(T) * OC * C, stream);
      if (!status.ok()) return status;
    }
    if (N == 0 && OC > 0 && stores.overwrite_dweight && dbias != nullptr) {
      status.cuda = cudaMemsetAsync(dbias, 0, sizeof(T) * OC, stream);
      if (!status.ok()) return status;
    }
    if (OC == 0 && N > 0 && C > 0 && stores.overwrite_dinp && dinp != nullptr) {
      status.cuda = cudaMemsetAsync(dinp, 0, sizeof(T) * N * C, stream);
    }
    return status;
  }
  if (status.cublas = bind<T>(ctx.cublas, options, stream); !status.ok()) return status;
  const int64_t main = blas_rows<T>(OC, ldd, C, {dout, inp, weight, dinp, dweight});
  if (dinp != nullptr && C > 0) {
    if (main == OC) {
      status = gemm_store<T>(ctx, stores.overwrite_dinp, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, ldd,
                             dinp, C, options, stream);
    } else {  // the tail rows' term joins the product tile before the one rounding
      const DinpTail<T> tail{dout + main, ldd, weight + main * C, C, static_cast<int>(OC - main)};
      status = gemm_store<T>(ctx, stores.overwrite_dinp, CUBLAS_OP_N, CUBLAS_OP_N, C, N, main, weight, C, dout, ldd,
                             dinp, C, options, stream, tail);
    }
    if (!status.ok()) return status;
  }
  // An overwriting 16-bit dweight with a dbias and no tail: one cuBLASLt matmul forms both.
  bool dbias_done = false;
  if constexpr (is_16bit<T>()) {
    if (dweight != nullptr && dbias != nullptr && C > 0 && main == OC && stores.overwrite_dweight &&
        ctx.lt != nullptr) {
      status.cublas = lt_dweight_bias_grad(ctx, dweight, dbias, inp, dout, N, C, OC, ldd, options, stream, &dbias_done);
      if (!status.ok()) return status;
    }
  }
  if (dweight != nullptr && C > 0 && !dbias_done) {
    if (main > 0) {
      status = gemm_store<T>(ctx, stores.overwrite_dweight, CUBLAS_OP_N, CUBLAS_OP_T, C, main, N, inp, C, dout, ldd,
                             dweight, C, options, stream);
      if (!status.ok()) return status;
    }
    if (main < OC) {  // the tail rows: (OC - main) * C fixed-order column sums over the N rows
      status.cuda = detail::add_column_sums(dweight + main * C, N, (OC - main) * C,
                                            DweightTail<T>{dout + main, ldd, inp, C}, stream, ctx.product,
                                            ctx.product_floats, stores.overwrite_dweight);
      if (!status.ok()) return status;
    }
  }
  // The product tiles are free again (stream order): they hold the column sums' partials.
  if (dbias != nullptr && !dbias_done) {
    status.cuda = detail::add_column_sums(dbias, N, OC, RowValue<T>{dout, ldd}, stream, ctx.product,
                                          ctx.product_floats, stores.overwrite_dweight);
  }
  return status;
}

template <typename T>
GemmStatus matmul_backward_input_sum(const GemmContext& ctx, T* dinp, std::span<const DinpTerm<T>> given, int64_t N,
                                     int64_t C, GemmOptions options, cudaStream_t stream, bool overwrite) {
  GemmStatus status;
  constexpr size_t kMaxTerms = 8;
  if (given.size() > kMaxTerms) {
    status.cublas = CUBLAS_STATUS_INVALID_VALUE;
    return status;
  }
  // Resolve the strides and join adjacent terms (column blocks of one dout, row blocks of one weight).
  DinpTerm<T> joined[kMaxTerms];
  size_t count = 0;
  for (DinpTerm<T> t : given) {
    t.dout_stride = row_stride(t.OC, t.dout_stride);
    if (!valid_shape(N, C, t.OC, t.dout_stride)) {
      status.cublas = CUBLAS_STATUS_INVALID_VALUE;
      return status;
    }
    if (t.OC == 0) continue;
    DinpTerm<T>* last = count > 0 ? &joined[count - 1] : nullptr;
    if (last != nullptr && last->dout_stride == t.dout_stride && t.dout == last->dout + last->OC &&
        t.weight == last->weight + last->OC * C && last->OC + t.OC <= t.dout_stride) {
      last->OC += t.OC;
    } else {
      joined[count++] = t;
    }
  }
  const std::span<const DinpTerm<T>> terms(joined, count);
  if (N == 0 || C == 0) return status;
  if (count == 1) {  // one GEMM, as matmul_backward's input gradient
    const DinpTerm<T>& t = joined[0];
    return matmul_backward<T>(ctx, dinp, nullptr, nullptr, t.dout, nullptr, t.weight, N, C, t.OC, options, stream,
                              t.dout_stride, GradStores{overwrite, false});
  }
  if (status.cublas = bind<T>(ctx.cublas, options, stream); !status.ok()) return status;
  // dinp^T (C, N) (+)= weight_t^T (C, OC_t) . dout_t^T (OC_t, N): gemm(N, N, m = C, n = N, k = OC_t).
  if constexpr (!is_16bit<T>()) {
    bool first = true;
    for (const DinpTerm<T>& t : terms) {
      if (t.OC == 0) continue;
      const float beta = first && overwrite ? 0.0f : 1.0f;
      status.cublas = gemm<T>(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, C, N, t.OC, t.weight, C, t.dout, t.dout_stride,
                              beta, dinp, data_type<T>(), C, options);
      if (!status.ok()) return status;
      first = false;
    }
    if (first && overwrite) status.cuda = cudaMemsetAsync(dinp, 0, sizeof(T) * N * C, stream);
    return status;
  } else {
    const auto fill = [&](int64_t r0, int64_t rows, int64_t c0, int64_t cols, int64_t ldp) {
      GemmStatus st;
      bool first = true;
      for (const DinpTerm<T>& t : terms) {
        if (t.OC == 0) continue;
        st.cublas = gemm<T>(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, rows, cols, t.OC, t.weight + r0, C,
                            t.dout + c0 * t.dout_stride, t.dout_stride, first ? 0.0f : 1.0f, ctx.product, CUDA_R_32F,
                            ldp, options);
        if (!st.ok()) return st;
        first = false;
      }
      if (first) st.cuda = cudaMemset2DAsync(ctx.product, ldp * sizeof(float), 0, rows * sizeof(float), cols, stream);
      return st;
    };
    if (overwrite) return via_product_tiles<T, false>(ctx, C, N, dinp, C, nullptr, stream, NoTail{}, fill);
    return via_product_tiles<T, true>(ctx, C, N, dinp, C, nullptr, stream, NoTail{}, fill);
  }
}

// A GELU epilogue cuBLASLt's version refuses as a configuration (INVALID_VALUE from its descriptors
// or heuristic, before anything is queued) leaves the op to the caller's two kernels, as a missing
// algorithm does; every other failure is reported.
cublasStatus_t epilogue_refusal_is_unfused(cublasStatus_t st, bool* fused) {
  if (st != CUBLAS_STATUS_INVALID_VALUE) return st;
  *fused = false;
  return CUBLAS_STATUS_SUCCESS;
}

// The shared frame of the two GELU epilogue ops: shape check, then `lt_op` (a cuBLASLt call that
// sets *fused) for 16-bit T with cuBLASLt present and a non-empty shape; else *fused stays false.
template <typename T, typename LtOp>
GemmStatus gelu_epilogue_op(const GemmContext& ctx, int64_t N, int64_t C, int64_t OC, bool* fused, LtOp lt_op) {
  *fused = false;
  GemmStatus status;
  if (!valid_shape(N, C, OC, OC)) {
    status.cublas = CUBLAS_STATUS_INVALID_VALUE;
    return status;
  }
  if constexpr (is_16bit<T>()) {
    if (ctx.lt == nullptr || N == 0 || C == 0 || OC == 0) return status;
    status.cublas = epilogue_refusal_is_unfused(lt_op(), fused);
  }
  return status;
}

template <typename T>
GemmStatus matmul_forward_gelu(const GemmContext& ctx, T* act, T* pre, const T* inp, const T* weight, const T* bias,
                               int64_t N, int64_t C, int64_t OC, GemmOptions options, cudaStream_t stream,
                               bool* fused) {
  if (bias == nullptr) {  // GELU_AUX_BIAS needs one; the caller composes the two ops
    *fused = false;
    return GemmStatus{};
  }
  return gelu_epilogue_op<T>(ctx, N, C, OC, fused, [&] {
    return lt_forward_gelu<T>(ctx, act, pre, inp, weight, bias, N, C, OC, options, stream, fused);
  });
}

template <typename T>
GemmStatus matmul_backward_input_dgelu(const GemmContext& ctx, T* dpre, const T* dout, const T* weight, const T* pre,
                                       int64_t N, int64_t C, int64_t OC, GemmOptions options, cudaStream_t stream,
                                       bool* fused) {
  return gelu_epilogue_op<T>(ctx, N, C, OC, fused, [&] {
    return lt_input_dgelu<T>(ctx, dpre, dout, weight, pre, N, C, OC, options, stream, fused);
  });
}

#define STRATA_INSTANTIATE_GEMM(T)                                                                                \
  template GemmStatus matmul_forward<T>(const GemmContext&, T*, const T*, const T*, const T*, int64_t, int64_t,    \
                                        int64_t, GemmOptions, cudaStream_t, int64_t);                             \
  template GemmStatus matmul_backward<T>(const GemmContext&, T*, T*, T*, const T*, const T*, const T*, int64_t,    \
                                         int64_t, int64_t, GemmOptions, cudaStream_t, int64_t, GradStores);        \
  template GemmStatus matmul_backward_input_sum<T>(const GemmContext&, T*, std::span<const DinpTerm<T>>, int64_t, \
                                                   int64_t, GemmOptions, cudaStream_t, bool);                     \
  template GemmStatus matmul_forward_gelu<T>(const GemmContext&, T*, T*, const T*, const T*, const T*, int64_t,   \
                                             int64_t, int64_t, GemmOptions, cudaStream_t, bool*);                 \
  template GemmStatus matmul_backward_input_dgelu<T>(const GemmContext&, T*, const T*, const T*, const T*,       \
                                                     int64_t, int64_t, int64_t, GemmOptions, cudaStream_t, bool*);
STRATA_FOR_EACH_ELEMENT_TYPE(STRATA_INSTANTIATE_GEMM)
#undef STRATA_INSTANTIATE_GEMM

}  // namespace strata::kernels::cuda
