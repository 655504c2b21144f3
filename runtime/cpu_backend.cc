// CpuBackend: arena over an mmap'd region, copies as memcpy closures on CpuStream workers
// (contract in cpu_backend.h). Not where CPU compute ops live (runtime/cpu_compute_ops.cc, kernels/cpu).
#include "runtime/cpu_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/units.h"

namespace strata {
namespace {

const CpuEvent* as_cpu_event(const Event& event) { return dynamic_cast<const CpuEvent*>(&event); }

Status foreign_event() {
  return error(Code::invalid_argument, "event was not created by this CPU backend; use Backend::create_event");
}

Status check_host_pointer(const void* ptr, uint64_t bytes, std::string_view what) {
  if (ptr == nullptr && bytes > 0) return error(Code::invalid_argument, "{}: host pointer is null for {} bytes", what, bytes);
  return Status::ok();
}

}  // namespace

StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::create(const BackendOptions& options) {
  const uint64_t budget = options.memory_budget == 0 ? kCpuBackendDefaultBudget : options.memory_budget;
  void* region = mmap(nullptr, budget, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (region == MAP_FAILED) {
    return errno_status(errno, fmt::format("reserving the {} device memory budget of the CPU backend (mmap); "
                                           "lower --gpu-mem",
                                           format_size(budget)));
  }
  return std::unique_ptr<CpuBackend>(new CpuBackend(static_cast<std::byte*>(region), budget));
}

CpuBackend::CpuBackend(std::byte* base, uint64_t budget) : base_(base), budget_(budget), arena_("gpu", budget) {
  for (int s = 0; s < kStreamCount; s++) {
    streams_[s] = std::make_unique<CpuStream>(std::string(stream_name(static_cast<Stream>(s))));
  }
  ops_ = std::make_unique<CpuComputeOps>(stream(Stream::compute), arena_, base_);
}

CpuBackend::~CpuBackend() {
  // Drain every stream before stopping any: a wait on one stream may depend on another's marker.
  for (auto& s : streams_) (void)s->drain();
  for (auto& s : streams_) s->shutdown();
  munmap(base_, budget_);
}

DeviceDescription CpuBackend::device() const {
  DeviceDescription d;
  d.name = "CPU (host memory)";
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) d.total_memory = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
  return d;
}

StatusOr<void*> CpuBackend::allocate(uint64_t bytes, std::string_view tag) {
  return arena_.allocate_at(base_, bytes, tag);
}

Status CpuBackend::release(void* ptr) { return arena_.release_at(base_, ptr); }

std::unique_ptr<Event> CpuBackend::create_event() { return std::make_unique<CpuEvent>(); }

Status CpuBackend::record(Event& event, Stream s) {
  auto* e = dynamic_cast<CpuEvent*>(&event);
  if (e == nullptr) return foreign_event();
  return e->record(stream(s));
}

Status CpuBackend::wait(Stream waiter, const Event& event) {
  const CpuEvent* e = as_cpu_event(event);
  if (e == nullptr) return foreign_event();
  return e->wait_on(stream(waiter));
}

Status CpuBackend::synchronize(const Event& event) {
  const CpuEvent* e = as_cpu_event(event);
  if (e == nullptr) return foreign_event();
  e->synchronize();
  return first_stream_error();
}

bool CpuBackend::query(const Event& event) {
  const CpuEvent* e = as_cpu_event(event);
  return e == nullptr || e->query();
}

Status CpuBackend::synchronize(Stream s) { return stream(s).drain(); }

Status CpuBackend::synchronize_all() {
  Status first;
  for (auto& s : streams_) {
    Status st = s->drain();
    if (first.is_ok()) first = st;
  }
  return first;
}

Status CpuBackend::copy_to_device(void* device_dst, const void* host_src, uint64_t bytes, Stream s) {
  STRATA_RETURN_IF_ERROR(check_device_range(device_dst, bytes, "copy_to_device destination"));
  STRATA_RETURN_IF_ERROR(check_host_pointer(host_src, bytes, "copy_to_device source"));
  return stream(s).enqueue([=] { std::memcpy(device_dst, host_src, bytes); });
}

Status CpuBackend::copy_to_host(void* host_dst, const void* device_src, uint64_t bytes, Stream s) {
  STRATA_RETURN_IF_ERROR(check_device_range(device_src, bytes, "copy_to_host source"));
  STRATA_RETURN_IF_ERROR(check_host_pointer(host_dst, bytes, "copy_to_host destination"));
  return stream(s).enqueue([=] { std::memcpy(host_dst, device_src, bytes); });
}

Status CpuBackend::copy_on_device(void* device_dst, const void* device_src, uint64_t bytes, Stream s) {
  STRATA_RETURN_IF_ERROR(check_device_range(device_dst, bytes, "copy_on_device destination"));
  STRATA_RETURN_IF_ERROR(check_device_range(device_src, bytes, "copy_on_device source"));
  return stream(s).enqueue([=] { std::memmove(device_dst, device_src, bytes); });
}

Status CpuBackend::fill_zero(void* device_dst, uint64_t bytes, Stream s) {
  STRATA_RETURN_IF_ERROR(check_device_range(device_dst, bytes, "fill_zero destination"));
  return stream(s).enqueue([=] { std::memset(device_dst, 0, bytes); });
}

Status CpuBackend::host_callback(Stream s, std::function<void()> fn) {
  if (!fn) return error(Code::invalid_argument, "host_callback on stream '{}' was given an empty function", stream_name(s));
  return stream(s).enqueue(std::move(fn));
}

Status CpuBackend::check_device_range(const void* ptr, uint64_t bytes, std::string_view what) const {
  return arena_.check_range(base_, ptr, bytes, what);
}

Status CpuBackend::first_stream_error() const {
  for (const auto& s : streams_) {
    Status st = s->first_error();
    if (!st.is_ok()) return st;
  }
  return Status::ok();
}

}  // namespace strata
