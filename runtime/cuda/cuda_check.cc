// CUDA runtime / cuBLAS result -> Status (contract in cuda_check.h). Not a logger: the caller
// decides whether and how to report.
#include "runtime/cuda/cuda_check.h"

#include <fmt/format.h>

namespace strata {

Code cuda_error_code(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return Code::ok;
    case cudaErrorMemoryAllocation:
      return Code::out_of_memory;
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return Code::unavailable;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
      return Code::invalid_argument;
    default:
      return Code::internal;
  }
}

Status cuda_status(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return Status::ok();
  (void)cudaGetLastError();  // consumed here; do not let it surface again in an unrelated check
  return Status(cuda_error_code(err), fmt::format("{} failed at {}:{}: {} ({})", call, file, line,
                                                  cudaGetErrorString(err), cudaGetErrorName(err)));
}

Status cublas_status(cublasStatus_t st, const char* call, const char* file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::ok();
  Code code = Code::internal;
  if (st == CUBLAS_STATUS_ALLOC_FAILED) code = Code::out_of_memory;
  if (st == CUBLAS_STATUS_NOT_INITIALIZED) code = Code::unavailable;
  if (st == CUBLAS_STATUS_INVALID_VALUE) code = Code::invalid_argument;
  return Status(code, fmt::format("{} failed at {}:{}: {} (cuBLAS status {})", call, file, line,
                                  cublasGetStatusString(st), static_cast<int>(st)));
}

}  // namespace strata
