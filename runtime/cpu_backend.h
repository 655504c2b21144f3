// CpuBackend: the Backend whose "device memory" is host memory under the same byte budget as a
// GPU. The budget is one mmap'd region (MAP_NORESERVE: pages are committed when first touched),
// carved by an Arena; the four streams are CpuStream worker threads, so copies run
// asynchronously and in stream order exactly as on CUDA. Compute ops are CpuComputeOps (fp32 only)
// queued on the compute stream. Not a fast backend: it exists so everything runs without a GPU.
// Thread-safety and lifetime: as Backend. The destructor runs all queued work, then unmaps.
#pragma once

#include <array>
#include <cstddef>
#include <memory>

#include "runtime/backend.h"
#include "runtime/cpu_compute_ops.h"
#include "runtime/cpu_stream.h"

namespace strata {

inline constexpr uint64_t kCpuBackendDefaultBudget = 2ull << 30;

class CpuBackend final : public Backend {
 public:
  // Reserves the budget (options.memory_budget, or kCpuBackendDefaultBudget when 0) as address
  // space. Fails with the mmap error when the address space cannot be reserved.
  static StatusOr<std::unique_ptr<CpuBackend>> create(const BackendOptions& options);
  ~CpuBackend() override;

  BackendKind kind() const override { return BackendKind::cpu; }
  DeviceDescription device() const override;

  StatusOr<void*> allocate(uint64_t bytes, std::string_view tag) override;
  Status release(void* ptr) override;
  ArenaStats memory() const override { return arena_.stats(); }
  void reset_peak() override { arena_.reset_peak(); }

  std::unique_ptr<Event> create_event() override;
  Status record(Event& event, Stream stream) override;
  Status wait(Stream waiter, const Event& event) override;
  Status synchronize(const Event& event) override;
  bool query(const Event& event) override;
  Status synchronize(Stream stream) override;
  Status synchronize_all() override;

  Status copy_to_device(void* device_dst, const void* host_src, uint64_t bytes, Stream stream) override;
  Status copy_to_host(void* host_dst, const void* device_src, uint64_t bytes, Stream stream) override;
  Status copy_on_device(void* device_dst, const void* device_src, uint64_t bytes, Stream stream) override;
  Status fill_zero(void* device_dst, uint64_t bytes, Stream stream) override;
  Status host_callback(Stream stream, std::function<void()> fn) override;

  ComputeOps& ops() override { return *ops_; }

 private:
  CpuBackend(std::byte* base, uint64_t budget);
  CpuStream& stream(Stream s) { return *streams_[static_cast<int>(s)]; }
  // invalid_argument unless [ptr, ptr+bytes) lies inside one live arena block.
  Status check_device_range(const void* ptr, uint64_t bytes, std::string_view what) const;
  Status first_stream_error() const;

  std::byte* const base_;
  const uint64_t budget_;
  Arena arena_;
  std::array<std::unique_ptr<CpuStream>, kStreamCount> streams_;
  std::unique_ptr<CpuComputeOps> ops_;  // queues on streams_[compute]
};

}  // namespace strata
