// Encoder / token embedding kernels (contract in embedding.cuh). Forward: a grid-stride copy (plus
// the position row) of the elements whose row's token the table holds. Backward, sorted path:
// CUB's stable radix sort of (token id, row) pairs puts each token's rows together in row order; a
// block per (sorted index, column chunk) returns unless its index starts a run of a token the
// table holds, otherwise it sums the run's rows in order (fp32) and adds to the table row once.
// Slow path (no workspace): one block per row n; it returns unless the table holds n's token and n
// is its first row, otherwise it walks the rows n..N-1 in order (token ids staged in shared memory,
// one column per thread). Both add the same fp32 sums in the same order whatever the table's
// range: the same bits. `row_begin`, `rows`: the table's TableRows (begin, count).
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/embedding.cuh"

namespace strata::kernels::cuda {
namespace {

using detail::add_to;
using detail::grid_for;
using detail::kBlock;
using detail::load;
using detail::store;

// The table row of `token` in a table holding ids [row_begin, row_begin + rows), or -1.
__device__ __forceinline__ int64_t table_row(int32_t token, int64_t row_begin, int64_t rows) {
  const int64_t row = static_cast<int64_t>(token) - row_begin;
  return row >= 0 && row < rows ? row : -1;
}

// wpe == null: plain token embedding.
template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t N,
                                         int64_t T_len, int64_t C, int64_t row_begin, int64_t rows) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N * C; i += stride) {
    const int64_t r = i / C, c = i % C;
    const int64_t row = table_row(tokens[r], row_begin, rows);
    if (row < 0) continue;  // a token of another tile: out[r] is not written
    float x = load(wte + row * C + c);
    if (wpe != nullptr) x += load(wpe + (r % T_len) * C + c);
    store(out + i, x);
  }
}

template <typename T>
__global__ void token_backward_kernel(T* dwte, const T* dout, const int32_t* tokens, int64_t N, int64_t C,
                                      int64_t row_begin, int64_t table_rows) {
  __shared__ int32_t tile[kBlock];
  const int64_t n = blockIdx.x;
  const int32_t token = tokens[n];
  const int64_t row = table_row(token, row_begin, table_rows);
  if (row < 0) return;  // the whole block: a token of another tile
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
    if (c < C) add_to(dwte + row * C + c, acc);
  }
}

// rows[i] = i.
__global__ void iota_kernel(int32_t* rows, int64_t N) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N; i += stride) {
    rows[i] = static_cast<int32_t>(i);
  }
}

// Block (kBlock) at sorted index s = blockIdx.x, columns [blockIdx.y * kBlock, +kBlock): if s
// starts a run of equal ids in `sorted_tokens`, sums dout over the run's rows (`sorted_rows`,
// increasing within the run) in order, one column per thread, and adds once. The run is walked in
// chunks of kBlock entries staged in shared memory; within a chunk the run is a prefix, so its
// length is a count and the row loads of a chunk are independent (unrolled, several in flight).
template <typename T>
__global__ void sorted_token_backward_kernel(T* dwte, const T* dout, const int32_t* sorted_tokens,
                                             const int32_t* sorted_rows, int64_t N, int64_t C, int64_t row_begin,
                                             int64_t table_rows) {
  __shared__ int32_t rows[kBlock];
  const int64_t s = blockIdx.x;
  const int32_t token = sorted_tokens[s];
  const int64_t row = table_row(token, row_begin, table_rows);
  if (row < 0) return;                                 // a token of another tile
  if (s > 0 && sorted_tokens[s - 1] == token) return;  // the run's first index owns it
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kBlock + threadIdx.x;
  float acc = 0.0f;
  for (int64_t j0 = s; j0 < N; j0 += kBlock) {
    const int64_t j = j0 + threadIdx.x;
    const bool in_run = j < N && sorted_tokens[j] == token;
    __syncthreads();  // the previous chunk's rows are read
    if (in_run) rows[threadIdx.x] = sorted_rows[j];
    const int count = __syncthreads_count(in_run);  // sorted: the run is a prefix of the chunk
    if (c < C) {
#pragma unroll 4
      for (int i = 0; i < count; ++i) acc += load(dout + static_cast<int64_t>(rows[i]) * C + c);
    }
    if (count < kBlock) break;
  }
  if (c < C) add_to(dwte + row * C + c, acc);
}

// The sorted path's workspace: sorted ids, row indices in and sorted, then CUB's temporary storage.
struct SortedLayout {
  size_t tokens = 0, rows_in = 0, rows_out = 0, temp = 0, temp_bytes = 0, total = 0;
};

constexpr size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

cudaError_t sorted_layout(int64_t N, SortedLayout* layout) {
  size_t temp_bytes = 0;
  const cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const int32_t*>(nullptr),
                                                        static_cast<int32_t*>(nullptr),
                                                        static_cast<const int32_t*>(nullptr),
                                                        static_cast<int32_t*>(nullptr), static_cast<int>(N));
  if (e != cudaSuccess) return e;
  const size_t ids = align_up(sizeof(int32_t) * static_cast<size_t>(N));
  layout->tokens = 0;
  layout->rows_in = ids;
  layout->rows_out = 2 * ids;
  layout->temp = 3 * ids;
  layout->temp_bytes = temp_bytes;
  layout->total = 3 * ids + align_up(temp_bytes);
  return cudaSuccess;
}

