// NVML loaded with dlopen, and the memory query (device_memory_probe.h). The few NVML declarations
// below follow nvml.h (NVML API reference, "Initialization and Cleanup", "Device Queries"); the
// header is not included so this file builds without the CUDA toolkit.
#include "runtime/device_memory_probe.h"

#include <dlfcn.h>

#include <cctype>
#include <utility>

#include <fmt/format.h>

namespace strata {
namespace {

// nvml.h: typedef enum nvmlReturn_enum {...} nvmlReturn_t (an int-sized C enum).
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlErrorInvalidArgument = 2;
constexpr NvmlReturn kNvmlErrorNotSupported = 3;
constexpr NvmlReturn kNvmlErrorNoPermission = 4;
constexpr NvmlReturn kNvmlErrorNotFound = 6;
constexpr NvmlReturn kNvmlErrorDriverNotLoaded = 9;
constexpr NvmlReturn kNvmlErrorGpuIsLost = 15;

struct NvmlDeviceSt;                   // typedef struct nvmlDevice_st* nvmlDevice_t;
using NvmlDevice = NvmlDeviceSt*;
struct NvmlMemory {                    // typedef struct nvmlMemory_st {...} nvmlMemory_t;
  unsigned long long total;            // bytes
  unsigned long long free;
  unsigned long long used;
};

using InitFn = NvmlReturn (*)();                                         // nvmlInit_v2(void)
using ShutdownFn = NvmlReturn (*)();                                     // nvmlShutdown(void)
using ErrorStringFn = const char* (*)(NvmlReturn);                       // nvmlErrorString(result)
using HandleByPciBusIdFn = NvmlReturn (*)(const char*, NvmlDevice*);     // nvmlDeviceGetHandleByPciBusId_v2
using MemoryInfoFn = NvmlReturn (*)(NvmlDevice, NvmlMemory*);            // nvmlDeviceGetMemoryInfo

}  // namespace

struct DeviceMemoryProbe::Nvml {
  void* library = nullptr;  // dlopen handle
  bool initialized = false;  // nvmlInit_v2 succeeded: shut down once
  InitFn init = nullptr;
  ShutdownFn shutdown = nullptr;
  ErrorStringFn error_string = nullptr;
  HandleByPciBusIdFn handle_by_pci_bus_id = nullptr;
  MemoryInfoFn memory_info = nullptr;
  NvmlDevice device = nullptr;

  Nvml() = default;
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
  ~Nvml() {
    if (initialized) (void)shutdown();
    if (library != nullptr) dlclose(library);
  }

