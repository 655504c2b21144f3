// CUDA device discovery for the CUDA backend and `strata info`: whether a usable device is
// visible (and if not, why: no driver, driver too old, no device), and what each device is.
// The public entry points (cuda_available, list_cuda_devices, cuda_library_versions) are declared
// in runtime/backend.h; this header adds what the CUDA backend itself needs. CUDA build only.
#pragma once

#include "runtime/backend.h"
#include "runtime/status.h"

namespace strata {

// ok when at least one CUDA device is visible; otherwise `unavailable` whose message is the
// reason ("no CUDA driver (libcuda.so not found) ..."). Never crashes without a driver.
Status cuda_device_status();

// Name, memory, compute capability and PCI bus id of device `device`.
StatusOr<DeviceDescription> describe_cuda_device(int device);

}  // namespace strata
