// CudaBackend: one cudaMalloc'd arena, three non-blocking streams, lazily created timing-free
// events, checked async copies, host callbacks through cudaLaunchHostFunc, and a cuBLAS handle on
// the compute stream (contract in cuda_backend.h). Not where kernels live (kernels/cuda).
#include "runtime/cuda/cuda_backend.h"

#include <cstdlib>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_devices.h"
#include "runtime/log.h"
#include "runtime/units.h"

namespace strata {
namespace {

constexpr uint64_t kBudgetGranularity = 2ull << 20;  // the default budget is a multiple of 2 MiB

// How fp32 GEMMs run on a device of compute capability `cc` (90 for sm_90), for the debug log.
std::string fp32_gemm_mode(bool tf32, int cc) {
  if (!tf32) return "full fp32 (TF32 off)";
  if (cc < 80) return fmt::format("full fp32 (TF32 requested, but sm_{} has no TF32 tensor cores)", cc);
  const char* override_env = std::getenv("NVIDIA_TF32_OVERRIDE");
  if (override_env != nullptr && std::string_view(override_env) == "0") {
    return "full fp32 (TF32 requested, but NVIDIA_TF32_OVERRIDE=0 disables it)";
  }
  return "TF32 tensor cores (inputs rounded to 10 mantissa bits, fp32 accumulation)";
}

void log_teardown_failure(Status s) {
  if (!s.is_ok()) spdlog::warn("CUDA backend teardown: {}", s.message());
}

Status foreign_event() {
  return error(Code::invalid_argument, "event was not created by this CUDA backend; use Backend::create_event");
}

void run_host_function(void* user_data) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(user_data));
  try {
    (*fn)();
  } catch (const std::exception& e) {
    spdlog::error("host callback on a CUDA stream threw: {}", e.what());
  } catch (...) {
    spdlog::error("host callback on a CUDA stream threw a non-standard exception");
  }
}

}  // namespace

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) log_teardown_failure(STRATA_CUDA_STATUS(cudaEventDestroy(event_)));
}

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::create(const BackendOptions& options) {
  STRATA_RETURN_IF_ERROR(cuda_device_status());
  int count = 0;
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  const int dev = options.device_index;
  if (dev < 0 || dev >= count) {
    return error(Code::not_found, "CUDA device {} does not exist ({} visible: 0..{}); pick another --device", dev,
                 count, count - 1);
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(dev));
  STRATA_ASSIGN_OR_RETURN(DeviceDescription description, describe_cuda_device(dev));
  size_t free_bytes = 0, total_bytes = 0;
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  uint64_t budget = options.memory_budget;
  if (budget == 0) budget = (free_bytes / 10 * 9) / kBudgetGranularity * kBudgetGranularity;
  if (budget == 0 || budget > free_bytes) {
    return error(Code::out_of_memory,
                 "gpu memory budget of {} does not fit on device {} ({}): {} of {} is free; lower --gpu-mem",
                 format_size(budget), dev, description.name, format_size(free_bytes), format_size(total_bytes));
  }
  void* base = nullptr;
  Status malloc_status = STRATA_CUDA_STATUS(cudaMalloc(&base, budget));
  if (!malloc_status.is_ok()) {
    return malloc_status.with_context(fmt::format("reserving the {} gpu memory budget on device {} ({} of {} free); "
                                                  "lower --gpu-mem",
                                                  format_size(budget), dev, format_size(free_bytes),
                                                  format_size(total_bytes)));
  }
  // From here the backend owns `base`; an early return below tears down what was made.
  std::unique_ptr<CudaBackend> backend(new CudaBackend(dev, static_cast<std::byte*>(base), budget, description));
  for (cudaStream_t& s : backend->streams_) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasCreate(&backend->cublas_));
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasSetStream(backend->cublas_, backend->stream(Stream::compute)));
  STRATA_ASSIGN_OR_RETURN(backend->ops_,
                          CudaComputeOps::create(dev, backend->stream(Stream::compute), backend->cublas_,
                                                 options.tf32, backend->arena_, backend->base_));
  spdlog::debug("CUDA backend on device {} ({}): {} arena; fp32 GEMMs: {}", dev, description.name,
                format_size(budget), fp32_gemm_mode(options.tf32, description.compute_capability));
  return backend;
}

CudaBackend::CudaBackend(int device, std::byte* base, uint64_t budget, DeviceDescription description)
    : device_(device), base_(base), budget_(budget), description_(std::move(description)), arena_("gpu", budget) {}

CudaBackend::~CudaBackend() {
  log_teardown_failure(bind_device());
  for (cudaStream_t s : streams_) {
    if (s != nullptr) log_teardown_failure(STRATA_CUDA_STATUS(cudaStreamSynchronize(s)));
  }
  ops_.reset();  // frees its scratch while the device is bound and its streams are idle
  if (cublas_ != nullptr) log_teardown_failure(STRATA_CUBLAS_STATUS(cublasDestroy(cublas_)));
  for (cudaStream_t s : streams_) {
    if (s != nullptr) log_teardown_failure(STRATA_CUDA_STATUS(cudaStreamDestroy(s)));
  }
  log_teardown_failure(STRATA_CUDA_STATUS(cudaFree(base_)));
}

Status CudaBackend::bind_device() const { return STRATA_CUDA_STATUS(cudaSetDevice(device_)); }

StatusOr<void*> CudaBackend::allocate(uint64_t bytes, std::string_view tag) {
  return arena_.allocate_at(base_, bytes, tag);
}

