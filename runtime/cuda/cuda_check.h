// Turning CUDA runtime and cuBLAS results into strata::Status: the call text, file:line, the
// error's name and cudaGetErrorString. Every CUDA call in strata goes through these; none asserts
// or aborts. Only compiled in the CUDA build (STRATA_HAVE_CUDA); never included by model/.
// Usage:  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, n, kind, stream));
//         Status s = STRATA_CUDA_STATUS(cudaStreamSynchronize(stream));
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "runtime/status.h"

namespace strata {

// ok for cudaSuccess; otherwise "<call> failed at <file>:<line>: <string> (<name>)" with a Code:
// cudaErrorMemoryAllocation -> out_of_memory, no driver / no device -> unavailable,
// cudaErrorInvalidValue -> invalid_argument, everything else -> internal. Also clears the
// runtime's last-error slot, so a handled error does not resurface in a later check.
Status cuda_status(cudaError_t err, const char* call, const char* file, int line);
// The same for cuBLAS: CUBLAS_STATUS_ALLOC_FAILED -> out_of_memory, NOT_INITIALIZED -> unavailable,
// INVALID_VALUE -> invalid_argument, everything else -> internal.
Status cublas_status(cublasStatus_t st, const char* call, const char* file, int line);

// The Code a CUDA runtime error maps to (see cuda_status).
Code cuda_error_code(cudaError_t err);

}  // namespace strata

#define STRATA_CUDA_STATUS(call) ::strata::cuda_status((call), #call, __FILE__, __LINE__)
#define STRATA_CUBLAS_STATUS(call) ::strata::cublas_status((call), #call, __FILE__, __LINE__)
#define STRATA_CUDA_RETURN_IF_ERROR(call) STRATA_RETURN_IF_ERROR(STRATA_CUDA_STATUS(call))
#define STRATA_CUBLAS_RETURN_IF_ERROR(call) STRATA_RETURN_IF_ERROR(STRATA_CUBLAS_STATUS(call))
