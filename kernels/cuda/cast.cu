// Format conversion kernel (contract in cast.cuh): a grid-stride loop over load<From> / store<To>
// from device_common.cuh, which mirror kernels/cpu/half.h bit for bit.
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/device_common.cuh"

namespace strata::kernels::cuda {
namespace {

template <typename To, typename From>
__global__ void convert_kernel(To* dst, const From* src, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    detail::store(dst + i, detail::load(src + i));
  }
}

template <typename To, typename From>
cudaError_t launch(void* dst, const void* src, size_t n, cudaStream_t stream) {
  convert_kernel<<<detail::grid_for(static_cast<int64_t>(n)), detail::kBlock, 0, stream>>>(
      static_cast<To*>(dst), static_cast<const From*>(src), n);
  return cudaGetLastError();
}

template <typename To>
cudaError_t launch_from(void* dst, const void* src, FloatFormat from, size_t n, cudaStream_t stream) {
  switch (from) {
    case FloatFormat::f32: return launch<To, float>(dst, src, n, stream);
    case FloatFormat::bf16: return launch<To, __nv_bfloat16>(dst, src, n, stream);
    case FloatFormat::f16: return launch<To, __half>(dst, src, n, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t convert(void* dst, FloatFormat to, const void* src, FloatFormat from, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (to == from) return cudaMemcpyAsync(dst, src, n * float_format_size(to), cudaMemcpyDeviceToDevice, stream);
  switch (to) {
    case FloatFormat::f32: return launch_from<float>(dst, src, from, n, stream);
    case FloatFormat::bf16: return launch_from<__nv_bfloat16>(dst, src, from, n, stream);
    case FloatFormat::f16: return launch_from<__half>(dst, src, from, n, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace strata::kernels::cuda