Status CudaBackend::release(void* ptr) { return arena_.release_at(base_, ptr); }

std::unique_ptr<Event> CudaBackend::create_event() { return std::make_unique<CudaEvent>(device_); }

Status CudaBackend::record(Event& event, Stream s) {
  auto* e = dynamic_cast<CudaEvent*>(&event);
  if (e == nullptr || e->device_ != device_) return foreign_event();
  STRATA_RETURN_IF_ERROR(bind_device());
  if (e->event_ == nullptr) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e->event_, cudaEventDisableTiming));
  }
  return STRATA_CUDA_STATUS(cudaEventRecord(e->event_, stream(s)));
}

Status CudaBackend::wait(Stream waiter, const Event& event) {
  const auto* e = dynamic_cast<const CudaEvent*>(&event);
  if (e == nullptr || e->device_ != device_) return foreign_event();
  if (e->event_ == nullptr) return Status::ok();  // never recorded: complete
  STRATA_RETURN_IF_ERROR(bind_device());
  return STRATA_CUDA_STATUS(cudaStreamWaitEvent(stream(waiter), e->event_, 0));
}

Status CudaBackend::synchronize(const Event& event) {
  const auto* e = dynamic_cast<const CudaEvent*>(&event);
  if (e == nullptr || e->device_ != device_) return foreign_event();
  if (e->event_ == nullptr) return Status::ok();
  return STRATA_CUDA_STATUS(cudaEventSynchronize(e->event_));
}

bool CudaBackend::query(const Event& event) {
  const auto* e = dynamic_cast<const CudaEvent*>(&event);
  if (e == nullptr || e->event_ == nullptr) return true;
  const cudaError_t err = cudaEventQuery(e->event_);
  if (err == cudaErrorNotReady) {
    // Not an error, but the runtime may keep it as the last error: clear it, or the next launch's
    // cudaGetLastError() check would report a stale "device not ready".
    (void)cudaGetLastError();
    return false;
  }
  if (err != cudaSuccess) {
    // Reported as complete so the caller's synchronize() surfaces the error as a Status.
    warn_once("cuda-event-query", fmt::format("cudaEventQuery failed: {}", cudaGetErrorString(err)));
    (void)cudaGetLastError();
  }
  return true;
}

Status CudaBackend::synchronize(Stream s) {
  STRATA_RETURN_IF_ERROR(bind_device());
  return STRATA_CUDA_STATUS(cudaStreamSynchronize(stream(s)));
}

Status CudaBackend::synchronize_all() {
  STRATA_RETURN_IF_ERROR(bind_device());
  Status first;
  for (cudaStream_t s : streams_) {
    Status st = STRATA_CUDA_STATUS(cudaStreamSynchronize(s));
    if (first.is_ok()) first = st;
  }
  return first;
}

Status CudaBackend::copy(void* dst, const void* src, uint64_t bytes, cudaMemcpyKind kind, Stream s) {
  if ((dst == nullptr || src == nullptr) && bytes > 0) {
    return error(Code::invalid_argument, "copy of {} bytes on stream '{}' with a null pointer", bytes, stream_name(s));
  }
  if (bytes == 0) return Status::ok();
  STRATA_RETURN_IF_ERROR(bind_device());
  return STRATA_CUDA_STATUS(cudaMemcpyAsync(dst, src, bytes, kind, stream(s)));
}

Status CudaBackend::copy_to_device(void* device_dst, const void* host_src, uint64_t bytes, Stream s) {
  STRATA_RETURN_IF_ERROR(check_device_range(device_dst, bytes, "copy_to_device destination"));
  return copy(device_dst, host_src, bytes, cudaMemcpyHostToDevice, s);
}

Status CudaBackend::copy_to_host(void* host_dst, const void* device_src, uint64_t bytes, Stream s) {
  STRATA_RETURN_IF_ERROR(check_device_range(device_src, bytes, "copy_to_host source"));
  return copy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, s);
}

Status CudaBackend::copy_on_device(void* device_dst, const void* device_src, uint64_t bytes, Stream s) {
  STRATA_RETURN_IF_ERROR(check_device_range(device_dst, bytes, "copy_on_device destination"));
  STRATA_RETURN_IF_ERROR(check_device_range(device_src, bytes, "copy_on_device source"));
  return copy(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice, s);
}

Status CudaBackend::fill_zero(void* device_dst, uint64_t bytes, Stream s) {
  STRATA_RETURN_IF_ERROR(check_device_range(device_dst, bytes, "fill_zero destination"));
  if (bytes == 0) return Status::ok();
  STRATA_RETURN_IF_ERROR(bind_device());
  return STRATA_CUDA_STATUS(cudaMemsetAsync(device_dst, 0, bytes, stream(s)));
}

Status CudaBackend::host_callback(Stream s, std::function<void()> fn) {
  if (!fn) return error(Code::invalid_argument, "host_callback on stream '{}' was given an empty function", stream_name(s));
  STRATA_RETURN_IF_ERROR(bind_device());
  auto* owned = new std::function<void()>(std::move(fn));
  Status launched = STRATA_CUDA_STATUS(cudaLaunchHostFunc(stream(s), run_host_function, owned));
  if (!launched.is_ok()) delete owned;  // not queued, so run_host_function will never free it
  return launched;
}

Status CudaBackend::check_device_range(const void* ptr, uint64_t bytes, std::string_view what) const {
  return arena_.check_range(base_, ptr, bytes, what);
}

}  // namespace strata
