// CpuComputeOps: each op a closure on the compute CpuStream calling kernels/cpu in fp32 through
// fp32 views of its tensors (WidenedArgs; contract in cpu_compute_ops.h). Arguments arrive
// validated by ComputeOps; nothing here checks ranges. Not where the math lives, except the small
// format loops (cast, grad norm) written here.
#include "runtime/cpu_compute_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "kernels/cpu/grad_accumulate.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/ops_attention.h"
#include "kernels/cpu/ops_elementwise.h"
#include "kernels/cpu/ops_embedding.h"
#include "kernels/cpu/ops_matmul.h"
#include "kernels/cpu/ops_norm.h"
#include "kernels/cpu/ops_rope.h"

namespace strata {
namespace {

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

// OpenBLAS takes int dimensions and leading dimensions.
Status check_blas_dims(std::string_view op, int64_t N, int64_t C, int64_t OC, int64_t stride) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (N <= kIntMax && C <= kIntMax && OC <= kIntMax && stride <= kIntMax) return Status::ok();
  return error(Code::invalid_argument,
               "{}: N = {}, C = {}, OC = {}, row stride {} exceed the BLAS int range of the CPU backend; split the "
               "GEMM into tiles",
               op, N, C, OC, stride);
}

// The fp32 view of a gradient a backward kernel accumulates into: its widened value (add), or a
// zeroed view (overwrite), so that the kernel's += gives exactly the bits of fill_zero + add.
float* grad_view(WidenedArgs& a, void* p, int64_t n, GradStore store) {
  if (store == GradStore::add) return a.inout(p, n);
  float* view = a.out(p, n);
  if (view != nullptr) std::fill(view, view + n, 0.0f);
  return view;
}

}  // namespace

Status CpuComputeOps::check_activation_dtype(DType dt, std::string_view op) const {
  if (dt == DType::f32 || dt == DType::bf16 || dt == DType::f16) return Status::ok();
  return error(Code::invalid_argument,
               "{}: activations in {}: the CPU backend accepts fp32, bf16 or fp16; use --dtype fp32, bf16 or fp16",
               op, dtype_name(dt));
}

template <typename Kernel>
Status CpuComputeOps::enqueue_in_fp32(DType dt, Kernel kernel) {
  return stream_.enqueue([this, format = format_of(dt), kernel] {
    WidenedArgs a(format, scratch_);
    kernel(a);
    a.narrow();
  });
}

// A strided out/dout is viewed with its own stride: only its OC real columns are widened or
// narrowed, so the padding columns are never written.
Status CpuComputeOps::queue_matmul_forward(DType dt, void* out, const void* inp, const void* weight, const void* bias,
                                           int64_t N, int64_t C, int64_t OC, int64_t out_stride) {
  STRATA_RETURN_IF_ERROR(check_blas_dims("matmul_forward", N, C, OC, out_stride));
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    kernels::matmul_forward(a.out_rows(out, N, OC, out_stride), a.in(inp, N * C), a.in(weight, OC * C),
                            a.in(bias, OC), N, C, OC, out_stride);
  });
}

Status CpuComputeOps::queue_matmul_backward(DType dt, void* dinp, void* dweight, void* dbias, const void* dout,
                                            const void* inp, const void* weight, int64_t N, int64_t C, int64_t OC,
                                            int64_t dout_stride, GradStore dinp_store, GradStore dweight_store) {
  STRATA_RETURN_IF_ERROR(check_blas_dims("matmul_backward", N, C, OC, dout_stride));
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    kernels::matmul_backward(grad_view(a, dinp, N * C, dinp_store), grad_view(a, dweight, OC * C, dweight_store),
                             grad_view(a, dbias, OC, dweight_store),
                             a.in_rows(dout, N, OC, dout_stride), a.in(inp, N * C), a.in(weight, OC * C), N, C, OC,
                             dout_stride);
  });
}