template <typename T>
cudaError_t sorted_token_backward(T* dwte, const T* dout, const int32_t* tokens, int64_t N, int64_t C,
                                  TableRows table, std::byte* workspace, const SortedLayout& layout,
                                  cudaStream_t stream) {
  auto* sorted_tokens = reinterpret_cast<int32_t*>(workspace + layout.tokens);
  auto* rows_in = reinterpret_cast<int32_t*>(workspace + layout.rows_in);
  auto* sorted_rows = reinterpret_cast<int32_t*>(workspace + layout.rows_out);
  iota_kernel<<<grid_for(N), kBlock, 0, stream>>>(rows_in, N);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  size_t temp_bytes = layout.temp_bytes;
  // All 32 key bits (signed keys sort in numeric order), all N rows: LSD radix sort is stable, so
  // a token's run is in row order whatever the table.
  if (const cudaError_t e = cub::DeviceRadixSort::SortPairs(workspace + layout.temp, temp_bytes, tokens,
                                                             sorted_tokens, rows_in, sorted_rows,
                                                             static_cast<int>(N), 0, 32, stream);
      e != cudaSuccess) {
    return e;
  }
  const dim3 grid(static_cast<unsigned>(N), static_cast<unsigned>((C + kBlock - 1) / kBlock));
  sorted_token_backward_kernel<<<grid, kBlock, 0, stream>>>(dwte, dout, sorted_tokens, sorted_rows, N, C,
                                                            table.begin, table.count);
  return cudaGetLastError();
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
                           int64_t C, TableRows table, cudaStream_t stream) {
  if (N * C == 0 || table.count == 0) return cudaSuccess;
  embedding_forward_kernel<<<grid_for(N * C), kBlock, 0, stream>>>(out, tokens, wte, wpe, N, T_len, C,
                                                                   table.begin, table.count);
  return cudaGetLastError();
}

bool valid_table(TableRows table) { return table.begin >= 0 && table.count >= 0; }

}  // namespace

template <typename T>
cudaError_t encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B, int64_t T_len,
                            int64_t C, cudaStream_t stream, TableRows table) {
  if (B < 0 || T_len < 0 || C < 0 || !valid_table(table)) return cudaErrorInvalidValue;
  return launch_forward(out, tokens, wte, wpe, B * T_len, T_len, C, table, stream);
}

template <typename T>
cudaError_t token_embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int64_t C,
                                    cudaStream_t stream, TableRows table) {
  if (N < 0 || C < 0 || !valid_table(table)) return cudaErrorInvalidValue;
  return launch_forward(out, tokens, wte, static_cast<const T*>(nullptr), N, 1, C, table, stream);
}

size_t token_embedding_backward_workspace_bytes(int64_t N) {
  if (N <= 0 || !detail::valid_rows(N)) return 0;
  SortedLayout layout;
  return sorted_layout(N, &layout) == cudaSuccess ? layout.total : 0;
}

template <typename T>
cudaError_t token_embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int64_t N, int64_t C,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream, TableRows table) {
  if (!detail::valid_rows(N) || C < 0 || (C + kBlock - 1) / kBlock > 65535 || !valid_table(table)) {
    return cudaErrorInvalidValue;
  }
  if (N == 0 || C == 0 || table.count == 0) return cudaSuccess;
  if (workspace != nullptr) {
    SortedLayout layout;
    if (const cudaError_t e = sorted_layout(N, &layout); e != cudaSuccess) return e;
    if (layout.total <= workspace_bytes) {
      return sorted_token_backward(dwte, dout, tokens, N, C, table, static_cast<std::byte*>(workspace), layout,
                                   stream);
    }
  }
  token_backward_kernel<<<static_cast<unsigned>(N), kBlock, 0, stream>>>(dwte, dout, tokens, N, C, table.begin,
                                                                         table.count);
  return cudaGetLastError();
}

template <typename T>
cudaError_t encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t T_len,
                             int64_t C, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                             TableRows table) {
  if (B < 0 || T_len < 0 || C < 0 || !valid_table(table)) return cudaErrorInvalidValue;
  if (dwte != nullptr) {
    const cudaError_t e =
        token_embedding_backward(dwte, dout, tokens, B * T_len, C, workspace, workspace_bytes, stream, table);
    if (e != cudaSuccess) return e;
  }
  if (dwpe == nullptr || B * T_len * C == 0) return cudaSuccess;
  position_backward_kernel<<<grid_for(T_len * C), kBlock, 0, stream>>>(dwpe, dout, B, T_len, C);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE_EMBEDDING(T)                                                                           \
  template cudaError_t encoder_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t, int64_t,      \
                                          cudaStream_t, TableRows);                                               \
  template cudaError_t encoder_backward<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t, void*,    \
                                           size_t, cudaStream_t, TableRows);                                      \
  template cudaError_t token_embedding_forward<T>(T*, const int32_t*, const T*, int64_t, int64_t, cudaStream_t,   \
                                                  TableRows);                                                     \
  template cudaError_t token_embedding_backward<T>(T*, const T*, const int32_t*, int64_t, int64_t, void*, size_t,  \
                                                   cudaStream_t, TableRows);
STRATA_FOR_EACH_ELEMENT_TYPE(STRATA_INSTANTIATE_EMBEDDING)
#undef STRATA_INSTANTIATE_EMBEDDING

}  // namespace strata::kernels::cuda
