// CUDA device discovery and library versions: the CUDA build's definitions of cuda_available,
// list_cuda_devices and cuda_library_versions (backend.h; runtime/backend.cc has the non-CUDA
// ones), and cuda_device_status / describe_cuda_device (cuda_devices.h). Without a driver every
// call returns a reason; nothing here aborts.
#include "runtime/cuda/cuda_devices.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#if STRATA_HAVE_NCCL
#include <nccl.h>
#endif

#include <fmt/format.h>

#include "runtime/cuda/cuda_check.h"

namespace strata {
namespace {

// "13.0" from 13000 (CUDA's major*1000 + minor*10 encoding).
std::string cuda_version_string(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

}  // namespace

Status cuda_device_status() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  if (err == cudaSuccess && count > 0) return Status::ok();
  if (err == cudaSuccess || err == cudaErrorNoDevice) {
    return error(Code::unavailable,
                 "no CUDA device visible (the driver reports none; check nvidia-smi and CUDA_VISIBLE_DEVICES)");
  }
  if (err == cudaErrorInsufficientDriver) {
    int driver = 0, runtime = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    if (driver == 0) {
      return error(Code::unavailable, "no CUDA driver (libcuda.so not found); install the NVIDIA driver to use a GPU");
    }
    return error(Code::unavailable, "CUDA driver {} is older than the CUDA runtime {} this binary uses; update the NVIDIA driver",
                 cuda_version_string(driver), cuda_version_string(runtime));
  }
  return Status(Code::unavailable, fmt::format("CUDA is not usable: cudaGetDeviceCount failed: {} ({})",
                                               cudaGetErrorString(err), cudaGetErrorName(err)));
}

StatusOr<DeviceDescription> describe_cuda_device(int device) {
  cudaDeviceProp prop{};
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  DeviceDescription d;
  d.name = prop.name;
  d.total_memory = prop.totalGlobalMem;
  d.compute_capability = prop.major * 10 + prop.minor;
  char bus_id[32] = {};
  STRATA_CUDA_RETURN_IF_ERROR(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device));
  d.pci_bus_id = bus_id;
  return d;
}

bool cuda_available(std::string* reason) {
  Status s = cuda_device_status();
  if (!s.is_ok() && reason != nullptr) *reason = s.message();
  return s.is_ok();
}

std::vector<DeviceDescription> list_cuda_devices(std::string* reason) {
  std::vector<DeviceDescription> devices;
  Status s = cuda_device_status();
  int count = 0;
  if (s.is_ok()) s = STRATA_CUDA_STATUS(cudaGetDeviceCount(&count));
  for (int i = 0; s.is_ok() && i < count; i++) {
    StatusOr<DeviceDescription> d = describe_cuda_device(i);
    if (d.is_ok()) {
      devices.push_back(std::move(d).value());
    } else {
      s = d.status().with_context(fmt::format("describing CUDA device {}", i));
    }
  }
  if (!s.is_ok() && reason != nullptr) *reason = s.message();
  return devices;
}

std::vector<std::pair<std::string, std::string>> cuda_library_versions() {
  std::vector<std::pair<std::string, std::string>> versions;
  int runtime = 0, driver = 0;
  versions.emplace_back("CUDA runtime",
                        cudaRuntimeGetVersion(&runtime) == cudaSuccess ? cuda_version_string(runtime) : "unknown");
  const bool have_driver = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0;
  versions.emplace_back("CUDA driver", have_driver ? cuda_version_string(driver) : "none");
  int major = 0, minor = 0, patch = 0;
  const bool have_cublas = cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
                           cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
                           cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS;
  versions.emplace_back("cuBLAS", have_cublas ? fmt::format("{}.{}.{}", major, minor, patch) : "unknown");
#if STRATA_HAVE_NCCL
  int nccl = 0;
  std::string nccl_text = "unknown";
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch; older releases major*1000 + minor*100 + patch.
    nccl_text = nccl >= 10000 ? fmt::format("{}.{}.{}", nccl / 10000, (nccl % 10000) / 100, nccl % 100)
                              : fmt::format("{}.{}.{}", nccl / 1000, (nccl % 1000) / 100, nccl % 100);
  }
#else
  const std::string nccl_text = "not built in";
#endif
  versions.emplace_back("NCCL", nccl_text);
  (void)cudaGetLastError();
  return versions;
}

}  // namespace strata
