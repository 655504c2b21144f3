// Page-locked host memory for the PinnedPool: the registration with the CUDA driver (portable
// across devices) of memory the caller mapped and faulted in itself, on every core --
// cudaHostAlloc would map, fault in and pin every page inside the driver on the calling thread.
// Not a pool: each call is one driver call, made rarely (one per slab).
// CUDA build only; callers check cuda_available() first.
#pragma once

#include <cstdint>

#include "runtime/status.h"

namespace strata {

// Page-locks [p, p + bytes) (page-aligned memory the caller owns, e.g. mmap'd) for the driver's
// copies, portable across devices (cudaHostRegisterPortable). The memory stays the caller's:
// unregister it before unmapping. The driver's error (out_of_memory, invalid_argument) naming the
// size otherwise.
Status cuda_host_register(void* p, uint64_t bytes);
Status cuda_host_unregister(void* p);

}  // namespace strata
