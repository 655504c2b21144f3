// The fixture of the backend conformance suite (backend_ops_suite.h): one backend per test (the
// parameter names its kind and activation dtype), device tensors with guard bytes, and value
// comparisons. Every tensor is allocated with kGuard extra bytes on each side; the whole block is
// filled with kSentinel through the backend, and every read-back checks both guards are intact, so
// an op writing past its output (or into an input) fails the test. Test-only.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_required.h"

#include "kernels/cpu/half.h"
#include "runtime/backend.h"

namespace strata::ops_test {

struct OpsParam {
  BackendKind kind;
  DType dtype;  // activations of the op tests
};

inline std::string ops_param_name(const ::testing::TestParamInfo<OpsParam>& info) {
  return std::string(backend_kind_name(info.param.kind)) + "_" + std::string(dtype_name(info.param.dtype));
}
inline void PrintTo(const OpsParam& p, std::ostream* os) {
  *os << backend_kind_name(p.kind) << " backend, " << dtype_name(p.dtype) << " activations";
}

inline constexpr uint64_t kGuard = 256;       // bytes each side; keeps the data 256-byte aligned
inline constexpr uint8_t kSentinel = 0x7b;    // 0x7b7b7b7b is 1.3e36 as fp32: never a real result

// |got - want| <= atol + rtol * |want|.
struct Tol {
  double atol, rtol;
};

// fp32 outputs: sums of <= 64 products of O(1) values, each rounding ~6e-8 relative, plus a few
// ulps from exp/tanh: 1e-5 absolute + 1e-4 relative leaves 10x margin.
inline constexpr Tol kF32{1e-5, 1e-4};

// Unit roundoff u of a stored float: half an ulp relative, 2^-p for p significant bits (fp32 24,
// fp16 11, bf16 8).
inline double unit_roundoff(DType dt) {
  switch (dt) {
    case DType::bf16: return 0x1p-8;
    case DType::f16: return 0x1p-11;
    default: return 0x1p-24;
  }
}

// Tolerance of an op's activation outputs and gradients in `dt`. The references read the inputs
// as stored (already rounded to dt), so a 16-bit result x' = round(x) differs from the float64
// reference `want` only by the fp32 arithmetic inside the op, e = |x - want| <= kF32, and by the
// one rounding of the stored result, |x' - x| <= u |x| (a += gradient is rounded once, from
// old + delta): |x' - want| <= u |want| + (1 + u) e ~ kF32.atol + (kF32.rtol + u) |want|, so
// rtol = kF32.rtol + u is a bound, not a guess. atol = kF32.atol + u adds u at the suite's O(1)
// values for the one error not proportional to the result: an op that reads a tensor an earlier
// op stored in dt (attention's backward reads the forward's out, so D = dout . out carries ~u per
// term). Measured on the CPU backend: relative errors <= 1.0 u wherever the result is not ~0, and
// the worst excess over u |want| is 0.06 u (attention dk, dq), in bf16 and fp16 alike.
// bf16: {3.9e-3, 4.0e-3}; fp16: {5.0e-4, 5.9e-4}. (A stricter check of the rounding itself is
// AccumulatingIntoAGradientRoundsOnce, bit for bit.)
inline Tol activation_tol(DType dt) {
  if (dt == DType::f32) return kF32;
  const double u = unit_roundoff(dt);
  return Tol{kF32.atol + u, kF32.rtol + u};
}

// A device tensor inside a guarded block. `host` holds the values as the device stores them
// (rounded to the dtype), which is what the float64 references read.
struct Tensor {
  std::byte* block = nullptr;
  void* data = nullptr;
  DType dt = DType::f32;
  int64_t n = 0;
  std::vector<double> host;
  uint64_t bytes() const { return static_cast<uint64_t>(n) * dtype_size(dt); }
  float* f() const { return static_cast<float*>(data); }
  int32_t* i() const { return static_cast<int32_t*>(data); }
};

class BackendOpsTest : public ::testing::TestWithParam<OpsParam> {
 protected:
  void SetUp() override {
    std::string why;
    if (GetParam().kind == BackendKind::cuda && !cuda_available(&why)) STRATA_GPU_SKIP(why);
    BackendOptions options;
    options.kind = GetParam().kind;
    options.memory_budget = 64ull << 20;
    StatusOr<std::unique_ptr<Backend>> b = make_backend(options);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    backend_ = std::move(b).value();
  }

  void TearDown() override {
    if (!backend_) return;
    EXPECT_TRUE(backend_->synchronize_all().is_ok());
    for (std::byte* block : blocks_) EXPECT_TRUE(backend_->release(block).is_ok());
  }

  DType dt() const { return GetParam().dtype; }
  Backend& backend() { return *backend_; }
  ComputeOps& ops() { return backend_->ops(); }
  // Tolerance of activation outputs and gradients in this run's dtype.
  Tol act_tol() const { return activation_tol(dt()); }
  // x as a tensor of this run's dtype stores it (fp32 x rounded to nearest even for 16 bits).
  double stored(double x) const {
    uint8_t bytes[4];
    encode(bytes, dt(), 0, &x);
    return x;
  }

