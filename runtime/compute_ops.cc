// ComputeOps' public half: the argument checks every backend shares (shapes, dtypes, device ranges
// against the owning backend's arena), then the backend's queue_* (contract in compute_ops.h).
// Not where any op computes: runtime/cpu_compute_ops.cc and runtime/cuda/cuda_compute_ops.cc.
#include "runtime/compute_ops.h"

#include <initializer_list>
#include <limits>
#include <string>

#include "kernels/cpu/grad_accumulate.h"
#include "kernels/cpu/ops_attention.h"

namespace strata {

// Collects the first argument error of one op call. Each check is skipped once one has failed.
class OpArgs {
 public:
  OpArgs(const ComputeOps& ops, std::string_view op) : ops_(ops), op_(op) {}

  // Every named size must be >= 0.
  OpArgs& sizes(std::initializer_list<std::pair<const char*, int64_t>> named) {
    for (const auto& [name, value] : named) {
      require(value >= 0, "{} = {} is negative; sizes must be >= 0", name, value);
    }
    return *this;
  }

  template <typename... Args>
  OpArgs& require(bool cond, fmt::format_string<Args...> f, Args&&... args) {
    if (first_.is_ok() && !cond) {
      first_ = Status(Code::invalid_argument, fmt::format("{}: ", op_) + fmt::format(f, std::forward<Args>(args)...));
    }
    return *this;
  }

  OpArgs& activations(DType dt) {
    if (first_.is_ok()) first_ = ops_.check_activation_dtype(dt, op_);
    return *this;
  }

  // A float-format tensor type (casts, gradients): fp32, bf16 or fp16.
  OpArgs& float_format(DType dt, const char* what) {
    if (first_.is_ok()) first_ = float_format_of(dt, fmt::format("{} {}", op_, what)).status();
    return *this;
  }

  // `name` holds the product of `dims` elements of `elem_size` bytes at `ptr` in device memory.
  // `nullable`: a null pointer means "not computed" and is accepted.
  OpArgs& tensor(const char* name, const void* ptr, size_t elem_size, std::initializer_list<int64_t> dims,
                 bool nullable = false) {
    if (!first_.is_ok()) return *this;
    uint64_t bytes = elem_size;
    for (int64_t d : dims) {
      if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) {
        bytes = std::numeric_limits<uint64_t>::max();
        break;
      }
    }
    if (bytes == 0 || (ptr == nullptr && nullable)) return *this;
    if (ptr == nullptr) {
      first_ = error(Code::invalid_argument, "{}: {} is null but {} bytes are needed", op_, name, bytes);
      return *this;
    }
    first_ = ops_.arena_.check_range(ops_.base_, ptr, bytes, fmt::format("{} {}", op_, name));
    return *this;
  }

  // A tensor of `dt` elements (the op's activation type).
  OpArgs& tensor(const char* name, const void* ptr, DType dt, std::initializer_list<int64_t> dims,
                 bool nullable = false) {
    return tensor(name, ptr, dtype_size(dt), dims, nullable);
  }

  // A (rows, cols) tensor of `dt` elements whose rows start `stride` elements apart (stride >= cols,
  // checked by row_stride): it spans (rows - 1) * stride + cols elements, the last row's padding
  // excluded. Empty when rows or cols is 0.
  OpArgs& strided(const char* name, const void* ptr, DType dt, int64_t rows, int64_t cols, int64_t stride) {
    if (!first_.is_ok() || rows == 0 || cols == 0) return *this;
    int64_t span = 0;
    if (__builtin_mul_overflow(rows - 1, stride, &span) || __builtin_add_overflow(span, cols, &span)) {
      span = -1;  // tensor() reports an unrepresentable size as too large
    }
    return tensor(name, ptr, dt, {span});
  }

  // The row stride argument `name` of rows with `cols` elements: 0 (meaning cols) or >= cols.
  // Returns the resolved stride (cols when the argument is invalid, after recording the error).
  int64_t row_stride(const char* name, int64_t stride, const char* cols_name, int64_t cols) {
    require(stride == 0 || stride >= cols, "{} = {} is less than {} = {}; a row stride is 0 (meaning {}) or >= {}",
            name, stride, cols_name, cols, cols_name, cols_name);
    return stride == 0 || stride < cols ? cols : stride;
  }