// The terms' products added into one fp32 view of dinp (sgemm with beta = 1), narrowed once.
Status CpuComputeOps::queue_matmul_backward_input_sum(DType dt, void* dinp, std::span<const InputGradTerm> terms,
                                                      int64_t N, int64_t C, GradStore dinp_store) {
  for (const InputGradTerm& t : terms) {
    STRATA_RETURN_IF_ERROR(check_blas_dims("matmul_backward_input_sum", N, C, t.OC, t.dout_stride));
  }
  // The queued work outlives `terms`: a copy (at most kMaxInputGradTerms, checked by the caller).
  std::array<InputGradTerm, kMaxInputGradTerms> held{};
  std::copy(terms.begin(), terms.end(), held.begin());
  const size_t count = terms.size();
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    float* d = grad_view(a, dinp, N * C, dinp_store);
    for (const InputGradTerm& t : std::span(held.data(), count)) {
      const int64_t ldd = t.dout_stride != 0 ? t.dout_stride : t.OC;
      kernels::matmul_backward(d, nullptr, nullptr, a.in_rows(t.dout, N, t.OC, ldd), nullptr,
                               a.in(t.weight, t.OC * C), N, C, t.OC, ldd);
    }
  });
}

Status CpuComputeOps::queue_layernorm_forward(DType dt, void* out, float* mean, float* rstd, const void* inp,
                                              const void* weight, const void* bias, int64_t N, int64_t C, float eps) {
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    kernels::layernorm_forward(a.out(out, N * C), mean, rstd, a.in(inp, N * C), a.in(weight, C), a.in(bias, C), N,
                               C, eps);
  });
}

Status CpuComputeOps::queue_layernorm_backward(DType dt, void* dinp, void* dweight, void* dbias, const void* dout,
                                               const void* inp, const void* weight, const float* mean,
                                               const float* rstd, int64_t N, int64_t C) {
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    kernels::layernorm_backward(a.inout(dinp, N * C), a.inout(dweight, C), a.inout(dbias, C), a.in(dout, N * C),
                                a.in(inp, N * C), a.in(weight, C), mean, rstd, N, C);
  });
}

Status CpuComputeOps::queue_rmsnorm_forward(DType dt, void* out, float* rstd, const void* inp, const void* weight,
                                            int64_t N, int64_t C, float eps) {
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    kernels::rmsnorm_forward(a.out(out, N * C), rstd, a.in(inp, N * C), a.in(weight, C), N, C, eps);
  });
}

Status CpuComputeOps::queue_rmsnorm_backward(DType dt, void* dinp, void* dweight, const void* dout, const void* inp,
                                             const void* weight, const float* rstd, int64_t N, int64_t C) {
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    kernels::rmsnorm_backward(a.inout(dinp, N * C), a.inout(dweight, C), a.in(dout, N * C), a.in(inp, N * C),
                              a.in(weight, C), rstd, N, C);
  });
}

Status CpuComputeOps::queue_gelu_forward(DType dt, void* out, const void* inp, int64_t n) {
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) { kernels::gelu_forward(a.out(out, n), a.in(inp, n), n); });
}

Status CpuComputeOps::queue_gelu_backward(DType dt, void* dinp, const void* inp, const void* dout, int64_t n,
                                          GradStore store) {
  return enqueue_in_fp32(
      dt, [=](WidenedArgs& a) { kernels::gelu_backward(grad_view(a, dinp, n, store), a.in(inp, n), a.in(dout, n), n); });
}

Status CpuComputeOps::queue_swiglu_forward(DType dt, void* out, const void* inp, int64_t N, int64_t H) {
  return enqueue_in_fp32(
      dt, [=](WidenedArgs& a) { kernels::swiglu_forward(a.out(out, N * H), a.in(inp, N * 2 * H), N, H); });
}

Status CpuComputeOps::queue_swiglu_backward(DType dt, void* dinp, const void* inp, const void* dout, int64_t N,
                                            int64_t H, GradStore store) {
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    kernels::swiglu_backward(grad_view(a, dinp, N * 2 * H, store), a.in(inp, N * 2 * H), a.in(dout, N * H), N, H);
  });
}

