// Direction names for plain_copy_peer.h, and the build without CUDA's answer to
// time_plain_cuda_copies (runtime/cuda/cuda_plain_copy_peer.cc is the CUDA build's). Not a copy
// implementation itself.
#include "runtime/plain_copy_peer.h"

namespace strata {

std::string_view copy_direction_name(CopyDirection direction) {
  switch (direction) {
    case CopyDirection::h2d:
      return "h2d";
    case CopyDirection::d2h:
      return "d2h";
    case CopyDirection::both:
      return "both";
  }
  return "unknown";
}

#ifndef STRATA_HAVE_CUDA
StatusOr<double> time_plain_cuda_copies(int, CopyDirection, const PlainCopyBuffers&, uint64_t, int) {
  return Status(Code::unavailable,
                "plain cudaMemcpyAsync peer: built without CUDA (reconfigure with -DSTRATA_CUDA=ON)");
}
#endif

}  // namespace strata
