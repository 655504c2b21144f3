// The peer `strata bench pcie` times beside the backend's chunk copies: a plain loop of
// cudaMemcpyAsync calls on streams of its own, on the same buffers, so the figure shows what the
// Backend's copy path (arena range checks, its h2d/d2h streams, events) costs over the bare API.
// Not used by training and not part of the Backend interface. The CUDA build's implementation is
// runtime/cuda/cuda_plain_copy_peer.cc; without CUDA built in every call is `unavailable`.
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/status.h"

namespace strata {

// Which way a timed copy runs. `both`: host->device and device->host at once, on two streams.
enum class CopyDirection : uint8_t { h2d, d2h, both };
std::string_view copy_direction_name(CopyDirection direction);  // "h2d", "d2h", "both"

// The buffers of one timed loop: h2d copies host_src -> device_dst, d2h copies device_src ->
// host_dst (`both` uses all four; the others only their pair). Device pointers are memory of
// device `device_index` (e.g. the CUDA backend's arena); host pointers pinned or pageable.
struct PlainCopyBuffers {
  void* device_dst = nullptr;
  const void* host_src = nullptr;
  void* host_dst = nullptr;
  const void* device_src = nullptr;
};

// Seconds taken by `count` cudaMemcpyAsync calls of `bytes` each in `direction` (`both`: `count`
// each way, H2D and D2H on two non-blocking streams at once) on device `device_index`, measured
// by the host clock from the first enqueue to the return of cudaStreamSynchronize on every stream
// used. Streams are created before and destroyed after the timed region; the device is idle at
// its start as far as these streams go. invalid_argument for count < 1, bytes == 0 or a null
// pointer the direction needs; CUDA errors as cuda_check.h maps them.
// Fallback without the CUDA backend built in: `unavailable` ("built without CUDA"), nothing run.
StatusOr<double> time_plain_cuda_copies(int device_index, CopyDirection direction, const PlainCopyBuffers& buffers,
                                        uint64_t bytes, int count);

}  // namespace strata