Status CpuComputeOps::queue_residual_forward(DType dt, void* out, const void* a_in, const void* b_in, int64_t n) {
  return enqueue_in_fp32(
      dt, [=](WidenedArgs& a) { kernels::residual_forward(a.out(out, n), a.in(a_in, n), a.in(b_in, n), n); });
}

Status CpuComputeOps::queue_residual_backward(DType dt, void* da, void* db, const void* dout, int64_t n) {
  return enqueue_in_fp32(
      dt, [=](WidenedArgs& a) { kernels::residual_backward(a.inout(da, n), a.inout(db, n), a.in(dout, n), n); });
}

// The embedding ops touch only what a table tile's rows need (kernels::TableRows): the table rows
// between its smallest and largest token (kernels::table_rows_used; never past its V rows), and,
// for 16-bit tensors, only the activation rows whose token it holds (kernels::rows_holding) and
// the positions of those rows; the others are neither converted nor written. The tokens are read
// when the closure runs, after the copies queued before it.
namespace {

// `table` (holding `rows`, C elements of elem_size bytes a row) from the row of id used.begin on;
// null stays null (a gradient not computed).
template <typename Void>
Void* table_from(Void* table, kernels::TableRows rows, kernels::TableRows used, int64_t C, size_t elem_size) {
  using Byte = std::conditional_t<std::is_const_v<Void>, const std::byte, std::byte>;
  if (table == nullptr) return nullptr;
  return static_cast<Byte*>(table) + (used.begin - rows.begin) * C * static_cast<int64_t>(elem_size);
}

// The distinct positions n % T of `listed` rows, increasing.
std::vector<int64_t> positions_of(const std::vector<int64_t>& listed, int64_t T) {
  std::vector<char> used(static_cast<size_t>(T), 0);
  for (int64_t n : listed) used[n % T] = 1;
  std::vector<int64_t> positions;
  for (int64_t t = 0; t < T; ++t) {
    if (used[t] != 0) positions.push_back(t);
  }
  return positions;
}

}  // namespace

Status CpuComputeOps::queue_encoder_forward(DType dt, void* out, const int32_t* tokens, const void* wte,
                                            const void* wpe, int64_t B, int64_t T, int64_t C, int64_t V,
                                            int64_t row_begin) {
  const size_t elem = dtype_size(dt);
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    const int64_t N = B * T;
    const kernels::TableRows table{row_begin, V}, used = kernels::table_rows_used(tokens, N, table);
    const std::vector<int64_t> rows = kernels::rows_holding(tokens, N, used);
    const std::vector<int64_t> positions = positions_of(rows, T);
    kernels::encoder_forward(a.out_listed_rows(out, N, C, rows), tokens,
                             a.in(table_from(wte, table, used, C, elem), used.count * C),
                             a.in_listed_rows(wpe, T, C, positions), B, T, C, used);
  });
}

// dwpe sums every row of dout, so with dwpe the whole of dout is widened (the model passes dwpe in
// one tile's call only); without it, the rows the table holds.
Status CpuComputeOps::queue_encoder_backward(DType dt, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                                             int64_t B, int64_t T, int64_t C, int64_t V, int64_t row_begin) {
  const size_t elem = dtype_size(dt);
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    const int64_t N = B * T;
    const kernels::TableRows table{row_begin, V}, used = kernels::table_rows_used(tokens, N, table);
    const std::vector<int64_t> rows = dwpe != nullptr ? std::vector<int64_t>{} : kernels::rows_holding(tokens, N, used);
    const float* dy = dwpe != nullptr ? a.in(dout, N * C) : a.in_listed_rows(dout, N, C, rows);
    kernels::encoder_backward(a.inout(table_from(dwte, table, used, C, elem), used.count * C),
                              a.inout(dwpe, T * C), dy, tokens, B, T, C, used);
  });
}