  Status status() const { return first_; }

 private:
  const ComputeOps& ops_;
  std::string_view op_;
  Status first_;
};

namespace {

constexpr bool positive_finite(float x) { return x > 0.0f && x <= std::numeric_limits<float>::max(); }

// The sizes of an embedding op over a table of V rows holding the ids [row_begin, row_begin + V).
void check_embedding_args(OpArgs& a, std::initializer_list<std::pair<const char*, int64_t>> sizes,
                          int64_t row_begin) {
  a.sizes(sizes).require(row_begin >= 0, "row_begin = {} is negative; a table's first row is a token id >= 0",
                         row_begin);
}

}  // namespace

StatusOr<kernels::FloatFormat> float_format_of(DType dt, std::string_view what) {
  switch (dt) {
    case DType::f32: return kernels::FloatFormat::f32;
    case DType::bf16: return kernels::FloatFormat::bf16;
    case DType::f16: return kernels::FloatFormat::f16;
    default: break;
  }
  return error(Code::invalid_argument, "{}: dtype {} is not a float format; use fp32, bf16 or fp16", what,
               dtype_name(dt));
}

Status ComputeOps::matmul_forward(DType dt, void* out, const void* inp, const void* weight, const void* bias,
                                  int64_t N, int64_t C, int64_t OC, int64_t out_stride) {
  OpArgs a(*this, "matmul_forward");
  a.activations(dt).sizes({{"N", N}, {"C", C}, {"OC", OC}});
  const int64_t ldo = a.row_stride("out_stride", out_stride, "OC", OC);
  a.strided("out", out, dt, N, OC, ldo).tensor("inp", inp, dt, {N, C}).tensor("weight", weight, dt, {OC, C});
  a.tensor("bias", bias, dt, {OC}, true);
  a.require(out != inp && out != weight, "out must not alias inp or weight");
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_matmul_forward(dt, out, inp, weight, bias, N, C, OC, ldo);
}

Status ComputeOps::matmul_backward(DType dt, void* dinp, void* dweight, void* dbias, const void* dout,
                                   const void* inp, const void* weight, int64_t N, int64_t C, int64_t OC,
                                   int64_t dout_stride, GradStore dinp_store, GradStore dweight_store) {
  OpArgs a(*this, "matmul_backward");
  a.activations(dt).sizes({{"N", N}, {"C", C}, {"OC", OC}});
  const int64_t ldd = a.row_stride("dout_stride", dout_stride, "OC", OC);
  a.tensor("dinp", dinp, dt, {N, C}, true).tensor("dweight", dweight, dt, {OC, C}, true);
  a.tensor("dbias", dbias, dt, {OC}, true).strided("dout", dout, dt, N, OC, ldd);
  a.tensor("inp", inp, dt, {N, C}, dweight == nullptr).tensor("weight", weight, dt, {OC, C}, dinp == nullptr);
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_matmul_backward(dt, dinp, dweight, dbias, dout, inp, weight, N, C, OC, ldd, dinp_store, dweight_store);
}

Status ComputeOps::matmul_backward_input_sum(DType dt, void* dinp, std::span<const InputGradTerm> terms, int64_t N,
                                             int64_t C, GradStore dinp_store) {
  OpArgs a(*this, "matmul_backward_input_sum");
  a.activations(dt).sizes({{"N", N}, {"C", C}}).tensor("dinp", dinp, dt, {N, C});
  a.require(!terms.empty() && terms.size() <= kMaxInputGradTerms, "{} terms; give 1 to {}", terms.size(),
            kMaxInputGradTerms);
  for (const InputGradTerm& t : terms) {
    a.sizes({{"OC", t.OC}});
    const int64_t ldd = a.row_stride("dout_stride", t.dout_stride, "OC", t.OC);
    a.strided("dout", t.dout, dt, N, t.OC, ldd).tensor("weight", t.weight, dt, {t.OC, C});
    a.require(t.dout != dinp && t.weight != dinp, "a term's dout or weight aliases dinp");
  }
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_matmul_backward_input_sum(dt, dinp, terms, N, C, dinp_store);
}

