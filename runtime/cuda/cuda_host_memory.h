// Page-locked host memory from the CUDA runtime (cudaHostAlloc, portable across devices), for the
// PinnedPool. Not a pool: each call is one driver allocation, made rarely (one per slab).
// CUDA build only; callers check cuda_available() first.
#pragma once

#include <cstdint>

#include "runtime/status.h"

namespace strata {

// `bytes` of pinned, portable host memory. out_of_memory when the driver refuses.
StatusOr<void*> cuda_host_alloc(uint64_t bytes);
// Frees memory from cuda_host_alloc.
Status cuda_host_free(void* p);

}  // namespace strata
