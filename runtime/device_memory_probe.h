// Device memory in use as NVML reports it (nvidia-smi's "Memory-Usage"): every process's
// allocations and the driver's own on one GPU, not only strata's arena. NVML is the driver's
// library, loaded at run time (dlopen "libnvidia-ml.so.1"), so strata has no link dependency on the
// driver and builds without CUDA. Not the arena accounting (Backend::memory()) and not device
// discovery (list_cuda_devices).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace strata {

struct DeviceMemory {
  uint64_t used = 0;   // bytes in use on the device (all processes), nvmlMemory_t::used
  uint64_t total = 0;  // bytes of device memory, nvmlMemory_t::total
};

inline constexpr std::string_view kNvmlLibrary = "libnvidia-ml.so.1";

// One GPU's memory counters through NVML.
// Lifetime: open() loads the library, initialises NVML and finds the device; the destructor shuts
// NVML down and unloads the library. NVML and the loader count references, so several probes (and
// other NVML users in the process, such as NCCL) coexist.
// Thread-safety: read() may be called from any thread, concurrently (NVML is thread-safe); the
// destructor must not run concurrently with a read().
class DeviceMemoryProbe {
 public:
  // `pci_bus_id` as DeviceDescription::pci_bus_id has it ("0000:17:00.0"; NVML also takes
  // "00000000:17:00.0" and "17:00.0"). `library` is the NVML to load (a soname or a path; tests
  // load others). Errors:
  //   invalid_argument: an empty bus id (the CPU backend has none), or one NVML cannot parse;
  //   unavailable: the library is not there ("libnvidia-ml.so.1 not found: no NVIDIA driver"),
  //     lacks an NVML entry point, or NVML cannot start (driver not loaded);
  //   permission_denied: NVML refuses this user;
  //   not_found: no GPU with that bus id (nvidia-smi --query-gpu=pci.bus_id lists them).
  static StatusOr<std::unique_ptr<DeviceMemoryProbe>> open(std::string_view pci_bus_id,
                                                           std::string_view library = kNvmlLibrary);

  DeviceMemoryProbe(const DeviceMemoryProbe&) = delete;
  DeviceMemoryProbe& operator=(const DeviceMemoryProbe&) = delete;
  ~DeviceMemoryProbe();

  // The counters now. io_error when the GPU has fallen off the bus or NVML fails the query;
  // unavailable when the device does not report memory.
  StatusOr<DeviceMemory> read() const;

  const std::string& pci_bus_id() const { return pci_bus_id_; }

 private:
  struct Nvml;  // the loaded library, its entry points and the device handle
  DeviceMemoryProbe(std::unique_ptr<Nvml> nvml, std::string pci_bus_id);

  std::unique_ptr<Nvml> nvml_;
  std::string pci_bus_id_;
};

}  // namespace strata