Status CpuComputeOps::queue_token_embedding_forward(DType dt, void* out, const int32_t* tokens, const void* wte,
                                                    int64_t N, int64_t C, int64_t V, int64_t row_begin) {
  const size_t elem = dtype_size(dt);
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    const kernels::TableRows table{row_begin, V}, used = kernels::table_rows_used(tokens, N, table);
    const std::vector<int64_t> rows = kernels::rows_holding(tokens, N, used);
    kernels::token_embedding_forward(a.out_listed_rows(out, N, C, rows), tokens,
                                     a.in(table_from(wte, table, used, C, elem), used.count * C), N, C, used);
  });
}

Status CpuComputeOps::queue_token_embedding_backward(DType dt, void* dwte, const void* dout, const int32_t* tokens,
                                                     int64_t N, int64_t C, int64_t V, int64_t row_begin) {
  const size_t elem = dtype_size(dt);
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    const kernels::TableRows table{row_begin, V}, used = kernels::table_rows_used(tokens, N, table);
    const std::vector<int64_t> rows = kernels::rows_holding(tokens, N, used);
    kernels::token_embedding_backward(a.inout(table_from(dwte, table, used, C, elem), used.count * C),
                                      a.in_listed_rows(dout, N, C, rows), tokens, N, C, used);
  });
}

// RoPE and attention take rows (b, t) `stride` elements apart: the widened views keep that layout
// and convert only each row's own columns, so q, k and v (and dq, dk, dv), column blocks of one
// tensor, are each widened and narrowed without touching the others.
Status CpuComputeOps::queue_rope_forward(DType dt, void* out, const void* inp, int64_t B, int64_t T, int64_t NH,
                                         int64_t HS, float theta, int64_t pos_offset, int64_t stride) {
  const int64_t rows = B * T, cols = NH * HS, ld = stride != 0 ? stride : cols;
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    kernels::rope_forward(a.out_rows(out, rows, cols, ld), a.in_rows(inp, rows, cols, ld), B, T, NH, HS, theta,
                          pos_offset, ld);
  });
}

Status CpuComputeOps::queue_rope_backward(DType dt, void* dinp, const void* dout, int64_t B, int64_t T, int64_t NH,
                                          int64_t HS, float theta, int64_t pos_offset, int64_t stride) {
  const int64_t rows = B * T, cols = NH * HS, ld = stride != 0 ? stride : cols;
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    kernels::rope_backward(a.out_rows(dinp, rows, cols, ld), a.in_rows(dout, rows, cols, ld), B, T, NH, HS, theta,
                           pos_offset, ld);
  });
}

Status CpuComputeOps::queue_attention_forward(DType dt, void* out, float* lse, const void* q, const void* k,
                                              const void* v, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                              int64_t qkv_stride) {
  const int64_t rows = B * T, qc = NH * HS, kvc = NKV * HS;
  // A struct, not a structured binding: clang 14 cannot capture bindings in the lambda.
  const kernels::QkvRowStrides ld = kernels::qkv_row_strides(NH, NKV, HS, qkv_stride);
  const int64_t q_ld = ld.q, kv_ld = ld.kv;
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    kernels::attention_forward(a.out(out, rows * qc), lse, a.in_rows(q, rows, qc, q_ld), a.in_rows(k, rows, kvc, kv_ld),
                               a.in_rows(v, rows, kvc, kv_ld), B, T, NH, NKV, HS, qkv_stride);
  });
}

