// The CUDA build's plain cudaMemcpyAsync loop for `strata bench pcie` (contract in
// runtime/plain_copy_peer.h): streams of its own, the host clock around enqueue + synchronize.
// Not the Backend's copy path (runtime/cuda/cuda_backend.cc) and not used by training.
#include <chrono>

#include <cuda_runtime.h>

#include "runtime/cuda/cuda_check.h"
#include "runtime/plain_copy_peer.h"

namespace strata {
namespace {

// Two non-blocking streams, destroyed with the object (errors on destruction are ignored: the
// timed result, or the first error, has already been taken).
struct PeerStreams {
  cudaStream_t s[2] = {nullptr, nullptr};
  ~PeerStreams() {
    for (cudaStream_t& x : s)
      if (x != nullptr) (void)cudaStreamDestroy(x);
  }
};

}  // namespace

StatusOr<double> time_plain_cuda_copies(int device_index, CopyDirection direction, const PlainCopyBuffers& b,
                                        uint64_t bytes, int count) {
  const bool h2d = direction != CopyDirection::d2h, d2h = direction != CopyDirection::h2d;
  if (count < 1 || bytes == 0)
    return error(Code::invalid_argument, "plain copy peer: count {} and bytes {} must be positive", count, bytes);
  if ((h2d && (b.device_dst == nullptr || b.host_src == nullptr)) ||
      (d2h && (b.host_dst == nullptr || b.device_src == nullptr)))
    return error(Code::invalid_argument, "plain copy peer: a {} copy needs its source and destination pointers",
                 copy_direction_name(direction));
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index));
  PeerStreams streams;
  for (cudaStream_t& s : streams.s) STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < count; i++) {
    if (h2d)
      STRATA_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(b.device_dst, b.host_src, bytes, cudaMemcpyHostToDevice, streams.s[0]));
    if (d2h)
      STRATA_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(b.host_dst, b.device_src, bytes, cudaMemcpyDeviceToHost, streams.s[1]));
  }
  for (cudaStream_t s : streams.s) STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace strata
