// Encoder / token embedding kernels (contract in embedding.cuh). Forward: a grid-stride copy (plus
// the position row). Backward: one block per row n; it returns unless n is its token's first row,
// otherwise it walks the rows n..N-1 in order (token ids staged in shared memory, one column per
// thread) and adds the token's summed gradient to its table row once.
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/embedding.cuh"

namespace strata::kernels::cuda {
namespace {

using detail::add_to;
using detail::grid_for;
using detail::kBlock;
using detail::load;
using detail::store;

// wpe == null: plain token embedding.
template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t N,
                                         int64_t T_len, int64_t C) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N * C; i += stride) {
    const int64_t r = i / C, c = i % C;
    float x = load(wte + static_cast<int64_t>(tokens[r]) * C + c);
    if (wpe != nullptr) x += load(wpe + (r % T_len) * C + c);
    store(out + i, x);
  }
}

template <typename T>
__global__ void token_backward_kernel(T* dwte, const T* dout, const int32_t* tokens, int64_t N, int64_t C) {
  __shared__ int32_t tile[kBlock];
  const int64_t n = blockIdx.x;
  const int32_t token = tokens[n];
  int earlier = 0;
  for (int64_t m = threadIdx.x; m < n; m += blockDim.x) earlier |= tokens[m] == token;
  if (__syncthreads_or(earlier)) return;  // a block with an earlier row owns this token
  for (int64_t c0 = 0; c0 < C; c0 += blockDim.x) {
    const int64_t c = c0 + threadIdx.x;
    float acc = 0.0f;
    for (int64_t m0 = n; m0 < N; m0 += blockDim.x) {
      __syncthreads();
      if (m0 + threadIdx.x < N) tile[threadIdx.x] = tokens[m0 + threadIdx.x];
      __syncthreads();
      const int64_t rows = N - m0 < blockDim.x ? N - m0 : blockDim.x;
      if (c < C) {
        for (int64_t j = 0; j < rows; ++j) {
          if (tile[j] == token) acc += load(dout + (m0 + j) * C + c);
        }
      }
    }
    if (c < C) add_to(dwte + static_cast<int64_t>(token) * C + c, acc);
  }
}

template <typename T>
__global__ void position_backward_kernel(T* dwpe, const T* dout, int64_t B, int64_t T_len, int64_t C) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < T_len * C; i += stride) {
    float acc = 0.0f;
    for (int64_t b = 0; b < B; ++b) acc += load(dout + b * T_len * C + i);
    add_to(dwpe + i, acc);
  }
}

template <typename T>
cudaError_t launch_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t N, int64_t T_len,
                           int64_t C, cudaStream_t stream) {
  if (N * C == 0) return cudaSuccess;
  embedding_forward_kernel<<<grid_for(N * C), kBlock, 0, stream>>>(out, tokens, wte, wpe, N, T_len, C);
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B, int64_t T_len,
                            int64_t C, cudaStream_t stream) {
  if (B < 0 || T_len < 0 || C < 0) return cudaErrorInvalidValue;
  return launch_forward(out, tokens, wte, wpe, B * T_len, T_len, C, stream);
}

template <typename T>
cudaError_t token_embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int64_t C,
                                    cudaStream_t stream) {
  if (N < 0 || C < 0) return cudaErrorInvalidValue;
  return launch_forward(out, tokens, wte, static_cast<const T*>(nullptr), N, 1, C, stream);
}

template <typename T>
cudaError_t token_embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int64_t N, int64_t C,
                                     cudaStream_t stream) {
  if (!detail::valid_rows(N) || C < 0) return cudaErrorInvalidValue;
  if (N == 0 || C == 0) return cudaSuccess;
  token_backward_kernel<<<static_cast<unsigned>(N), kBlock, 0, stream>>>(dwte, dout, tokens, N, C);
  return cudaGetLastError();
}

template <typename T>
cudaError_t encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t T_len,
                             int64_t C, cudaStream_t stream) {
  if (B < 0 || T_len < 0 || C < 0) return cudaErrorInvalidValue;
  if (dwte != nullptr) {
    const cudaError_t e = token_embedding_backward(dwte, dout, tokens, B * T_len, C, stream);
    if (e != cudaSuccess) return e;
  }
  if (dwpe == nullptr || B * T_len * C == 0) return cudaSuccess;
  position_backward_kernel<<<grid_for(T_len * C), kBlock, 0, stream>>>(dwpe, dout, B, T_len, C);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE_EMBEDDING(T)                                                                           \
  template cudaError_t encoder_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t, int64_t,      \
                                          cudaStream_t);                                                          \
  template cudaError_t encoder_backward<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t,           \
                                           cudaStream_t);                                                         \
  template cudaError_t token_embedding_forward<T>(T*, const int32_t*, const T*, int64_t, int64_t, cudaStream_t);  \
  template cudaError_t token_embedding_backward<T>(T*, const T*, const int32_t*, int64_t, int64_t, cudaStream_t);
STRATA_FOR_EACH_ELEMENT_TYPE(STRATA_INSTANTIATE_EMBEDDING)
#undef STRATA_INSTANTIATE_EMBEDDING

}  // namespace strata::kernels::cuda