Status CpuComputeOps::queue_attention_backward(DType dt, void* dq, void* dk, void* dv, const void* dout, const void* q,
                                               const void* k, const void* v, const void* out, const float* lse,
                                               int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                               int64_t qkv_stride) {
  const int64_t rows = B * T, qc = NH * HS, kvc = NKV * HS;
  // A struct, not a structured binding: clang 14 cannot capture bindings in the lambda.
  const kernels::QkvRowStrides ld = kernels::qkv_row_strides(NH, NKV, HS, qkv_stride);
  const int64_t q_ld = ld.q, kv_ld = ld.kv;
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    kernels::attention_backward(a.inout_rows(dq, rows, qc, q_ld), a.inout_rows(dk, rows, kvc, kv_ld),
                                a.inout_rows(dv, rows, kvc, kv_ld), a.in(dout, rows * qc),
                                a.in_rows(q, rows, qc, q_ld), a.in_rows(k, rows, kvc, kv_ld),
                                a.in_rows(v, rows, kvc, kv_ld), a.in(out, rows * qc), lse, B, T, NH, NKV, HS,
                                qkv_stride);
  });
}

Status CpuComputeOps::queue_crossentropy_forward(DType dt, float* lse, float* losses,
                                                 kernels::CrossEntropyResult* result, const void* logits,
                                                 const int32_t* targets, int64_t N, int64_t V, int64_t logits_stride) {
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    const kernels::CrossEntropyResult r = kernels::crossentropy_forward(
        lse, losses, a.in_rows(logits, N, V, logits_stride), targets, N, V, logits_stride);
    if (result != nullptr) *result = r;
  });
}

Status CpuComputeOps::queue_crossentropy_backward(DType dt, void* dlogits, const void* logits, const float* lse,
                                                  const int32_t* targets, float dloss, int64_t N, int64_t V,
                                                  int64_t logits_stride) {
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    kernels::crossentropy_backward(a.inout_rows(dlogits, N, V, logits_stride), a.in_rows(logits, N, V, logits_stride),
                                   lse, targets, dloss, N, V, logits_stride);
  });
}

// The logits are read and overwritten: an inout view, widened, rewritten in fp32, narrowed (the
// real columns only: the padding keeps its bytes).
Status CpuComputeOps::queue_crossentropy_backward_inplace(DType dt, void* logits_to_dlogits, const float* lse,
                                                          const int32_t* targets, float dloss, int64_t N, int64_t V,
                                                          int64_t logits_stride) {
  return enqueue_in_fp32(dt, [=](WidenedArgs& a) {
    kernels::crossentropy_backward_inplace(a.inout_rows(logits_to_dlogits, N, V, logits_stride), lse, targets, dloss,
                                           N, V, logits_stride);
  });
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

Status CpuComputeOps::queue_accumulate_widened(float* acc, const void* src, DType format, int64_t n, bool first) {
  const kernels::FloatFormat f = format_of(format);
  return stream_.enqueue([=] { kernels::accumulate_widened(f, src, acc, static_cast<size_t>(n), first); });
}

Status CpuComputeOps::queue_sum_squares_blocks(double* partials, const void* x, DType format, int64_t n) {
  const kernels::FloatFormat f = format_of(format);
  return stream_.enqueue([=] {
    constexpr size_t kBlock = kernels::kSumSquaresBlock;
    const size_t es = kernels::float_format_size(f);
    float widened[kBlock];  // a 16-bit block widened exactly, then the fp32 definition
    for (size_t k = 0, at = 0; at < static_cast<size_t>(n); ++k, at += kBlock) {
      const size_t len = std::min(kBlock, static_cast<size_t>(n) - at);
      const void* block = static_cast<const std::byte*>(x) + at * es;
      if (f == kernels::FloatFormat::f32) {
        partials[k] = kernels::sum_squares_block(static_cast<const float*>(block), len);
      } else {
        kernels::accumulate_widened(f, block, widened, len, /*first=*/true);
        partials[k] = kernels::sum_squares_block(widened, len);
      }
    }
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

Status CpuComputeOps::queue_adam8bit_update(const kernels::AdamConstants& constants,
                                            const kernels::AdamFormats& formats, const kernels::Adam8bitSpan& span) {
  return stream_.enqueue([=] { (void)kernels::adam8bit_update(constants, formats, span, kernels::best_simd_level()); });
}

}  // namespace strata
