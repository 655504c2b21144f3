// Test support for the kernels/cuda GPU tests (tests/kernels/*_gpu_test.cc): the honest skip when
// no CUDA device is usable, device buffers with guard bytes on both sides (checked after a kernel),
// host<->device transfers of float data as fp32, bf16 or fp16, rounding through the 16-bit type so
// the CPU reference sees exactly the inputs the GPU does, and per-type tolerances with their
// reasons. Header-only; compiled only with STRATA_HAVE_CUDA. Not a tensor library.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "gpu_required.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/half.h"
#include "tests/kernels/ops_test_support.h"

namespace strata::kernels::cuda::testing {

// Empty when a CUDA device is usable, otherwise why not (the CUDA error string).
inline std::string cuda_unavailable_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorString(e);
  if (count == 0) return "no CUDA device visible";
  return "";
}

#define STRATA_SKIP_WITHOUT_CUDA()                                                          \
  do {                                                                                      \
    const std::string strata_cuda_reason = ::strata::kernels::cuda::testing::cuda_unavailable_reason(); \
    if (!strata_cuda_reason.empty()) STRATA_GPU_SKIP(strata_cuda_reason);                  \
  } while (0)

inline constexpr size_t kGuardBytes = 256;
inline constexpr unsigned char kGuardByte = 0xA5;

// The element types every kernels/cuda activation op is built for, named fp32/bf16/fp16 in test
// names (TYPED_TEST_SUITE(Suite, ElementTypes, ElementTypeNames)).
using ElementTypes = ::testing::Types<float, __nv_bfloat16, __half>;
struct ElementTypeNames {
  template <typename T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, float>) {
      return "fp32";
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      return "bf16";
    } else {
      static_assert(std::is_same_v<T, __half>);
      return "fp16";
    }
  }
};

// The bits of x stored as the 16-bit type T (bf16 or fp16), rounded as the device rounds (the
// kernels' stores are bit-identical to kernels/cpu/half.h), and the float those bits hold.
template <typename T>
uint16_t to_bits(float x) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>);
  return std::is_same_v<T, __half> ? float_to_fp16(x) : float_to_bf16(x);
}
template <typename T>
float from_bits(uint16_t h) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>);
  return std::is_same_v<T, __half> ? fp16_to_float(h) : bf16_to_float(h);
}

// The value a float takes once stored as T (identity for float, RNE to the 16-bit type otherwise).
template <typename T>
float round_as(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return from_bits<T>(to_bits<T>(x));
  }
}
template <typename T>
std::vector<float> round_all(std::vector<float> v) {
  for (float& x : v) x = round_as<T>(x);
  return v;
}

// n elements of T in device memory between two guard zones of kGuardBytes (0xA5 each).
template <typename T>
class DeviceTensor {
 public:
  explicit DeviceTensor(size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(&base_, bytes() + 2 * kGuardBytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(base_, kGuardByte, bytes() + 2 * kGuardBytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(data(), 0, bytes()), cudaSuccess);
  }
  explicit DeviceTensor(const std::vector<float>& values) : DeviceTensor(values.size()) { upload(values); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() { cudaFree(base_); }

  T* data() { return reinterpret_cast<T*>(static_cast<char*>(base_) + kGuardBytes); }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

  void upload(const std::vector<float>& values) {
    ASSERT_EQ(values.size(), n_);
    if constexpr (std::is_same_v<T, float>) {
      ASSERT_EQ(cudaMemcpy(data(), values.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
    } else {
      std::vector<uint16_t> bits(n_);
      for (size_t i = 0; i < n_; ++i) bits[i] = to_bits<T>(values[i]);
      ASSERT_EQ(cudaMemcpy(data(), bits.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  // Synchronizes the device first, so a kernel's launch or execution error fails here.
  std::vector<float> download() {
    std::vector<float> out(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if constexpr (std::is_same_v<T, float>) {
      EXPECT_EQ(cudaMemcpy(out.data(), data(), bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    } else {
      std::vector<uint16_t> bits(n_);
      EXPECT_EQ(cudaMemcpy(bits.data(), data(), bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
      for (size_t i = 0; i < n_; ++i) out[i] = from_bits<T>(bits[i]);
    }
    return out;
  }
  bool guards_intact() {
    std::vector<unsigned char> host(bytes() + 2 * kGuardBytes);
    EXPECT_EQ(cudaMemcpy(host.data(), base_, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (host[i] != kGuardByte || host[kGuardBytes + bytes() + i] != kGuardByte) return false;
    }
    return true;
  }

 private:
  size_t n_;
  void* base_ = nullptr;
};

// Raw device copy of host data (token ids, targets), no guards.
template <typename U>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<U>& values) : n_(values.size()) {
    EXPECT_EQ(cudaMalloc(&ptr_, sizeof(U) * (n_ > 0 ? n_ : 1)), cudaSuccess);
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(ptr_, values.data(), sizeof(U) * n_, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr_); }
  U* data() { return static_cast<U*>(ptr_); }
  std::vector<U> download() {
    std::vector<U> out(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(out.data(), ptr_, sizeof(U) * n_, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return out;
  }

 private:
  size_t n_;
  void* ptr_ = nullptr;
};

// Tolerances per element type. Inputs are rounded to T before the CPU op sees them, so the GPU and
// the CPU start from the same values and both compute in fp32: they differ by summation order, by
// last-ulp differences of expf/tanhf/logf between the CUDA math library and glibc, and (16-bit)
// by the single rounding of each stored output to T, at most half an ulp: u = 2^-8 relative for
// bf16 (8 significant bits), 2^-11 for fp16 (11 bits), 8x smaller. A += into a 16-bit gradient
// also rounds once. The 16-bit bounds are ~2x (elementwise) and ~5-10x (reductions) u, so a
// kernel storing in the wrong type, or rounding twice where the contract says once, fails them;
// fp16's are its bf16 bounds scaled by its 8x smaller u, with a 2x margin. Values in these tests
// stay far inside fp16's range (|x| < 100); subnormals (< 6.1e-5) carry at most 3e-8 absolute.
struct Tolerance {
  double atol, rtol;
};
template <typename T>
Tolerance elementwise_tolerance() {
  if constexpr (std::is_same_v<T, float>) return Tolerance{1e-6, 1e-5};
  if constexpr (std::is_same_v<T, __half>) return Tolerance{2.5e-3, 2e-3};
  return Tolerance{1e-2, 8e-3};
}
// Ops with length-C (or length-T) fp32 reductions whose order differs from the CPU's.
template <typename T>
Tolerance reduction_tolerance() {
  if constexpr (std::is_same_v<T, float>) return Tolerance{2e-5, 2e-4};
  if constexpr (std::is_same_v<T, __half>) return Tolerance{7.5e-3, 5e-3};
  return Tolerance{3e-2, 2e-2};
}

inline std::vector<double> widen_all(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// Downloads `got` and checks it against the CPU result `want`, then its guard bytes.
template <typename T>
void expect_matches(DeviceTensor<T>& got, const std::vector<float>& want, Tolerance tol, const char* what) {
  const std::vector<float> values = got.download();
  EXPECT_TRUE(strata::kernels::testing::all_close(values, widen_all(want), tol.atol, tol.rtol)) << what;
  EXPECT_TRUE(got.guards_intact()) << what << " guard bytes";
}

}  // namespace strata::kernels::cuda::testing