  // "nvmlInit_v2: Driver Not Loaded (NVML error 9)".
  std::string describe(std::string_view call, NvmlReturn rc) const {
    const char* text = error_string != nullptr ? error_string(rc) : nullptr;
    return fmt::format("{}: {} (NVML error {})", call, text != nullptr ? text : "unknown error", rc);
  }
};

namespace {

// Looks up `name` into `fn`; false when the library does not export it.
template <typename Fn>
bool bind(void* library, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  return fn != nullptr;
}

// "DDDD:BB:DD.F" (domain of 4 or 8 hex digits, as CUDA and NVML print them): the shape NVML parses.
bool well_formed_pci_bus_id(std::string_view id) {
  auto hex_run = [&](size_t& i, size_t min, size_t max) {
    size_t n = 0;
    while (i < id.size() && n < max && std::isxdigit(static_cast<unsigned char>(id[i]))) ++i, ++n;
    return n >= min;
  };
  auto sep = [&](size_t& i, char c) { return i < id.size() && id[i++] == c; };
  size_t i = 0;
  return hex_run(i, 4, 8) && sep(i, ':') && hex_run(i, 2, 2) && sep(i, ':') && hex_run(i, 2, 2) && sep(i, '.') &&
         hex_run(i, 1, 1) && i == id.size();
}

}  // namespace

StatusOr<std::unique_ptr<DeviceMemoryProbe>> DeviceMemoryProbe::open(std::string_view pci_bus_id,
                                                                     std::string_view library) {
  if (pci_bus_id.empty()) {
    return error(Code::invalid_argument,
                 "no PCI bus id to find the device in NVML (the CPU backend has none); NVML memory is for GPUs");
  }
  auto nvml = std::make_unique<Nvml>();
  const std::string library_name(library);
  nvml->library = dlopen(library_name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (nvml->library == nullptr) {
    const char* why = dlerror();
    return error(Code::unavailable,
                 "{} not found: no NVIDIA driver installed ({}); device memory from NVML is not reported",
                 library_name, why != nullptr ? why : "dlopen failed");
  }
  const std::pair<const char*, bool> symbols[] = {
      {"nvmlInit_v2", bind(nvml->library, "nvmlInit_v2", nvml->init)},
      {"nvmlShutdown", bind(nvml->library, "nvmlShutdown", nvml->shutdown)},
      {"nvmlErrorString", bind(nvml->library, "nvmlErrorString", nvml->error_string)},
      {"nvmlDeviceGetHandleByPciBusId_v2",
       bind(nvml->library, "nvmlDeviceGetHandleByPciBusId_v2", nvml->handle_by_pci_bus_id)},
      {"nvmlDeviceGetMemoryInfo", bind(nvml->library, "nvmlDeviceGetMemoryInfo", nvml->memory_info)},
  };
  for (const auto& [name, found] : symbols) {
    if (!found) {
      return error(Code::unavailable,
                   "{} has no {}: it is not NVML, or its NVIDIA driver is too old; device memory from NVML is not "
                   "reported",
                   library_name, name);
    }
  }
  if (const NvmlReturn rc = nvml->init(); rc != kNvmlSuccess) {
    const Code code = rc == kNvmlErrorNoPermission ? Code::permission_denied : Code::unavailable;
    return error(code, "NVML ({}) cannot start: {}{}", library_name, nvml->describe("nvmlInit_v2", rc),
                 rc == kNvmlErrorDriverNotLoaded ? "; the NVIDIA kernel driver is not loaded (see nvidia-smi)" : "");
  }
  nvml->initialized = true;
  const std::string bus_id(pci_bus_id);
  if (const NvmlReturn rc = nvml->handle_by_pci_bus_id(bus_id.c_str(), &nvml->device); rc != kNvmlSuccess) {
    const std::string what = nvml->describe("nvmlDeviceGetHandleByPciBusId_v2", rc);
    switch (rc) {
      case kNvmlErrorNotFound:
        return error(Code::not_found,
                     "NVML has no GPU at PCI bus id {} ({}); nvidia-smi --query-gpu=pci.bus_id --format=csv lists them",
                     bus_id, what);
      case kNvmlErrorInvalidArgument:
        // Some drivers (seen: 580.159 in a VM) answer a well-formed id with no GPU behind it so.
        if (well_formed_pci_bus_id(bus_id)) {
          return error(Code::not_found,
                       "NVML has no GPU at PCI bus id {} ({}); nvidia-smi --query-gpu=pci.bus_id --format=csv lists "
                       "them",
                       bus_id, what);
        }
        return error(Code::invalid_argument,
                     "NVML cannot parse PCI bus id '{}' ({}); it takes domain:bus:device.function", bus_id, what);
      case kNvmlErrorNoPermission:
        return error(Code::permission_denied, "NVML refuses to open the GPU at {} ({})", bus_id, what);
      case kNvmlErrorGpuIsLost:
        return error(Code::io_error, "the GPU at {} has fallen off the bus ({})", bus_id, what);
      default:
        return error(Code::unavailable, "NVML cannot open the GPU at {} ({})", bus_id, what);
    }
  }
  return std::unique_ptr<DeviceMemoryProbe>(new DeviceMemoryProbe(std::move(nvml), bus_id));
}

DeviceMemoryProbe::DeviceMemoryProbe(std::unique_ptr<Nvml> nvml, std::string pci_bus_id)
    : nvml_(std::move(nvml)), pci_bus_id_(std::move(pci_bus_id)) {}

DeviceMemoryProbe::~DeviceMemoryProbe() = default;

StatusOr<DeviceMemory> DeviceMemoryProbe::read() const {
  NvmlMemory memory{};
  const NvmlReturn rc = nvml_->memory_info(nvml_->device, &memory);
  if (rc == kNvmlSuccess) return DeviceMemory{memory.used, memory.total};
  const std::string what = nvml_->describe("nvmlDeviceGetMemoryInfo", rc);
  if (rc == kNvmlErrorNotSupported)
    return error(Code::unavailable, "the GPU at {} does not report its memory through NVML ({})", pci_bus_id_, what);
  if (rc == kNvmlErrorGpuIsLost)
    return error(Code::io_error, "the GPU at {} has fallen off the bus ({})", pci_bus_id_, what);
  return error(Code::io_error, "NVML cannot read the memory of the GPU at {} ({})", pci_bus_id_, what);
}

}  // namespace strata