  // A guarded tensor of n elements of `dt` holding `values` (rounded to dt), or only sentinel
  // bytes when `values` is empty.
  Tensor tensor(DType dtype, int64_t n, const std::vector<double>& values = {}) {
    Tensor t;
    t.dt = dtype;
    t.n = n;
    StatusOr<void*> block = backend_->allocate(t.bytes() + 2 * kGuard, "ops test");
    EXPECT_TRUE(block.is_ok()) << block.status().to_string();
    if (!block.is_ok()) return t;
    t.block = static_cast<std::byte*>(*block);
    t.data = t.block + kGuard;
    blocks_.push_back(t.block);
    std::vector<uint8_t> image(t.bytes() + 2 * kGuard, kSentinel);
    if (!values.empty()) {
      t.host = values;
      for (int64_t i = 0; i < n; ++i) encode(&image[kGuard], dtype, i, &t.host[i]);
    }
    EXPECT_TRUE(backend_->copy_to_device(t.block, image.data(), image.size(), Stream::h2d).is_ok());
    EXPECT_TRUE(backend_->synchronize(Stream::h2d).is_ok());
    return t;
  }
  Tensor act(int64_t n, const std::vector<double>& values = {}) { return tensor(dt(), n, values); }
  Tensor f32(int64_t n, const std::vector<double>& values = {}) { return tensor(DType::f32, n, values); }
  Tensor ints(const std::vector<int32_t>& values) {
    return tensor(DType::i32, static_cast<int64_t>(values.size()), std::vector<double>(values.begin(), values.end()));
  }

  std::vector<double> random(int64_t n, double lo = -1.0, double hi = 1.0) {
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<double> v(n);
    for (double& x : v) x = u(rng_);
    return v;
  }

  // The raw bytes of t's data after all queued compute, with both guards checked.
  std::vector<uint8_t> read_bytes(const Tensor& t) {
    auto done = backend_->create_event();
    EXPECT_TRUE(backend_->record(*done, Stream::compute).is_ok());
    EXPECT_TRUE(backend_->wait(Stream::d2h, *done).is_ok());
    std::vector<uint8_t> image(t.bytes() + 2 * kGuard);
    EXPECT_TRUE(backend_->copy_to_host(image.data(), t.block, image.size(), Stream::d2h).is_ok());
    Status synced = backend_->synchronize(Stream::d2h);
    EXPECT_TRUE(synced.is_ok()) << synced.to_string();
    for (uint64_t g = 0; g < kGuard; ++g) {
      EXPECT_EQ(image[g], kSentinel) << "guard byte " << g << " before the tensor was overwritten";
      EXPECT_EQ(image[kGuard + t.bytes() + g], kSentinel) << "guard byte " << g << " after the tensor was overwritten";
      if (image[g] != kSentinel || image[kGuard + t.bytes() + g] != kSentinel) break;
    }
    return std::vector<uint8_t>(image.begin() + kGuard, image.end() - kGuard);
  }

  // t's values after all queued compute, as doubles (guards checked).
  std::vector<double> read(const Tensor& t) {
    const std::vector<uint8_t> bytes = read_bytes(t);
    std::vector<double> v(t.n);
    for (int64_t i = 0; i < t.n; ++i) v[i] = decode(bytes.data(), t.dt, i);
    return v;
  }

  // Every element within tolerance; prints the first few that are not.
  static void expect_near(const std::vector<double>& got, const std::vector<double>& want, Tol tol,
                          const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double limit = tol.atol + tol.rtol * std::abs(want[i]);
      if (!(std::abs(got[i] - want[i]) <= limit) && bad++ < 5) {
        ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i] << " (limit " << limit << ")";
      }
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements out of tolerance";
  }

 private:
  // Stores *value into element i as `dtype` and replaces *value by what was stored.
  static void encode(uint8_t* dst, DType dtype, int64_t i, double* value) {
    const float x = static_cast<float>(*value);
    switch (dtype) {
      case DType::bf16: {
        const uint16_t h = kernels::float_to_bf16(x);
        std::memcpy(dst + 2 * i, &h, 2);
        break;
      }
      case DType::f16: {
        const uint16_t h = kernels::float_to_fp16(x);
        std::memcpy(dst + 2 * i, &h, 2);
        break;
      }
      case DType::i32: {
        const auto k = static_cast<int32_t>(*value);
        std::memcpy(dst + 4 * i, &k, 4);
        break;
      }
      default: std::memcpy(dst + 4 * i, &x, 4);
    }
    *value = decode(dst, dtype, i);
  }

  static double decode(const uint8_t* src, DType dtype, int64_t i) {
    uint16_t h;
    switch (dtype) {
      case DType::bf16: std::memcpy(&h, src + 2 * i, 2); return kernels::bf16_to_float(h);
      case DType::f16: std::memcpy(&h, src + 2 * i, 2); return kernels::fp16_to_float(h);
      case DType::i32: {
        int32_t k;
        std::memcpy(&k, src + 4 * i, 4);
        return k;
      }
      default: {
        float x;
        std::memcpy(&x, src + 4 * i, 4);
        return x;
      }
    }
  }

  std::unique_ptr<Backend> backend_;
  std::vector<std::byte*> blocks_;
  std::mt19937 rng_{20261121};
};

}  // namespace strata::ops_test
