// The tiled attention kernels (kernels/cuda/flash_attention.cu) compiled for the host and run on the
// CPU under tests/kernels/flash_emulation.h: their tile walks, masks, skips, barriers, cp.async
// waits and mma/ldmatrix fragment layouts, checked without a GPU. Against the CPU reference
// (kernels/cpu/ops_attention.h) at whole and partial tiles, grouped heads, head sizes 64 and 128
// and gradients accumulated onto non-zero values; and the same bits for 32 rows a warp as for 16
// (flash::WarpRows), with the per-row scratch as without, and with q, k, v and their gradients as
// column blocks of one tensor (qkv_stride) as packed. The emulated mma sums in another
// order than the tensor cores, so these are not the GPU's bits: the gpu tests
// (cuda_flash_attention_gpu_test.cc) hold those; this test holds the logic where no GPU is.
// Built with the CUDA backend (it needs the CUDA headers only); CTest label `kernels`.
#include <gtest/gtest.h>

#include "tests/kernels/flash_emulation.h"
// The emulation above, not flash_primitives.cuh's PTX.
#define STRATA_FLASH_EMULATION 1
#include "kernels/cuda/flash_attention.cu"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/ops_attention.h"
#include "tests/kernels/ops_test_support.h"

namespace strata::kernels::cuda::flash {
namespace {

using strata::kernels::testing::all_close;
using strata::kernels::testing::random_floats;

template <typename T>
constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;

// A host tensor of T: its 16-bit elements, and their values.
template <typename T>
struct HostTensor {
  std::vector<uint16_t> bits;
  explicit HostTensor(const std::vector<float>& values) : bits(values.size()) {
    for (size_t i = 0; i < values.size(); ++i) bits[i] = float_to_half(emulated::kFormat<T>, values[i]);
  }
  T* data() { return reinterpret_cast<T*>(bits.data()); }
  std::vector<float> values() const {
    std::vector<float> v(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) v[i] = half_to_float(emulated::kFormat<T>, bits[i]);
    return v;
  }
};

std::vector<double> widen(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

struct Case {
  int64_t B, T_len, NH, NKV, HS;
};

// Tolerances of the gpu tests (cuda_gpu_test_support.h's reduction_tolerance): fp32 sums in another
// order than the CPU's, one rounding of each output to T.
template <typename T>
std::pair<double, double> tolerance() {
  if constexpr (kBf16<T>) return {3e-2, 2e-2};
  return {7.5e-3, 5e-3};
}

// q, k, v (or dq, dk, dv) as column blocks of one (B * T, stride) tensor, as the fused projection
// leaves them (attention.cuh's qkv_stride); the padding columns hold NaN, which must stay.
template <typename T>
struct FusedRows {
  HostTensor<T> all;
  int64_t rows, stride, widths[3], begins[3];
  FusedRows(const Case& c, int64_t stride_, const std::vector<float>* parts[3])
      : all(std::vector<float>(static_cast<size_t>(c.B * c.T_len * stride_), std::numeric_limits<float>::quiet_NaN())),
        rows(c.B * c.T_len), stride(stride_), widths{c.NH * c.HS, c.NKV * c.HS, c.NKV * c.HS},
        begins{0, c.NH * c.HS, (c.NH + c.NKV) * c.HS} {
    for (int p = 0; p < 3; ++p) {
      const HostTensor<T> packed(*parts[p]);
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(&all.bits[size_t(r * stride + begins[p])], &packed.bits[size_t(r * widths[p])],
                    size_t(widths[p]) * 2);
    }
  }
  T* part(int p) { return all.data() + begins[p]; }
  std::vector<float> values(int p) const {
    const std::vector<float> v = all.values();
    std::vector<float> packed(size_t(rows * widths[p]));
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(&packed[size_t(r * widths[p])], &v[size_t(r * stride + begins[p])], size_t(widths[p]) * 4);
    return packed;
  }
  bool padding_intact() const {
    const std::vector<float> v = all.values();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = begins[2] + widths[2]; col < stride; ++col)
        if (!std::isnan(v[size_t(r * stride + col)])) return false;
    return true;
  }
};

// Everything one WarpRows choice computes for a case: out, lse, then dq, dk, dv without and with
// scratch. qkv_stride 0: q, k, v and their gradients packed; else column blocks of one tensor each.
template <typename T>
std::vector<std::vector<float>> run_kernels(const Case& c, WarpRows rows, const std::vector<std::vector<float>>& in,
                                            const std::vector<float>& out_ref, const std::vector<float>& lse_ref,
                                            int64_t qkv_stride = 0) {
  const int64_t nq = c.B * c.T_len * c.NH * c.HS, nl = c.B * c.NH * c.T_len;
  HostTensor<T> q(in[0]), k(in[1]), v(in[2]), dout(in[3]), out(std::vector<float>(static_cast<size_t>(nq)));
  const std::vector<float>* qkv_parts[3] = {&in[0], &in[1], &in[2]};
  const int64_t fused_stride = qkv_stride != 0 ? qkv_stride : (c.NH + 2 * c.NKV) * c.HS;  // unused when 0
  FusedRows<T> qkv(c, fused_stride, qkv_parts);
  T* const qp = qkv_stride != 0 ? qkv.part(0) : q.data();
  T* const kp = qkv_stride != 0 ? qkv.part(1) : k.data();
  T* const vp = qkv_stride != 0 ? qkv.part(2) : v.data();
  HostTensor<T> out_t(out_ref);
  std::vector<float> lse(static_cast<size_t>(nl)), lse_in = lse_ref;
  std::vector<std::vector<float>> results;
  EXPECT_EQ(forward<T>(out.data(), lse.data(), qp, kp, vp, c.B, c.T_len, c.NH, c.NKV, c.HS, nullptr, qkv_stride, rows),
            cudaSuccess);
  results.push_back(out.values());
  results.push_back(lse);
  for (const bool with_scratch : {false, true}) {
    HostTensor<T> dq(in[4]), dk(in[5]), dv(in[6]);
    const std::vector<float>* grad_parts[3] = {&in[4], &in[5], &in[6]};
    FusedRows<T> dqkv(c, fused_stride, grad_parts);
    std::vector<float> scratch(static_cast<size_t>(2 * nl), std::numeric_limits<float>::quiet_NaN());
    EXPECT_EQ(backward<T>(qkv_stride != 0 ? dqkv.part(0) : dq.data(), qkv_stride != 0 ? dqkv.part(1) : dk.data(),
                          qkv_stride != 0 ? dqkv.part(2) : dv.data(), dout.data(), qp, kp, vp, out_t.data(),
                          lse_in.data(), c.B, c.T_len, c.NH, c.NKV, c.HS, nullptr,
                          with_scratch ? scratch.data() : nullptr, with_scratch ? scratch.size() : 0, qkv_stride,
                          rows),
              cudaSuccess);
    if (qkv_stride != 0) {
      EXPECT_TRUE(dqkv.padding_intact()) << "a gradient written outside its columns";
      for (int p = 0; p < 3; ++p) results.push_back(dqkv.values(p));
    } else {
      results.push_back(dq.values());
      results.push_back(dk.values());
      results.push_back(dv.values());
    }
  }
  return results;
}

template <typename T>
class FlashAttentionEmulated : public ::testing::Test {};
using HalfTypes = ::testing::Types<__nv_bfloat16, __half>;
struct HalfTypeNames {
  template <typename T>
  static std::string GetName(int) {
    return kBf16<T> ? "bf16" : "fp16";
  }
};
TYPED_TEST_SUITE(FlashAttentionEmulated, HalfTypes, HalfTypeNames);

TYPED_TEST(FlashAttentionEmulated, MatchesCpuAndEveryWarpRowsChoiceGivesTheSameBits) {
  using T = TypeParam;
  // T 1 and 65: one partial tile; 130 and 200: a partial 128-row block (warps whose rows all lie
  // past T, warps that skip a block's last key tile or first query tile); NH / NKV 1, 2 and 3.
  for (const Case c : {Case{1, 1, 2, 1, 64}, Case{2, 65, 4, 2, 64}, Case{1, 130, 2, 2, 64}, Case{1, 200, 3, 1, 64},
                       Case{1, 70, 2, 1, 128}}) {
    SCOPED_TRACE(::testing::Message() << "B " << c.B << " T " << c.T_len << " NH " << c.NH << " NKV " << c.NKV
                                      << " HS " << c.HS);
    const int64_t nq = c.B * c.T_len * c.NH * c.HS, nkv = c.B * c.T_len * c.NKV * c.HS, nl = c.B * c.NH * c.T_len;
    // Inputs, rounded to T: q, k (scores of a few units), v, dout, and the gradients' starting values.
    std::vector<std::vector<float>> in;
    const int64_t sizes[] = {nq, nkv, nkv, nq, nq, nkv, nkv};
    for (int i = 0; i < 7; ++i) {
      const float span = i < 2 ? 2.0f : 1.0f;
      in.push_back(HostTensor<T>(random_floats(static_cast<size_t>(sizes[i]), 81 + i, -span, span)).values());
    }
    std::vector<float> out(static_cast<size_t>(nq)), lse(static_cast<size_t>(nl));
    attention_forward(out.data(), lse.data(), in[0].data(), in[1].data(), in[2].data(), c.B, c.T_len, c.NH, c.NKV,
                      c.HS);
    const std::vector<float> out_t = HostTensor<T>(out).values();
    std::vector<float> dq = in[4], dk = in[5], dv = in[6];
    attention_backward(dq.data(), dk.data(), dv.data(), in[3].data(), in[0].data(), in[1].data(), in[2].data(),
                       out_t.data(), lse.data(), c.B, c.T_len, c.NH, c.NKV, c.HS);

    std::vector<WarpRows> choices = {WarpRows::m16};
    if (c.HS == 64) choices.push_back(WarpRows::m32);
    std::vector<std::vector<std::vector<float>>> runs;
    for (const WarpRows rows : choices) runs.push_back(run_kernels<T>(c, rows, in, out_t, lse));

    const auto [atol, rtol] = tolerance<T>();
    const std::vector<float>* want[] = {&out, &lse, &dq, &dk, &dv};
    const char* names[] = {"out", "lse", "dq", "dk", "dv", "dq (scratch)", "dk (scratch)", "dv (scratch)"};
    for (size_t r = 0; r < runs.size(); ++r) {
      SCOPED_TRACE(r == 0 ? "16 rows a warp" : "32 rows a warp");
      ASSERT_EQ(runs[r].size(), 8u);
      for (size_t i = 0; i < 8; ++i) {
        const size_t w = i < 5 ? i : i - 3;
        // lse: fp32 sums of exp2 instead of exp, in another order (relative 1e-5 of ~log(T) + 4).
        const double a = w == 1 ? 2e-5 : atol, rt = w == 1 ? 2e-5 : rtol;
        EXPECT_TRUE(all_close(runs[r][i], widen(*want[w]), a, rt)) << names[i];
      }
      for (size_t i = 2; i < 5; ++i)
        EXPECT_EQ(std::memcmp(runs[r][i].data(), runs[r][i + 3].data(), runs[r][i].size() * sizeof(float)), 0)
            << names[i] << ": the per-row scratch changed a bit";
    }
    for (size_t r = 1; r < runs.size(); ++r)
      for (size_t i = 0; i < 8; ++i)
        EXPECT_EQ(std::memcmp(runs[0][i].data(), runs[r][i].data(), runs[0][i].size() * sizeof(float)), 0)
            << names[i] << ": 32 rows a warp changed a bit";

    // q, k, v (and their gradients) as column blocks of one tensor with padded rows, as the fused
    // projection leaves them: the same bits as packed (for the widest choice, the automatic one).
    const int64_t qkv_stride = (c.NH + 2 * c.NKV) * c.HS + 8;
    const std::vector<std::vector<float>> fused = run_kernels<T>(c, choices.back(), in, out_t, lse, qkv_stride);
    ASSERT_EQ(fused.size(), 8u);
    for (size_t i = 0; i < 8; ++i)
      EXPECT_EQ(std::memcmp(runs.back()[i].data(), fused[i].data(), fused[i].size() * sizeof(float)), 0)
          << names[i] << ": the row stride of q, k, v changed a bit";
  }
}

TYPED_TEST(FlashAttentionEmulated, ARowStrideThatBreaksSixteenByteRowsIsRefused) {
  using T = TypeParam;
  EXPECT_FALSE(supported<T>(64, 3 * 64 + 4, {}));
  EXPECT_TRUE(supported<T>(64, 3 * 64 + 8, {}));
  std::vector<uint16_t> x(4 * 64 * 256);
  std::vector<float> l(64);
  T* p = reinterpret_cast<T*>(x.data());
  EXPECT_EQ(forward<T>(p, l.data(), p, p, p, 1, 64, 1, 1, 64, nullptr, 3 * 64 + 4), cudaErrorInvalidValue);
  EXPECT_EQ(forward<T>(p, l.data(), p, p, p, 1, 64, 2, 1, 64, nullptr, 64), cudaErrorInvalidValue)
      << "a stride shorter than q's row";
}

TYPED_TEST(FlashAttentionEmulated, ThirtyTwoRowsAtHeadSize128IsRefused) {
  using T = TypeParam;
  std::vector<uint16_t> x(64 * 128);
  std::vector<float> l(64);
  T* p = reinterpret_cast<T*>(x.data());
  EXPECT_EQ(forward<T>(p, l.data(), p, p, p, 1, 64, 1, 1, 128, nullptr, 0, WarpRows::m32), cudaErrorInvalidValue);
  EXPECT_EQ(backward<T>(p, p, p, p, p, p, p, p, l.data(), 1, 64, 1, 1, 128, nullptr, nullptr, 0, 0, WarpRows::m32),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace strata::kernels::cuda::flash
