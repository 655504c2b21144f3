// Test support for the kernels/cuda GPU tests (tests/kernels/*_gpu_test.cc): the honest skip when
// no CUDA device is usable, device buffers with guard bytes on both sides (checked after a kernel),
// host<->device transfers of float data as fp32 or bf16, and rounding through bf16 so the CPU
// reference sees exactly the inputs the GPU does. Header-only; compiled only with STRATA_HAVE_CUDA.
// Not a tensor library.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

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
    if (!strata_cuda_reason.empty()) GTEST_SKIP() << strata_cuda_reason;                    \
  } while (0)

inline constexpr size_t kGuardBytes = 256;
inline constexpr unsigned char kGuardByte = 0xA5;

// The value a float takes once stored as T (identity for float, RNE to bf16 otherwise).
template <typename T>
float round_as(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  return bf16_to_float(float_to_bf16(x));
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
      for (size_t i = 0; i < n_; ++i) bits[i] = float_to_bf16(values[i]);
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
      for (size_t i = 0; i < n_; ++i) out[i] = bf16_to_float(bits[i]);
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

// Tolerances per element type: fp32 differs from the CPU op only by summation order and by the
// last-ulp differences of expf/tanhf/logf between the CUDA math library and glibc; bf16 keeps 8
// mantissa bits, so every stored output carries up to 2^-9 relative rounding, and a += into a bf16
// gradient rounds the sum once more.
struct Tolerance {
  double atol, rtol;
};
template <typename T>
Tolerance elementwise_tolerance() {
  return std::is_same_v<T, float> ? Tolerance{1e-6, 1e-5} : Tolerance{1e-2, 8e-3};
}
// Ops with length-C (or length-T) fp32 reductions whose order differs from the CPU's.
template <typename T>
Tolerance reduction_tolerance() {
  return std::is_same_v<T, float> ? Tolerance{2e-5, 2e-4} : Tolerance{3e-2, 2e-2};
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
