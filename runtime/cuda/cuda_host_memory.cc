// cudaHostRegister / cudaHostUnregister behind Status (contract in cuda_host_memory.h).
#include "runtime/cuda/cuda_host_memory.h"

#include "runtime/cuda/cuda_check.h"
#include "runtime/units.h"

namespace strata {

Status cuda_host_register(void* p, uint64_t bytes) {
  Status s = STRATA_CUDA_STATUS(cudaHostRegister(p, bytes, cudaHostRegisterPortable));
  if (!s.is_ok()) return s.with_context(fmt::format("registering {} of host memory with the driver", format_size(bytes)));
  return s;
}

Status cuda_host_unregister(void* p) { return STRATA_CUDA_STATUS(cudaHostUnregister(p)); }

}  // namespace strata
