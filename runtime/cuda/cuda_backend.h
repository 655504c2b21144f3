// CudaBackend: the Backend on one CUDA device. Device memory is a single cudaMalloc of the budget
// made at creation (so nothing is allocated from the driver inside a training step), carved by an
// Arena; three non-blocking streams (compute, h2d, d2h) ordered by timing-free events; a cuBLAS
// handle bound to the compute stream; CudaComputeOps (fp32/bf16/fp16 kernels from kernels/cuda)
// queued on the compute stream. Every CUDA call is checked and becomes a Status.
// Not for model/ to include: model code talks to Backend. Only built with STRATA_HAVE_CUDA.
// Thread-safety: as Backend; each method binds the backend's device on the calling thread first.
#pragma once

#include <array>
#include <cstddef>
#include <memory>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "runtime/backend.h"
#include "runtime/cuda/cuda_compute_ops.h"

namespace strata {

// An event of the CUDA backend. The cudaEvent_t is created (cudaEventDisableTiming) on the first
// record, so a never-recorded event has no handle and counts as complete.
class CudaEvent final : public Event {
 public:
  explicit CudaEvent(int device) : device_(device) {}
  ~CudaEvent() override;
  cudaEvent_t handle() const { return event_; }

 private:
  friend class CudaBackend;
  const int device_;
  cudaEvent_t event_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  // Binds options.device_index, reserves the budget with one cudaMalloc (default: 90% of the
  // device's free memory), creates the streams and the cuBLAS handle. Errors carry the failing
  // call; an over-large budget is out_of_memory with the free/total figures.
  // options.tf32: fp32 GEMMs use TF32 tensor cores (sm_80+); false (the default) is full fp32,
  // whatever the handle's default, since every GEMM sets its math mode explicitly. The environment
  // can still veto TF32 (NVIDIA_TF32_OVERRIDE=0). The mode in effect is logged once, at debug.
  static StatusOr<std::unique_ptr<CudaBackend>> create(const BackendOptions& options);
  // Synchronizes the device's streams, then destroys the cuBLAS handle, the streams and the arena.
  ~CudaBackend() override;

  BackendKind kind() const override { return BackendKind::cuda; }
  DeviceDescription device() const override { return description_; }

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

  // For the compute ops built on this backend (GEMM through cuBLAS, kernels on the compute stream).
  cublasHandle_t cublas() const { return cublas_; }
  cudaStream_t stream(Stream s) const { return streams_[static_cast<int>(s)]; }
  int device_index() const { return device_; }
  // ok when [ptr, ptr + bytes) lies inside one live block of this backend, else invalid_argument
  // naming `what`: for code that hands device pointers to another library (NCCL) unchecked.
  Status check_device_range(const void* ptr, uint64_t bytes, std::string_view what) const;

 private:
  CudaBackend(int device, std::byte* base, uint64_t budget, DeviceDescription description);
  Status bind_device() const;
  Status copy(void* dst, const void* src, uint64_t bytes, cudaMemcpyKind kind, Stream s);

  const int device_;
  std::byte* const base_;
  const uint64_t budget_;
  const DeviceDescription description_;
  Arena arena_;
  std::array<cudaStream_t, kStreamCount> streams_{};
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<CudaComputeOps> ops_;  // on streams_[compute] and cublas_; freed before them
};

}  // namespace strata
