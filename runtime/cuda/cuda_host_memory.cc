// cudaHostAlloc / cudaFreeHost behind Status (contract in cuda_host_memory.h).
#include "runtime/cuda/cuda_host_memory.h"

#include "runtime/cuda/cuda_check.h"
#include "runtime/units.h"

namespace strata {

StatusOr<void*> cuda_host_alloc(uint64_t bytes) {
  void* p = nullptr;
  Status s = STRATA_CUDA_STATUS(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  if (!s.is_ok()) return s.with_context(fmt::format("pinning {} of host memory", format_size(bytes)));
  return p;
}

Status cuda_host_free(void* p) { return STRATA_CUDA_STATUS(cudaFreeHost(p)); }

}  // namespace strata
