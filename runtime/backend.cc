// Backend names and the factory (contract in backend.h), plus the non-CUDA build's answers to
// the CUDA queries (runtime/cuda/cuda_devices.cc has the CUDA build's). Not a backend itself.
#include "runtime/backend.h"

#include "runtime/cpu_backend.h"

#ifdef STRATA_HAVE_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace strata {
namespace {

#ifndef STRATA_HAVE_CUDA
constexpr std::string_view kBuiltWithoutCuda =
    "built without CUDA (reconfigure with -DSTRATA_CUDA=ON on a machine with the CUDA toolkit)";
#endif

Status unavailable_cuda(std::string_view why) {
  return error(Code::unavailable, "the cuda backend is unavailable: {}; use the cpu backend", why);
}

}  // namespace

std::string_view backend_kind_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::cpu:
      return "cpu";
    case BackendKind::cuda:
      return "cuda";
  }
  return "unknown";
}

std::string_view stream_name(Stream s) {
  switch (s) {
    case Stream::compute:
      return "compute";
    case Stream::h2d:
      return "h2d";
    case Stream::d2h:
      return "d2h";
    case Stream::comm:
      return "comm";
  }
  return "unknown";
}

StatusOr<std::unique_ptr<Backend>> make_backend(const BackendOptions& options) {
  if (options.kind == BackendKind::cpu) {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> cpu, CpuBackend::create(options));
    return std::unique_ptr<Backend>(std::move(cpu));
  }
#ifdef STRATA_HAVE_CUDA
  std::string why;
  if (!cuda_available(&why)) return unavailable_cuda(why);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> cuda, CudaBackend::create(options));
  return std::unique_ptr<Backend>(std::move(cuda));
#else
  return unavailable_cuda(kBuiltWithoutCuda);
#endif
}

#ifndef STRATA_HAVE_CUDA
bool cuda_available(std::string* reason) {
  if (reason != nullptr) *reason = std::string(kBuiltWithoutCuda);
  return false;
}

std::vector<DeviceDescription> list_cuda_devices(std::string* reason) {
  if (reason != nullptr) *reason = std::string(kBuiltWithoutCuda);
  return {};
}

std::vector<std::pair<std::string, std::string>> cuda_library_versions() { return {}; }
#endif

}  // namespace strata
