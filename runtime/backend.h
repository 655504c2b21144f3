// Backend: the one interface between the model/offload layers and a compute device. It owns the
// device memory (an Arena under a byte budget), four streams (compute, host->device copies,
// device->host copies, collectives beside the compute), events between them, and asynchronous
// copies. Two implementations: CpuBackend (device memory is host memory under the same budget;
// each stream is a worker thread, so overlap logic runs without a GPU) and CudaBackend (one
// cudaMalloc'd arena, CUDA streams).
// The compute ops (GEMM, norms, attention, loss, casts, AdamW) are ComputeOps (runtime/compute_ops.h),
// reached through ops(). Not a tensor library: pointers and byte counts.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/arena.h"
#include "runtime/compute_ops.h"
#include "runtime/status.h"

namespace strata {

enum class BackendKind : uint8_t { cpu, cuda };
std::string_view backend_kind_name(BackendKind kind);

// Work submitted to one stream runs in submission order; different streams run concurrently and
// are ordered only through events. compute: the model's kernels (and the collectives of its
// gradients); h2d / d2h: copies in and out; comm: collectives that run beside the compute (ZeRO-3's
// weight gathers issued ahead, offload/sharded_weights.h).
enum class Stream : uint8_t { compute = 0, h2d = 1, d2h = 2, comm = 3 };
inline constexpr int kStreamCount = 4;
std::string_view stream_name(Stream s);

// An event marks a point in a stream. Created by Backend::create_event(), used only with the
// backend that created it, destroyed by its owner after the work it marks is no longer waited on.
// A never-recorded event counts as complete (CUDA semantics).
class Event {
 public:
  virtual ~Event() = default;
};

struct BackendOptions {
  BackendKind kind = BackendKind::cpu;
  int device_index = 0;      // CUDA device ordinal
  uint64_t memory_budget = 0;  // bytes of device memory the arena holds; 0 = backend default
                               // (CUDA: 90% of free memory; CPU: 2 GiB)
  // fp32 GEMMs may use TF32 tensor cores (10-bit mantissa inputs, fp32 accumulation) on GPUs that
  // have them (sm_80+). The CPU backend always computes full fp32 and ignores it.
  bool tf32 = false;
};

// What the device is, for `strata info` and progress lines.
struct DeviceDescription {
  std::string name;               // "NVIDIA H200", "CPU (host memory)"
  uint64_t total_memory = 0;      // physical device memory (CPU: RAM)
  int compute_capability = 0;     // 90 for sm_90; 0 on CPU
  std::string pci_bus_id;         // "0000:17:00.0" or empty
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual BackendKind kind() const = 0;
  virtual DeviceDescription device() const = 0;

  // ---- memory (all thread-safe) ----------------------------------------------------------------
  // A device block of at least `bytes`, 256-byte aligned. Over budget: out_of_memory naming the
  // tier ("gpu"), `tag`, the request and the budget; never aborts. Never allocates from the OS:
  // the arena was reserved at creation.
  virtual StatusOr<void*> allocate(uint64_t bytes, std::string_view tag) = 0;
  // Returns a block. The caller must have ordered every stream that used it before this call
  // (an event synchronize or a stream synchronize); releasing memory a stream still uses is a bug.
  virtual Status release(void* ptr) = 0;
  virtual ArenaStats memory() const = 0;
  virtual void reset_peak() = 0;

  // ---- streams and events (thread-safe; one thread should drive a stream at a time) --------------
  virtual std::unique_ptr<Event> create_event() = 0;
  // Marks the current end of `stream` in `event`; re-recording moves the mark.
  virtual Status record(Event& event, Stream stream) = 0;
  // Work submitted to `waiter` after this call starts only after `event`'s mark completes. The host
  // does not block.
  virtual Status wait(Stream waiter, const Event& event) = 0;
  // Host blocks until `event`'s mark completes. Returns the first asynchronous error, if any.
  virtual Status synchronize(const Event& event) = 0;
  // True if `event`'s mark has completed.
  virtual bool query(const Event& event) = 0;
  // Host blocks until all work submitted to `stream` (or to every stream) completes.
  virtual Status synchronize(Stream stream) = 0;
  virtual Status synchronize_all() = 0;

  // ---- asynchronous copies ----------------------------------------------------------------------
  // Queued on `stream`; they return at once. `host` must stay valid and unmodified (src) or
  // unread (dst) until the copy completes; for true asynchrony on CUDA it must be pinned
  // (PinnedPool). Device ranges must lie inside one live block of this backend: a range outside
  // is invalid_argument, detected before anything is queued.
  virtual Status copy_to_device(void* device_dst, const void* host_src, uint64_t bytes,
                                Stream stream = Stream::h2d) = 0;
  virtual Status copy_to_host(void* host_dst, const void* device_src, uint64_t bytes,
                              Stream stream = Stream::d2h) = 0;
  virtual Status copy_on_device(void* device_dst, const void* device_src, uint64_t bytes,
                                Stream stream = Stream::compute) = 0;
  virtual Status fill_zero(void* device_dst, uint64_t bytes, Stream stream = Stream::compute) = 0;
  // Runs `fn` on the host once all prior work on `stream` completes, in stream order; later work
  // on the stream waits for it. `fn` must not call back into this backend's stream methods.
  virtual Status host_callback(Stream stream, std::function<void()> fn) = 0;

  // ---- compute ----------------------------------------------------------------------------------
  // The ops on this backend's memory, queued on Stream::compute (runtime/compute_ops.h).
  // Ownership: the backend owns the ops object; never delete it. Lifetime: the backend's.
  // Thread-safety: as the compute stream (one thread drives it at a time).
  virtual ComputeOps& ops() = 0;
};

// Builds the backend `options` asks for. CUDA requested but unavailable (not compiled in, no
// device, driver missing) is `unavailable` with the reason.
StatusOr<std::unique_ptr<Backend>> make_backend(const BackendOptions& options);

// True when this binary has the CUDA backend and a CUDA device is visible; `reason` says why not
// ("built without CUDA", "no CUDA driver (libcuda.so not found)", "no CUDA device visible").
bool cuda_available(std::string* reason = nullptr);

// Every CUDA device visible to this process (empty, with `reason`, when there is none).
std::vector<DeviceDescription> list_cuda_devices(std::string* reason = nullptr);

// ("CUDA runtime", "13.0"), ("CUDA driver", "13.0" or "none"), ("cuBLAS", ...), ("NCCL", "2.28.9"):
// the CUDA libraries this binary uses; empty without the CUDA backend.
std::vector<std::pair<std::string, std::string>> cuda_library_versions();

}  // namespace strata