Status ComputeOps::layernorm_forward(DType dt, void* out, float* mean, float* rstd, const void* inp,
                                     const void* weight, const void* bias, int64_t N, int64_t C, float eps) {
  OpArgs a(*this, "layernorm_forward");
  a.activations(dt).sizes({{"N", N}, {"C", C}});
  a.require(positive_finite(eps), "eps = {} must be positive and finite", eps);
  a.tensor("out", out, dt, {N, C}).tensor("inp", inp, dt, {N, C});
  a.tensor("mean", mean, 4, {N}).tensor("rstd", rstd, 4, {N});
  a.tensor("weight", weight, dt, {C}).tensor("bias", bias, dt, {C});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_layernorm_forward(dt, out, mean, rstd, inp, weight, bias, N, C, eps);
}

Status ComputeOps::layernorm_backward(DType dt, void* dinp, void* dweight, void* dbias, const void* dout,
                                      const void* inp, const void* weight, const float* mean, const float* rstd,
                                      int64_t N, int64_t C) {
  OpArgs a(*this, "layernorm_backward");
  a.activations(dt).sizes({{"N", N}, {"C", C}});
  a.tensor("dinp", dinp, dt, {N, C}, true).tensor("dweight", dweight, dt, {C}, true);
  a.tensor("dbias", dbias, dt, {C}, true).tensor("dout", dout, dt, {N, C}).tensor("inp", inp, dt, {N, C});
  a.tensor("weight", weight, dt, {C}).tensor("mean", mean, 4, {N}).tensor("rstd", rstd, 4, {N});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_layernorm_backward(dt, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

Status ComputeOps::rmsnorm_forward(DType dt, void* out, float* rstd, const void* inp, const void* weight, int64_t N,
                                   int64_t C, float eps) {
  OpArgs a(*this, "rmsnorm_forward");
  a.activations(dt).sizes({{"N", N}, {"C", C}});
  a.require(positive_finite(eps), "eps = {} must be positive and finite", eps);
  a.tensor("out", out, dt, {N, C}).tensor("inp", inp, dt, {N, C});
  a.tensor("rstd", rstd, 4, {N}).tensor("weight", weight, dt, {C});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_rmsnorm_forward(dt, out, rstd, inp, weight, N, C, eps);
}

Status ComputeOps::rmsnorm_backward(DType dt, void* dinp, void* dweight, const void* dout, const void* inp,
                                    const void* weight, const float* rstd, int64_t N, int64_t C) {
  OpArgs a(*this, "rmsnorm_backward");
  a.activations(dt).sizes({{"N", N}, {"C", C}});
  a.tensor("dinp", dinp, dt, {N, C}, true).tensor("dweight", dweight, dt, {C}, true);
  a.tensor("dout", dout, dt, {N, C}).tensor("inp", inp, dt, {N, C});
  a.tensor("weight", weight, dt, {C}).tensor("rstd", rstd, 4, {N});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_rmsnorm_backward(dt, dinp, dweight, dout, inp, weight, rstd, N, C);
}

Status ComputeOps::matmul_forward_gelu(DType dt, void* act, void* pre, const void* inp, const void* weight,
                                       const void* bias, int64_t N, int64_t C, int64_t OC) {
  OpArgs a(*this, "matmul_forward_gelu");
  a.activations(dt).sizes({{"N", N}, {"C", C}, {"OC", OC}});
  a.tensor("act", act, dt, {N, OC}).tensor("pre", pre, dt, {N, OC}).tensor("inp", inp, dt, {N, C});
  a.tensor("weight", weight, dt, {OC, C}).tensor("bias", bias, dt, {OC}, true);
  a.require(act != pre || N * OC == 0, "act must not alias pre");
  a.require(act != inp && act != weight && pre != inp && pre != weight, "act and pre must not alias inp or weight");
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_matmul_forward_gelu(dt, act, pre, inp, weight, bias, N, C, OC);
}

Status ComputeOps::matmul_backward_input_gelu(DType dt, void* dpre, void* dact, const void* dout, const void* weight,
                                              const void* pre, int64_t N, int64_t C, int64_t OC) {
  OpArgs a(*this, "matmul_backward_input_gelu");
  a.activations(dt).sizes({{"N", N}, {"C", C}, {"OC", OC}});
  a.tensor("dpre", dpre, dt, {N, C}).tensor("dact", dact, dt, {N, C}).tensor("dout", dout, dt, {N, OC});
  a.tensor("weight", weight, dt, {OC, C}).tensor("pre", pre, dt, {N, C});
  a.require(N * C == 0 || (dpre != dact && dpre != pre && dpre != dout && dact != pre && dact != dout),
            "dpre, dact, pre and dout must be four buffers");
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_matmul_backward_input_gelu(dt, dpre, dact, dout, weight, pre, N, C, OC);
}

Status ComputeOps::queue_matmul_forward_gelu(DType dt, void* act, void* pre, const void* inp, const void* weight,
                                             const void* bias, int64_t N, int64_t C, int64_t OC) {
  STRATA_RETURN_IF_ERROR(queue_matmul_forward(dt, pre, inp, weight, bias, N, C, OC, OC));
  return queue_gelu_forward(dt, act, pre, N * OC);
}

Status ComputeOps::queue_matmul_backward_input_gelu(DType dt, void* dpre, void* dact, const void* dout,
                                                    const void* weight, const void* pre, int64_t N, int64_t C,
                                                    int64_t OC) {
  STRATA_RETURN_IF_ERROR(queue_matmul_backward(dt, dact, nullptr, nullptr, dout, nullptr, weight, N, C, OC, OC,
                                               GradStore::overwrite, GradStore::overwrite));
  return queue_gelu_backward(dt, dpre, pre, dact, N * C, GradStore::overwrite);
}

Status ComputeOps::gelu_forward(DType dt, void* out, const void* inp, int64_t n) {
  OpArgs a(*this, "gelu_forward");
  a.activations(dt).sizes({{"n", n}}).tensor("out", out, dt, {n}).tensor("inp", inp, dt, {n});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_gelu_forward(dt, out, inp, n);
}

Status ComputeOps::gelu_backward(DType dt, void* dinp, const void* inp, const void* dout, int64_t n,
                                 GradStore store) {
  OpArgs a(*this, "gelu_backward");
  a.activations(dt).sizes({{"n", n}}).tensor("dinp", dinp, dt, {n});
  a.tensor("inp", inp, dt, {n}).tensor("dout", dout, dt, {n});
  a.require(dinp != dout || n == 0, "dinp must not alias dout");
  a.require(store == GradStore::add || dinp != inp || n == 0, "an overwritten dinp must not alias inp");
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_gelu_backward(dt, dinp, inp, dout, n, store);
}

Status ComputeOps::swiglu_forward(DType dt, void* out, const void* inp, int64_t N, int64_t H) {
  OpArgs a(*this, "swiglu_forward");
  a.activations(dt).sizes({{"N", N}, {"H", H}});
  a.tensor("out", out, dt, {N, H}).tensor("inp", inp, dt, {N, 2, H});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_swiglu_forward(dt, out, inp, N, H);
}

Status ComputeOps::swiglu_backward(DType dt, void* dinp, const void* inp, const void* dout, int64_t N, int64_t H,
                                   GradStore store) {
  OpArgs a(*this, "swiglu_backward");
  a.activations(dt).sizes({{"N", N}, {"H", H}});
  a.tensor("dinp", dinp, dt, {N, 2, H}).tensor("inp", inp, dt, {N, 2, H}).tensor("dout", dout, dt, {N, H});
  a.require(store == GradStore::add || dinp != inp || N * H == 0, "an overwritten dinp must not alias inp");
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_swiglu_backward(dt, dinp, inp, dout, N, H, store);
}

Status ComputeOps::residual_forward(DType dt, void* out, const void* a_in, const void* b_in, int64_t n) {
  OpArgs a(*this, "residual_forward");
  a.activations(dt).sizes({{"n", n}});
  a.tensor("out", out, dt, {n}).tensor("a", a_in, dt, {n}).tensor("b", b_in, dt, {n});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_residual_forward(dt, out, a_in, b_in, n);
}

Status ComputeOps::residual_backward(DType dt, void* da, void* db, const void* dout, int64_t n) {
  OpArgs a(*this, "residual_backward");
  a.activations(dt).sizes({{"n", n}});
  a.tensor("da", da, dt, {n}, true).tensor("db", db, dt, {n}, true).tensor("dout", dout, dt, {n});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_residual_backward(dt, da, db, dout, n);
}

Status ComputeOps::encoder_forward(DType dt, void* out, const int32_t* tokens, const void* wte, const void* wpe,
                                   int64_t B, int64_t T, int64_t C, int64_t V, int64_t row_begin) {
  OpArgs a(*this, "encoder_forward");
  check_embedding_args(a.activations(dt), {{"B", B}, {"T", T}, {"C", C}, {"V", V}}, row_begin);
  a.tensor("out", out, dt, {B, T, C}).tensor("tokens", tokens, 4, {B, T});
  a.tensor("wte", wte, dt, {V, C}).tensor("wpe", wpe, dt, {T, C});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_encoder_forward(dt, out, tokens, wte, wpe, B, T, C, V, row_begin);
}

Status ComputeOps::encoder_backward(DType dt, void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                                    int64_t B, int64_t T, int64_t C, int64_t V, int64_t row_begin) {
  OpArgs a(*this, "encoder_backward");
  check_embedding_args(a.activations(dt), {{"B", B}, {"T", T}, {"C", C}, {"V", V}}, row_begin);
  a.tensor("dwte", dwte, dt, {V, C}, true).tensor("dwpe", dwpe, dt, {T, C}, true);
  a.tensor("dout", dout, dt, {B, T, C}).tensor("tokens", tokens, 4, {B, T});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_encoder_backward(dt, dwte, dwpe, dout, tokens, B, T, C, V, row_begin);
}

Status ComputeOps::token_embedding_forward(DType dt, void* out, const int32_t* tokens, const void* wte, int64_t N,
                                           int64_t C, int64_t V, int64_t row_begin) {
  OpArgs a(*this, "token_embedding_forward");
  check_embedding_args(a.activations(dt), {{"N", N}, {"C", C}, {"V", V}}, row_begin);
  a.tensor("out", out, dt, {N, C}).tensor("tokens", tokens, 4, {N}).tensor("wte", wte, dt, {V, C});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_token_embedding_forward(dt, out, tokens, wte, N, C, V, row_begin);
}

Status ComputeOps::token_embedding_backward(DType dt, void* dwte, const void* dout, const int32_t* tokens,
                                            int64_t N, int64_t C, int64_t V, int64_t row_begin) {
  OpArgs a(*this, "token_embedding_backward");
  check_embedding_args(a.activations(dt), {{"N", N}, {"C", C}, {"V", V}}, row_begin);
  a.tensor("dwte", dwte, dt, {V, C}).tensor("dout", dout, dt, {N, C}).tensor("tokens", tokens, 4, {N});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_token_embedding_backward(dt, dwte, dout, tokens, N, C, V, row_begin);
}

namespace {

void check_rope_args(OpArgs& a, int64_t B, int64_t T, int64_t NH, int64_t HS, float theta, int64_t pos_offset) {
  a.sizes({{"B", B}, {"T", T}, {"NH", NH}, {"HS", HS}, {"pos_offset", pos_offset}});
  a.require(HS % 2 == 0, "head size HS = {} must be even (RoPE rotates pairs i, i + HS/2)", HS);
  a.require(positive_finite(theta), "theta = {} must be positive and finite", theta);
}

void check_attention_args(OpArgs& a, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  a.sizes({{"B", B}, {"T", T}, {"NH", NH}, {"NKV", NKV}, {"HS", HS}});
  a.require(NKV >= 1 && HS >= 1, "NKV = {} and HS = {} must be at least 1", NKV, HS);
  a.require(NKV >= 1 && NH % NKV == 0, "NH = {} query heads must be a multiple of NKV = {} kv heads", NH, NKV);
}

}  // namespace

Status ComputeOps::rope_forward(DType dt, void* out, const void* inp, int64_t B, int64_t T, int64_t NH, int64_t HS,
                                float theta, int64_t pos_offset, int64_t stride) {
  OpArgs a(*this, "rope_forward");
  a.activations(dt);
  check_rope_args(a, B, T, NH, HS, theta, pos_offset);
  const int64_t ld = a.row_stride("stride", stride, "NH * HS", NH * HS);
  a.strided("out", out, dt, B * T, NH * HS, ld).strided("inp", inp, dt, B * T, NH * HS, ld);
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_rope_forward(dt, out, inp, B, T, NH, HS, theta, pos_offset, stride);
}

Status ComputeOps::rope_backward(DType dt, void* dinp, const void* dout, int64_t B, int64_t T, int64_t NH,
                                 int64_t HS, float theta, int64_t pos_offset, int64_t stride) {
  OpArgs a(*this, "rope_backward");
  a.activations(dt);
  check_rope_args(a, B, T, NH, HS, theta, pos_offset);
  const int64_t ld = a.row_stride("stride", stride, "NH * HS", NH * HS);
  a.strided("dinp", dinp, dt, B * T, NH * HS, ld).strided("dout", dout, dt, B * T, NH * HS, ld);
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_rope_backward(dt, dinp, dout, B, T, NH, HS, theta, pos_offset, stride);
}

Status ComputeOps::attention_forward(DType dt, void* out, float* lse, const void* q, const void* k, const void* v,
                                     int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t qkv_stride) {
  OpArgs a(*this, "attention_forward");
  a.activations(dt);
  check_attention_args(a, B, T, NH, NKV, HS);
  a.row_stride("qkv_stride", qkv_stride, "NH * HS", NH * HS);  // checked; an invalid one stops the checks below
  const auto [q_ld, kv_ld] = kernels::qkv_row_strides(NH, NKV, HS, qkv_stride);
  a.tensor("out", out, dt, {B, T, NH, HS}).tensor("lse", lse, 4, {B, NH, T});
  a.strided("q", q, dt, B * T, NH * HS, q_ld).strided("k", k, dt, B * T, NKV * HS, kv_ld);
  a.strided("v", v, dt, B * T, NKV * HS, kv_ld);
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_attention_forward(dt, out, lse, q, k, v, B, T, NH, NKV, HS, qkv_stride);
}

Status ComputeOps::attention_backward(DType dt, void* dq, void* dk, void* dv, const void* dout, const void* q,
                                      const void* k, const void* v, const void* out, const float* lse, int64_t B,
                                      int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t qkv_stride) {
  OpArgs a(*this, "attention_backward");
  a.activations(dt);
  check_attention_args(a, B, T, NH, NKV, HS);
  a.row_stride("qkv_stride", qkv_stride, "NH * HS", NH * HS);  // checked; an invalid one stops the checks below
  const auto [q_ld, kv_ld] = kernels::qkv_row_strides(NH, NKV, HS, qkv_stride);
  a.strided("dq", dq, dt, B * T, NH * HS, q_ld).strided("dk", dk, dt, B * T, NKV * HS, kv_ld);
  a.strided("dv", dv, dt, B * T, NKV * HS, kv_ld).tensor("dout", dout, dt, {B, T, NH, HS});
  a.strided("q", q, dt, B * T, NH * HS, q_ld).strided("k", k, dt, B * T, NKV * HS, kv_ld);
  a.strided("v", v, dt, B * T, NKV * HS, kv_ld);
  a.tensor("out", out, dt, {B, T, NH, HS}).tensor("lse", lse, 4, {B, NH, T});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_attention_backward(dt, dq, dk, dv, dout, q, k, v, out, lse, B, T, NH, NKV, HS, qkv_stride);
}

Status ComputeOps::crossentropy_forward(DType dt, float* lse, float* losses, kernels::CrossEntropyResult* result,
                                        const void* logits, const int32_t* targets, int64_t N, int64_t V,
                                        int64_t logits_stride) {
  OpArgs a(*this, "crossentropy_forward");
  a.activations(dt).sizes({{"N", N}, {"V", V}}).require(V >= 1, "vocabulary size V = {} must be at least 1", V);
  const int64_t ldl = a.row_stride("logits_stride", logits_stride, "V", V);
  a.tensor("lse", lse, 4, {N}).tensor("losses", losses, 4, {N});
  a.tensor("result", result, sizeof(kernels::CrossEntropyResult), {1}, true);
  a.strided("logits", logits, dt, N, V, ldl).tensor("targets", targets, 4, {N});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_crossentropy_forward(dt, lse, losses, result, logits, targets, N, V, ldl);
}

Status ComputeOps::crossentropy_backward(DType dt, void* dlogits, const void* logits, const float* lse,
                                         const int32_t* targets, float dloss, int64_t N, int64_t V,
                                         int64_t logits_stride) {
  OpArgs a(*this, "crossentropy_backward");
  a.activations(dt).sizes({{"N", N}, {"V", V}}).require(V >= 1, "vocabulary size V = {} must be at least 1", V);
  const int64_t ldl = a.row_stride("logits_stride", logits_stride, "V", V);
  a.require(dlogits != logits, "dlogits must not alias logits; use crossentropy_backward_inplace");
  a.strided("dlogits", dlogits, dt, N, V, ldl).strided("logits", logits, dt, N, V, ldl);
  a.tensor("lse", lse, 4, {N}).tensor("targets", targets, 4, {N});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_crossentropy_backward(dt, dlogits, logits, lse, targets, dloss, N, V, ldl);
}

Status ComputeOps::crossentropy_backward_inplace(DType dt, void* logits_to_dlogits, const float* lse,
                                                 const int32_t* targets, float dloss, int64_t N, int64_t V,
                                                 int64_t logits_stride) {
  OpArgs a(*this, "crossentropy_backward_inplace");
  a.activations(dt).sizes({{"N", N}, {"V", V}}).require(V >= 1, "vocabulary size V = {} must be at least 1", V);
  const int64_t ldl = a.row_stride("logits_stride", logits_stride, "V", V);
  a.strided("logits_to_dlogits", logits_to_dlogits, dt, N, V, ldl);
  a.tensor("lse", lse, 4, {N}).tensor("targets", targets, 4, {N});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_crossentropy_backward_inplace(dt, logits_to_dlogits, lse, targets, dloss, N, V, ldl);
}

Status ComputeOps::crossentropy_forward_backward_inplace(DType dt, float* lse, float* losses,
                                                         kernels::CrossEntropyResult* result, void* logits_to_dlogits,
                                                         const int32_t* targets, float dloss, int64_t N, int64_t V,
                                                         int64_t logits_stride) {
  OpArgs a(*this, "crossentropy_forward_backward_inplace");
  a.activations(dt).sizes({{"N", N}, {"V", V}}).require(V >= 1, "vocabulary size V = {} must be at least 1", V);
  const int64_t ldl = a.row_stride("logits_stride", logits_stride, "V", V);
  a.tensor("lse", lse, 4, {N}).tensor("losses", losses, 4, {N});
  a.tensor("result", result, sizeof(kernels::CrossEntropyResult), {1}, true);
  a.strided("logits_to_dlogits", logits_to_dlogits, dt, N, V, ldl).tensor("targets", targets, 4, {N});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_crossentropy_forward_backward_inplace(dt, lse, losses, result, logits_to_dlogits, targets, dloss, N, V,
                                                     ldl);
}

Status ComputeOps::queue_crossentropy_forward_backward_inplace(DType dt, float* lse, float* losses,
                                                               kernels::CrossEntropyResult* result,
                                                               void* logits_to_dlogits, const int32_t* targets,
                                                               float dloss, int64_t N, int64_t V,
                                                               int64_t logits_stride) {
  STRATA_RETURN_IF_ERROR(
      queue_crossentropy_forward(dt, lse, losses, result, logits_to_dlogits, targets, N, V, logits_stride));
  return queue_crossentropy_backward_inplace(dt, logits_to_dlogits, lse, targets, dloss, N, V, logits_stride);
}

Status ComputeOps::cast(void* dst, DType to, const void* src, DType from, int64_t n) {
  OpArgs a(*this, "cast");
  a.float_format(to, "destination").float_format(from, "source").sizes({{"n", n}});
  a.tensor("dst", dst, to, {n}).tensor("src", src, from, {n});
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  const auto dst_bytes = static_cast<uintptr_t>(n) * dtype_size(to);
  const auto src_bytes = static_cast<uintptr_t>(n) * dtype_size(from);
  a.require(n == 0 || d + dst_bytes <= s || s + src_bytes <= d, "dst and src overlap; cast into a separate buffer");
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_cast(dst, to, src, from, n);
}

Status ComputeOps::grad_norm_squared(float* sum_squares, const void* grad, DType format, int64_t n) {
  OpArgs a(*this, "grad_norm_squared");
  a.float_format(format, "gradient").sizes({{"n", n}});
  a.tensor("sum_squares", sum_squares, 4, {1}).tensor("grad", grad, format, {n});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_grad_norm_squared(sum_squares, grad, format, n);
}

Status ComputeOps::accumulate_widened(float* acc, const void* src, DType format, int64_t n, bool first) {
  OpArgs a(*this, "accumulate_widened");
  a.float_format(format, "gradient").sizes({{"n", n}});
  a.tensor("acc", acc, 4, {n}).tensor("src", src, format, {n});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_accumulate_widened(acc, src, format, n, first);
}

Status ComputeOps::sum_squares_blocks(double* partials, const void* x, DType format, int64_t n) {
  OpArgs a(*this, "sum_squares_blocks");
  a.float_format(format, "gradient").sizes({{"n", n}});
  const int64_t blocks = (n + int64_t(kernels::kSumSquaresBlock) - 1) / int64_t(kernels::kSumSquaresBlock);
  a.tensor("partials", partials, 8, {blocks}).tensor("x", x, format, {n});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_sum_squares_blocks(partials, x, format, n);
}

Status ComputeOps::grad_check_finite(int32_t* all_finite, const void* grad, DType format, int64_t n) {
  OpArgs a(*this, "grad_check_finite");
  a.float_format(format, "gradient").sizes({{"n", n}});
  a.tensor("all_finite", all_finite, 4, {1}).tensor("grad", grad, format, {n});
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_grad_check_finite(all_finite, grad, format, n);
}

Status ComputeOps::adam_update(const kernels::AdamConstants& constants, const kernels::AdamFormats& formats,
                               const kernels::AdamSpan& span) {
  OpArgs a(*this, "adam_update");
  const auto n = static_cast<int64_t>(span.n);
  a.require(n >= 0, "span of {} elements is too large", span.n);
  a.tensor("param", span.param, 4, {n}).tensor("m", span.m, 4, {n}).tensor("v", span.v, 4, {n});
  a.tensor("grad", span.grad, kernels::float_format_size(formats.grad), {n});
  a.tensor("copy_out", span.copy_out, kernels::copy_out_size(formats.copy), {n});
  a.require(span.n == 0 || (span.param != span.m && span.param != span.v && span.m != span.v),
            "param, m and v must be separate buffers");
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_adam_update(constants, formats, span);
}

Status ComputeOps::adam8bit_update(const kernels::AdamConstants& constants, const kernels::AdamFormats& formats,
                                   const kernels::Adam8bitSpan& span) {
  OpArgs a(*this, "adam8bit_update");
  const auto n = static_cast<int64_t>(span.n);
  const auto blocks = static_cast<int64_t>(kernels::adam8bit_blocks(span.n));
  a.require(n >= 0, "span of {} elements is too large", span.n);
  a.tensor("param", span.param, 4, {n}).tensor("m_code", span.m_code, 1, {n}).tensor("v_code", span.v_code, 1, {n});
  a.tensor("m_scale", span.m_scale, 4, {blocks}).tensor("v_scale", span.v_scale, 4, {blocks});
  a.tensor("grad", span.grad, kernels::float_format_size(formats.grad), {n});
  a.tensor("copy_out", span.copy_out, kernels::copy_out_size(formats.copy), {n});
  a.require(span.n == 0 || static_cast<const void*>(span.m_scale) != static_cast<const void*>(span.v_scale),
            "m_scale and v_scale must be separate buffers");
  STRATA_RETURN_IF_ERROR(a.status());
  return queue_adam8bit_update(constants, formats, span);
}

}  // namespace strata
