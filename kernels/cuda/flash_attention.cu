// Tiled causal attention on the tensor cores (contract in flash_attention.cuh), FlashAttention-2's
// structure with mma.sync m16n8k16 (bf16/fp16 operands, fp32 accumulators) and ldmatrix:
//   forward : a block owns 64 kM query rows (4 warps x kM m-tiles of 16 rows, a warp's rows
//             contiguous), walks the key tiles of 64 up to its last row: S = Q K^T, online softmax
//             (base 2), O += P V; writes out and lse. A warp skips the key tiles after its own last
//             row (every key there is masked for it).
//   dq      : a block owns 64 kM query rows, as the forward: P recomputed from lse, dP = dO V^T,
//             dS = P (dP - D), dq += scale dS K, with D = rowsum(dO * O) formed once per row --
//             and, given scratch, written there with lse in base 2 for the dk, dv kernel.
//   dk, dv  : a block owns 64 kM keys of one kv head (a warp's 16 kM contiguous) and walks, for
//             each query head of its group, the query tiles of 64 from the diagonal on: dv += P^T
//             dO, dk += scale dS^T Q (D and lse read from the scratch the dq kernel filled, else
//             formed again for each tile). A warp skips the query tiles before its first key.
// kM (WarpRows in the header) is 2 at head size 64: each fragment a warp reads from shared memory
// feeds two m-tiles' mma, where with one the walks are bound by shared-memory reads (one
// ldmatrix.x4, 512 bytes, per two mma); at 128, 1 (two m-tiles' accumulators do not fit in the
// registers). Every row (or key) goes through the same operations in the same order for either kM
// (the same tiles of 64, the same mma for its 16-row tile, the same k-blocks in the same order):
// the same bits.
// Every walk is software-pipelined: the next tiles' cp.async copies are in flight (two shared
// buffers) while the current ones are used. Two kernels for the backward (dq apart from dk, dv)
// instead of atomics: deterministic. P and dS enter the tensor cores rounded to the element type,
// as in FlashAttention; sums stay fp32.
// The PTX (mma.sync, ldmatrix, cp.async, ex2) is in flash_primitives.cuh; a CPU test compiles this
// file against host emulations of those names (tests/kernels/flash_emulation.h) and runs it.
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"): lane = 4 * g + t; A holds rows
// g, g + 8 and columns 2t, 2t + 1 (+ 8); B columns g, rows 2t, 2t + 1 (+ 8); C rows g, g + 8 and
// columns 2t, 2t + 1. Shared tiles have a pitch of HS + 8 elements so ldmatrix rows fall in
// different banks.
#include <algorithm>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "kernels/cpu/ops_attention.h"  // qkv_row_strides
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/flash_attention.cuh"
#if !defined(STRATA_FLASH_EMULATION)  // else tests/kernels/flash_emulation.h, included first, has them
#include "kernels/cuda/flash_primitives.cuh"
#endif

namespace strata::kernels::cuda::flash {
namespace {

constexpr int kTile = 64;  // keys of the forward's and dq's inner tiles, queries of the dk, dv walk's
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
// Query rows a forward or dq block owns (keys a dk, dv block owns): kWarps warps of kM m-tiles of 16.
template <int kM>
constexpr int kRows = kWarps * 16 * kM;
// At head size 64 the backward kernels' registers are capped for three blocks per multiprocessor
// (the dk, dv kernel's pipelined walk otherwise takes ~210, two blocks where the unpipelined one ran
// three; the cap spills 40 bytes; the dq kernel would take 177); at 128 they need all 255 (a cap
// spills ~600 bytes) and shared memory allows two.
template <int HS>
constexpr int kBackwardBlocksPerSm = HS == 64 ? 3 : 1;
// The dq kernel with two m-tiles a warp reads Q's and dO's fragments from shared memory (held in
// registers they would leave no room for the doubled P, dP and dq accumulators) and runs two blocks
// per multiprocessor.
template <int HS, int kM>
constexpr int kDqBlocksPerSm = kM == 1 ? kBackwardBlocksPerSm<HS> : 2;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int HS>
constexpr int kPitch = HS + 8;

// Queues rows [row0, row0 + kN) of a (T, ld) row-major tensor (HS elements used per row) into
// a kN x kPitch shared tile; rows at or past T become zeros. The caller waits and syncs.
template <typename T, int HS, int kN = kTile>
__device__ __forceinline__ void queue_tile(T* tile, const T* base, int ld, int64_t row0, int64_t T_len) {
  constexpr int kChunks = HS / 8;  // 16-byte chunks per row
  for (int i = threadIdx.x; i < kN * kChunks; i += kThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const int64_t row = row0 + r;
    const bool valid = row < T_len;
    cp_async_16(tile + r * kPitch<HS> + c, base + (valid ? row : 0) * ld + c, valid);
  }
}

// A fragments (16 rows of this warp x 16 columns at column c0) of a shared tile.
template <int HS, typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* tile, int row0, int c0) {
  const int lane = threadIdx.x % 32;
  ldsm_x4(a, tile + (row0 + (lane & 15)) * kPitch<HS> + c0 + (lane >> 4) * 8);
}

// B fragments of two n-tiles (n0, n0 + 8) x 16 k at k0, for B[k][n] = tile[n][k] (tile rows are n).
template <int HS, typename T>
__device__ __forceinline__ void load_b_rows_n(uint32_t (&b)[4], const T* tile, int n0, int k0) {
  const int lane = threadIdx.x % 32;
  ldsm_x4(b, tile + (n0 + (lane & 7) + ((lane >> 4) << 3)) * kPitch<HS> + k0 + ((lane >> 3) & 1) * 8);
}

// B fragments of two n-tiles (n0, n0 + 8) x 16 k at k0, for B[k][n] = tile[k][n] (tile rows are k).
template <int HS, typename T>
__device__ __forceinline__ void load_b_rows_k(uint32_t (&b)[4], const T* tile, int k0, int n0) {
  const int lane = threadIdx.x % 32;
  ldsm_x4_trans(b, tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * kPitch<HS> + n0 + (lane >> 4) * 8);
}

// acc (kM m-tiles of 16 x 8 kNT) = A (kM m-tiles: rows warp_row0 .. + 16 kM of `rows`, HS wide) .
// B^T, B the 8 kNT rows of `cols` from col0: each fragment read from shared memory once.
template <typename T, int HS, int kM, int kNT>
__device__ __forceinline__ void rows_times_cols(float (&acc)[kM][kNT][4], const T* rows, int warp_row0,
                                                const T* cols, int col0) {
  static_assert(kNT % 2 == 0, "n-tiles come in pairs (one ldmatrix.x4)");
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int n = 0; n < kNT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.0f;
#pragma unroll
  for (int kb = 0; kb < HS / 16; ++kb) {
    uint32_t a[kM][4];
#pragma unroll
    for (int m = 0; m < kM; ++m) load_a<HS>(a[m], rows, warp_row0 + m * 16, kb * 16);
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      uint32_t b[4];
      load_b_rows_n<HS>(b, cols, col0 + np * 16, kb * 16);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        Mma<T>::run(acc[m][2 * np], a[m], b[0], b[1]);
        Mma<T>::run(acc[m][2 * np + 1], a[m], b[2], b[3]);
      }
    }
  }
}

// out (kM m-tiles of 16 x HS: HS / 8 n-tiles) += P (kM m-tiles of 16 x 8 kNT, C fragments, packed
// to T) . tile rows k0 .. k0 + 8 kNT (x HS, rows k): each B fragment is read from shared memory
// once for the kM m-tiles. The k-blocks of 16 are added in order, so two calls over k0 = 0 and 32
// add the same terms in the same order as one over 64.
template <typename T, int HS, int kM, int kNT>
__device__ __forceinline__ void p_times_tile(float (&out)[kM][HS / 8][4], const float (&p)[kM][kNT][4], const T* tile,
                                             int k0) {
  static_assert(kNT % 2 == 0, "k-blocks of 16 are two n-tiles of P");
#pragma unroll
  for (int kk = 0; kk < kNT / 2; ++kk) {
    // The C fragments of n-tiles 2kk and 2kk + 1 are the A fragment of k-block kk.
    uint32_t a[kM][4];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      a[m][0] = Mma<T>::pack(p[m][2 * kk][0], p[m][2 * kk][1]);
      a[m][1] = Mma<T>::pack(p[m][2 * kk][2], p[m][2 * kk][3]);
      a[m][2] = Mma<T>::pack(p[m][2 * kk + 1][0], p[m][2 * kk + 1][1]);
      a[m][3] = Mma<T>::pack(p[m][2 * kk + 1][2], p[m][2 * kk + 1][3]);
    }
#pragma unroll
    for (int np = 0; np < HS / 16; ++np) {
      uint32_t b[4];
      load_b_rows_k<HS>(b, tile, k0 + kk * 16, np * 16);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        Mma<T>::run(out[m][2 * np], a[m], b[0], b[1]);
        Mma<T>::run(out[m][2 * np + 1], a[m], b[2], b[3]);
      }
    }
  }
}

// q_ld: the row stride of q and dq; kv_ld: of k, v, dk and dv (both resolved from qkv_stride; 32-bit,
// as NH * HS: fewer registers in the address arithmetic); out and dout are packed (NH * HS).
struct Shape {
  int64_t B, T, NH, NKV;
  int q_ld, kv_ld;
};

// The masks of a warp's walk: a key tile whose last key is after the warp's first row (the tiles
// on its rows' diagonal) or past T has keys to mask; a tile that starts after its last row has
// nothing else (the warp skips it).
struct WarpSpan {
  int row0;     // the warp's first query row
  int last_kt;  // its last key tile; -1 when its rows are all past T

  __device__ __forceinline__ WarpSpan(int first_row, int rows, int T_len) : row0(first_row) {
    const int n_kt = (T_len + kTile - 1) / kTile;
    last_kt = first_row < T_len ? min((first_row + rows - 1) / kTile, n_kt - 1) : -1;
  }
  __device__ __forceinline__ bool walks(int kt) const { return kt <= last_kt; }
  __device__ __forceinline__ bool masked(int kt, int T_len) const {
    return kt * kTile + kTile - 1 > row0 || (kt + 1) * kTile > T_len;
  }
  // Sets x (kM m-tiles of 16 rows x key tile kt, C fragments) to `value` where the key is after the
  // row (row32: each m-tile's rows g and g + 8) or past T, on the tiles masked() names.
  template <int kM>
  __device__ __forceinline__ void mask(float (&x)[kM][8][4], int kt, const int (&row32)[kM][2], int T_len,
                                       float value) const {
    if (!masked(kt, T_len)) return;
    const int t4 = threadIdx.x & 3;
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = kt * kTile + n * 8 + t4 * 2 + (e & 1);
          if (col > row32[m][e >> 1] || col >= T_len) x[m][n][e] = value;
        }
  }
};

template <typename T, int HS, int kM>
__global__ void __launch_bounds__(kThreads) forward_kernel(T* out, float* lse, const T* q, const T* k, const T* v,
                                                           Shape s, float scale_log2) {
  static_assert(kRows<kM> <= 2 * kTile, "Q is staged in buffer 1's two tiles");
  unsigned char* const smem = dynamic_smem();
  // Two (K, V) buffers [K0 V0 K1 V1]: tile kt in buffer kt % 2 while tile kt + 1 arrives in the
  // other. (Offsets, not arrays of pointers: a run-time index would put an array in local memory.)
  T* const base = reinterpret_cast<T*>(smem);
  constexpr int kTileElems = kTile * kPitch<HS>;
  const auto sK = [&](int buf) { return base + 2 * buf * kTileElems; };
  const auto sV = [&](int buf) { return base + (2 * buf + 1) * kTileElems; };
  const int64_t b = blockIdx.x / s.NH, h = blockIdx.x % s.NH, kh = h / (s.NH / s.NKV);
  const int qt = gridDim.y - 1 - blockIdx.y;  // the longest rows start first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
  const int q_ld = s.q_ld, kv_ld = s.kv_ld;
  const T* q_base = q + b * s.T * q_ld + h * HS;
  const T* k_base = k + b * s.T * kv_ld + kh * HS;
  const T* v_base = v + b * s.T * kv_ld + kh * HS;
  const int64_t q0 = static_cast<int64_t>(qt) * kRows<kM>;
  // 32-bit rows and columns for the masks (forward() checks that T's tiles fit).
  const int T32 = static_cast<int>(s.T);
  const int last_kt = min(static_cast<int>((q0 + kRows<kM> - 1) / kTile), (T32 - 1) / kTile);
  const WarpSpan span(static_cast<int>(q0) + warp * 16 * kM, 16 * kM, T32);

  // Q's fragments stay in registers; its rows pass through buffer 1 (K1 and V1 are adjacent: 2
  // kTile rows), while K, V tile 0 arrive.
  queue_tile<T, HS, kRows<kM>>(sK(1), q_base, q_ld, q0, s.T);
  cp_async_commit();
  queue_tile<T, HS>(sK(0), k_base, kv_ld, 0, s.T);
  queue_tile<T, HS>(sV(0), v_base, kv_ld, 0, s.T);
  cp_async_commit();
  cp_async_wait<1>();  // Q's group
  __syncthreads();
  uint32_t qf[kM][HS / 16][4];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int kb = 0; kb < HS / 16; ++kb) load_a<HS>(qf[m][kb], sK(1), (warp * kM + m) * 16, kb * 16);
  __syncthreads();  // every warp has its Q fragments: buffer 1 is free

  float o[kM][HS / 8][4];
  float row_max[kM][2], row_sum[kM][2];
  int row32[kM][2];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int n = 0; n < HS / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[m][n][e] = 0.0f;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      row_max[m][i] = -INFINITY;
      row_sum[m][i] = 0.0f;
      row32[m][i] = span.row0 + m * 16 + g + 8 * i;
    }
  }

  for (int kt = 0; kt <= last_kt; ++kt) {
    const int cur = kt & 1;
    if (kt < last_kt) {  // the next tiles into the other buffer, free since the last iteration's barrier
      queue_tile<T, HS>(sK(cur ^ 1), k_base, kv_ld, static_cast<int64_t>(kt + 1) * kTile, s.T);
      queue_tile<T, HS>(sV(cur ^ 1), v_base, kv_ld, static_cast<int64_t>(kt + 1) * kTile, s.T);
      cp_async_commit();
      cp_async_wait<1>();  // tile kt has landed; kt + 1 may still be in flight
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    if (span.walks(kt)) {  // warp-uniform
      float sc[kM][8][4];
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) sc[m][n][e] = 0.0f;
#pragma unroll
      for (int kb = 0; kb < HS / 16; ++kb)
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t bf[4];
          load_b_rows_n<HS>(bf, sK(cur), np * 16, kb * 16);
#pragma unroll
          for (int m = 0; m < kM; ++m) {
            Mma<T>::run(sc[m][2 * np], qf[m][kb], bf[0], bf[1]);
            Mma<T>::run(sc[m][2 * np + 1], qf[m][kb], bf[2], bf[3]);
          }
        }

#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) sc[m][n][e] *= scale_log2;
      span.mask<kM>(sc, kt, row32, T32, -INFINITY);
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float tile_max = -INFINITY;
#pragma unroll
          for (int n = 0; n < 8; ++n)
#pragma unroll
            for (int c = 0; c < 2; ++c) tile_max = fmaxf(tile_max, sc[m][n][2 * i + c]);
          tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
          tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
          const float new_max = fmaxf(row_max[m][i], tile_max);
          const float correction = fast_exp2(row_max[m][i] - new_max);  // 0 on the first tile
          row_max[m][i] = new_max;
          row_sum[m][i] *= correction;
#pragma unroll
          for (int n = 0; n < HS / 8; ++n) {
            o[m][n][2 * i] *= correction;
            o[m][n][2 * i + 1] *= correction;
          }
#pragma unroll
          for (int n = 0; n < 8; ++n)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const float p = fast_exp2(sc[m][n][2 * i + c] - new_max);
              sc[m][n][2 * i + c] = p;
              row_sum[m][i] += p;
            }
        }
      p_times_tile<T, HS, kM, 8>(o, sc, sV(cur), 0);
    }
    __syncthreads();  // every warp is done with buffer cur before the next iteration refills it
  }

#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float sum = row_sum[m][i];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (row32[m][i] >= T32) continue;
      const float inv = 1.0f / sum;
      T* o_row = out + ((b * s.T + row32[m][i]) * s.NH + h) * HS;
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        *reinterpret_cast<uint32_t*>(o_row + n * 8 + t4 * 2) =
            Mma<T>::pack(o[m][n][2 * i] * inv, o[m][n][2 * i + 1] * inv);
      }
      if (t4 == 0) lse[(b * s.NH + h) * s.T + row32[m][i]] = (row_max[m][i] + log2f(sum)) * kLn2;
    }
}

// D = rowsum(dout * out) in fp32 for the kN rows from row0 (rows past T: 0), into d[kN]; lse in
// base 2 (rows past T: +inf, so their P is 0) into lse2[kN]. Two threads a row, each summing every
// other element: the same order for any kN. All threads; the caller syncs after.
template <typename T, int HS, int kN = kTile>
__device__ __forceinline__ void row_terms(float* d, float* lse2, const T* dout_rows, const T* out_rows, int ld,
                                          const float* lse_rows, int64_t row0, int64_t T_len) {
  for (int r = threadIdx.x / 2; r < kN; r += kThreads / 2) {
    const int64_t row = row0 + r;
    float sum = 0.0f;
    if (row < T_len) {
      const T* a = dout_rows + row * ld;
      const T* c = out_rows + row * ld;
      for (int i = (threadIdx.x & 1); i < HS; i += 2) sum += detail::load(a + i) * detail::load(c + i);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if ((threadIdx.x & 1) == 0) {
      d[r] = sum;
      lse2[r] = row < T_len ? lse_rows[row] * kLog2e : INFINITY;
    }
  }
}

// Per-row terms of the backward the dq kernel hands to the dk, dv kernel: d[row] = D and
// lse2[row] = lse in base 2, rows (b * NH + h) * T + t. Null: the dk, dv kernel forms them itself.
struct RowTerms {
  float* d = nullptr;
  float* lse2 = nullptr;
};

// The dq kernel's shared memory: two (K, V) buffers, with kM = 1 nothing else (Q and dO pass
// through buffer 1 into registers), with kM = 2 Q's and dO's rows for the whole walk; then D and
// lse2 of the block's rows.
template <typename T, int HS, int kM>
constexpr size_t dq_smem_bytes() {
  const size_t tile = static_cast<size_t>(kTile) * kPitch<HS> * sizeof(T);
  const size_t rows = kM == 1 ? 0 : 2 * static_cast<size_t>(kRows<kM>) * kPitch<HS> * sizeof(T);
  return 4 * tile + rows + 2 * kRows<kM> * sizeof(float);
}

template <typename T, int HS, int kM>
__global__ void __launch_bounds__(kThreads, kDqBlocksPerSm<HS, kM>) dq_kernel(T* dq, const T* dout, const T* q,
                                                                              const T* k, const T* v, const T* out,
                                                                              const float* lse, Shape s,
                                                                              float scale_log2, float scale,
                                                                              RowTerms terms) {
  constexpr bool kFragsHeld = kM == 1;  // Q's and dO's A fragments in registers for the whole walk
  unsigned char* const smem = dynamic_smem();
  // Two (K, V) buffers [K0 V0 K1 V1], as the forward; then (kM = 2) Q's and dO's rows.
  T* const base = reinterpret_cast<T*>(smem);
  constexpr int kTileElems = kTile * kPitch<HS>;
  constexpr int kRowsElems = kRows<kM> * kPitch<HS>;
  const auto sK = [&](int buf) { return base + 2 * buf * kTileElems; };
  const auto sV = [&](int buf) { return base + (2 * buf + 1) * kTileElems; };
  T* const sQ = kFragsHeld ? sK(1) : base + 4 * kTileElems;
  T* const sO = kFragsHeld ? sV(1) : base + 4 * kTileElems + kRowsElems;
  float* const sD = reinterpret_cast<float*>(base + 4 * kTileElems + (kFragsHeld ? 0 : 2 * kRowsElems));
  float* const sL = sD + kRows<kM>;
  const int64_t b = blockIdx.x / s.NH, h = blockIdx.x % s.NH, kh = h / (s.NH / s.NKV);
  const int qt = gridDim.y - 1 - blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
  const int q_ld = s.q_ld, kv_ld = s.kv_ld, o_ld = static_cast<int>(s.NH) * HS;
  const int64_t q_off = b * s.T * q_ld + h * HS, o_off = (b * s.T * s.NH + h) * HS;
  const T* k_base = k + b * s.T * kv_ld + kh * HS;
  const T* v_base = v + b * s.T * kv_ld + kh * HS;
  const int64_t q0 = static_cast<int64_t>(qt) * kRows<kM>;
  const int T32 = static_cast<int>(s.T);
  const int last_kt = min(static_cast<int>((q0 + kRows<kM> - 1) / kTile), (T32 - 1) / kTile);
  const int warp_row0 = warp * 16 * kM;  // within the block
  const WarpSpan span(static_cast<int>(q0) + warp_row0, 16 * kM, T32);

  queue_tile<T, HS, kRows<kM>>(sQ, q + q_off, q_ld, q0, s.T);
  queue_tile<T, HS, kRows<kM>>(sO, dout + o_off, o_ld, q0, s.T);
  cp_async_commit();
  queue_tile<T, HS>(sK(0), k_base, kv_ld, 0, s.T);
  queue_tile<T, HS>(sV(0), v_base, kv_ld, 0, s.T);
  cp_async_commit();
  row_terms<T, HS, kRows<kM>>(sD, sL, dout + o_off, out + o_off, o_ld, lse + (b * s.NH + h) * s.T, q0, s.T);
  cp_async_wait<1>();  // Q and dO
  __syncthreads();
  uint32_t qf[kFragsHeld ? HS / 16 : 1][4], dof[kFragsHeld ? HS / 16 : 1][4];
  if constexpr (kFragsHeld) {
#pragma unroll
    for (int kb = 0; kb < HS / 16; ++kb) {
      load_a<HS>(qf[kb], sQ, warp_row0, kb * 16);
      load_a<HS>(dof[kb], sO, warp_row0, kb * 16);
    }
  }
  int row32[kM][2];
  float row_d[kM][2], row_lse[kM][2];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = warp_row0 + m * 16 + g + 8 * i;
      row32[m][i] = static_cast<int>(q0) + r;
      row_d[m][i] = sD[r];
      row_lse[m][i] = sL[r];
    }
  if (terms.d != nullptr) {
    for (int r = threadIdx.x; r < kRows<kM> && q0 + r < s.T; r += kThreads) {
      const int64_t row = (b * s.NH + h) * s.T + q0 + r;
      terms.d[row] = sD[r];
      terms.lse2[row] = sL[r];
    }
  }
  __syncthreads();  // buffer 1 is free

  float acc[kM][HS / 8][4];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int n = 0; n < HS / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.0f;

  for (int kt = 0; kt <= last_kt; ++kt) {
    const int cur = kt & 1;
    if (kt < last_kt) {
      queue_tile<T, HS>(sK(cur ^ 1), k_base, kv_ld, static_cast<int64_t>(kt + 1) * kTile, s.T);
      queue_tile<T, HS>(sV(cur ^ 1), v_base, kv_ld, static_cast<int64_t>(kt + 1) * kTile, s.T);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    if (span.walks(kt)) {  // warp-uniform
      float p[kM][8][4], dp[kM][8][4];
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) p[m][n][e] = dp[m][n][e] = 0.0f;
#pragma unroll
      for (int kb = 0; kb < HS / 16; ++kb) {
        uint32_t qa[kM][4], da[kM][4];
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          if constexpr (kFragsHeld) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              qa[m][e] = qf[kb][e];
              da[m][e] = dof[kb][e];
            }
          } else {
            load_a<HS>(qa[m], sQ, warp_row0 + m * 16, kb * 16);
            load_a<HS>(da[m], sO, warp_row0 + m * 16, kb * 16);
          }
        }
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t bk[4], bv[4];
          load_b_rows_n<HS>(bk, sK(cur), np * 16, kb * 16);
          load_b_rows_n<HS>(bv, sV(cur), np * 16, kb * 16);
#pragma unroll
          for (int m = 0; m < kM; ++m) {
            Mma<T>::run(p[m][2 * np], qa[m], bk[0], bk[1]);
            Mma<T>::run(p[m][2 * np + 1], qa[m], bk[2], bk[3]);
            Mma<T>::run(dp[m][2 * np], da[m], bv[0], bv[1]);
            Mma<T>::run(dp[m][2 * np + 1], da[m], bv[2], bv[3]);
          }
        }
      }
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) p[m][n][e] = fast_exp2(p[m][n][e] * scale_log2 - row_lse[m][e >> 1]);
      span.mask<kM>(p, kt, row32, T32, 0.0f);
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) p[m][n][e] *= dp[m][n][e] - row_d[m][e >> 1];  // dS
      p_times_tile<T, HS, kM, 8>(acc, p, sK(cur), 0);
    }
    __syncthreads();  // buffer cur is free for the iteration after next's tiles
  }

#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (row32[m][i] >= T32) continue;
      T* row = dq + (b * s.T + row32[m][i]) * s.q_ld + h * HS;
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        T* at = row + n * 8 + t4 * 2;
        *reinterpret_cast<uint32_t*>(at) = Mma<T>::pack(detail::load(at) + scale * acc[m][n][2 * i],
                                                        detail::load(at + 1) + scale * acc[m][n][2 * i + 1]);
      }
    }
}

// A dk, dv block owns kRows<kM> keys: kWarps warps of kM m-tiles of 16 keys, a warp's contiguous.
// With two m-tiles a warp takes each query tile in two halves of 32 queries (P and dS for 32 keys
// x 32 queries at a time: with 64 the four accumulators would not fit in the registers); the
// k-blocks of dv += P^T dO and dk += dS^T Q are still added in query order, so the same bits.
template <int kM>
constexpr int kKeyCols = kM == 1 ? kTile : kTile / 2;
template <int HS, int kM>
constexpr int kDkvBlocksPerSm = kM == 1 ? kBackwardBlocksPerSm<HS> : 2;

template <typename T, int HS, int kM>
constexpr size_t dkv_smem_bytes() {
  const size_t tile = static_cast<size_t>(kTile) * kPitch<HS> * sizeof(T);
  return 2 * kM * tile + 4 * tile + 4 * kTile * sizeof(float);
}

// kTermsGiven: D and lse2 of every query row come from `terms` (the dq kernel wrote them), copied
// with the tiles; otherwise each tile's are formed from dout, out and lse again.
template <typename T, int HS, int kM, bool kTermsGiven>
__global__ void __launch_bounds__(kThreads, kDkvBlocksPerSm<HS, kM>) dkv_kernel(T* dk, T* dv, const T* dout,
                                                                                const T* q, const T* k, const T* v,
                                                                                const T* out, const float* lse,
                                                                                Shape s, float scale_log2,
                                                                                float scale, RowTerms terms) {
  static_assert(kThreads == 2 * kTile, "one thread per row term: D by the first half, lse2 by the second");
  constexpr int kKeys = kRows<kM>;        // keys of the block
  constexpr int kCols = kKeyCols<kM>;     // queries of a tile taken at a time
  constexpr int kNT = kCols / 8;          // their n-tiles
  unsigned char* const smem = dynamic_smem();
  // [K V Q0 dO0 Q1 dO1 | D0 lse0 D1 lse1]: K and V (kKeys rows each) for the whole walk, two
  // (Q, dO, D, lse2) buffers: step i in buffer i % 2 while step i + 1 arrives in the other.
  constexpr int kTileElems = kTile * kPitch<HS>;
  T* const sK = reinterpret_cast<T*>(smem);
  T* const sV = sK + kM * kTileElems;
  T* const sQ0 = sK + 2 * kM * kTileElems;
  float* const terms_base = reinterpret_cast<float*>(sQ0 + 4 * kTileElems);
  const auto sQ = [&](int buf) { return sQ0 + 2 * buf * kTileElems; };
  const auto sO = [&](int buf) { return sQ0 + (2 * buf + 1) * kTileElems; };
  const auto sD = [&](int buf) { return terms_base + 2 * buf * kTile; };
  const auto sL = [&](int buf) { return terms_base + (2 * buf + 1) * kTile; };
  const int64_t b = blockIdx.x / s.NKV, kh = blockIdx.x % s.NKV, group = s.NH / s.NKV;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
  const int q_ld = s.q_ld, kv_ld = s.kv_ld, o_ld = static_cast<int>(s.NH) * HS;
  const int64_t kv_off = b * s.T * kv_ld + kh * HS;
  // The first key blocks see the most queries: they start first.
  const int64_t k0 = static_cast<int64_t>(blockIdx.y) * kKeys;
  const int T32 = static_cast<int>(s.T);
  const int n_qt = (T32 + kTile - 1) / kTile;
  const int first_qt = static_cast<int>(k0 / kTile);  // the query tile on the block's first key
  // The steps: for each query head h of the group, the query tiles qt = first_qt .. n_qt - 1.
  const int spans = n_qt - first_qt;
  const int steps = static_cast<int>(group) * spans;
  const auto head_of = [&](int i) { return kh * group + i / spans; };
  const auto tile_of = [&](int i) { return first_qt + i % spans; };
  const auto queue_step = [&](int i, int buf) {
    const int64_t h = head_of(i), q0 = static_cast<int64_t>(tile_of(i)) * kTile;
    queue_tile<T, HS>(sQ(buf), q + b * s.T * q_ld + h * HS, q_ld, q0, s.T);
    queue_tile<T, HS>(sO(buf), dout + (b * s.T * s.NH + h) * HS, o_ld, q0, s.T);
    if constexpr (kTermsGiven) {
      const int r = threadIdx.x % kTile;
      const bool valid = q0 + r < s.T;  // rows past T: 0 (their P is masked below)
      const int64_t row = (b * s.NH + h) * s.T + (valid ? q0 + r : 0);
      if (threadIdx.x < kTile) {
        cp_async_4(sD(buf) + r, terms.d + row, valid);
      } else {
        cp_async_4(sL(buf) + r, terms.lse2 + row, valid);
      }
    }
  };

  queue_tile<T, HS, kKeys>(sK, k + kv_off, kv_ld, k0, s.T);
  queue_tile<T, HS, kKeys>(sV, v + kv_off, kv_ld, k0, s.T);
  queue_step(0, 0);
  cp_async_commit();
  // This warp's keys; it walks a query tile holding a query at or after its first key (the tiles
  // before hold only masked pairs for it), and masks in one holding a query before its last key or
  // rows past T. All warp-uniform.
  const int warp_key0 = static_cast<int>(k0) + warp * 16 * kM;
  const int warp_first_qt = warp_key0 / kTile;
  const int lane_key0 = warp_key0 + g;  // this lane's keys: lane_key0 + 16 m + 8 i

  float dk_acc[kM][HS / 8][4], dv_acc[kM][HS / 8][4];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int n = 0; n < HS / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk_acc[m][n][e] = dv_acc[m][n][e] = 0.0f;

  for (int i = 0; i < steps; ++i) {
    const int cur = i & 1;
    const int qt = tile_of(i);
    const int q0_32 = qt * kTile;
    if (i + 1 < steps) {  // the other buffer is free since the last iteration's closing barrier
      queue_step(i + 1, cur ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    if constexpr (!kTermsGiven) {
      const int64_t h = head_of(i), o_off = (b * s.T * s.NH + h) * HS;
      row_terms<T, HS>(sD(cur), sL(cur), dout + o_off, out + o_off, o_ld, lse + (b * s.NH + h) * s.T, q0_32, s.T);
    }
    __syncthreads();

    if (warp_key0 < T32 && qt >= warp_first_qt) {
#pragma unroll
      for (int c0 = 0; c0 < kTile; c0 += kCols) {
        // S^T (this warp's 16 kM keys x kCols queries) = K Q^T, then P^T.
        float p[kM][kNT][4];
        rows_times_cols<T, HS, kM, kNT>(p, sK, warp * 16 * kM, sQ(cur), c0);
#pragma unroll
        for (int m = 0; m < kM; ++m)
#pragma unroll
          for (int n = 0; n < kNT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              p[m][n][e] = fast_exp2(p[m][n][e] * scale_log2 - sL(cur)[c0 + n * 8 + t4 * 2 + (e & 1)]);
        // Masked: queries before a key, and rows past T.
        if (q0_32 < warp_key0 + 16 * kM - 1 || q0_32 + kTile > T32) {
#pragma unroll
          for (int m = 0; m < kM; ++m)
#pragma unroll
            for (int n = 0; n < kNT; ++n)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int query = q0_32 + c0 + n * 8 + t4 * 2 + (e & 1);
                if (query < lane_key0 + m * 16 + 8 * (e >> 1) || query >= T32) p[m][n][e] = 0.0f;
              }
        }
        p_times_tile<T, HS, kM, kNT>(dv_acc, p, sO(cur), c0);  // dv += P^T dO
        float ds[kM][kNT][4];
        rows_times_cols<T, HS, kM, kNT>(ds, sV, warp * 16 * kM, sO(cur), c0);  // dP^T = V dO^T
#pragma unroll
        for (int m = 0; m < kM; ++m)
#pragma unroll
          for (int n = 0; n < kNT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              ds[m][n][e] = p[m][n][e] * (ds[m][n][e] - sD(cur)[c0 + n * 8 + t4 * 2 + (e & 1)]);
        p_times_tile<T, HS, kM, kNT>(dk_acc, ds, sQ(cur), c0);  // dk += dS^T Q (scaled below)
      }
    }
    __syncthreads();  // every warp is done with buffer cur before the step after next refills it
  }

#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int key = lane_key0 + m * 16 + 8 * i;
      if (key >= T32) continue;
      T* dk_row = dk + kv_off + static_cast<int64_t>(key) * kv_ld;
      T* dv_row = dv + kv_off + static_cast<int64_t>(key) * kv_ld;
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        T* a = dk_row + n * 8 + t4 * 2;
        *reinterpret_cast<uint32_t*>(a) = Mma<T>::pack(detail::load(a) + scale * dk_acc[m][n][2 * i],
                                                       detail::load(a + 1) + scale * dk_acc[m][n][2 * i + 1]);
        T* c = dv_row + n * 8 + t4 * 2;
        *reinterpret_cast<uint32_t*>(c) =
            Mma<T>::pack(detail::load(c) + dv_acc[m][n][2 * i], detail::load(c + 1) + dv_acc[m][n][2 * i + 1]);
      }
    }
}

template <int HS, typename T>
constexpr size_t tile_bytes() {
  return static_cast<size_t>(kTile) * kPitch<HS> * sizeof(T);
}

template <typename T, int HS, int kM>
cudaError_t forward_hs(T* out, float* lse, const T* q, const T* k, const T* v, Shape s, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(s.B * s.NH), static_cast<unsigned>((s.T + kRows<kM> - 1) / kRows<kM>));
  const float scale_log2 = kLog2e / sqrtf(static_cast<float>(HS));
  return launch(forward_kernel<T, HS, kM>, grid, kThreads, 4 * tile_bytes<HS, T>(), stream, out, lse, q, k, v, s,
                scale_log2);
}

template <typename T, int HS, int kM>
cudaError_t backward_hs(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                        const float* lse, Shape s, float* scratch, size_t scratch_floats, cudaStream_t stream) {
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const float scale_log2 = kLog2e * scale;
  const uint64_t rows = static_cast<uint64_t>(s.B * s.NH * s.T);
  RowTerms terms;
  if (scratch != nullptr && 2 * rows <= scratch_floats) terms = RowTerms{scratch, scratch + rows};
  const dim3 dq_grid(static_cast<unsigned>(s.B * s.NH), static_cast<unsigned>((s.T + kRows<kM> - 1) / kRows<kM>));
  if (cudaError_t e = launch(dq_kernel<T, HS, kM>, dq_grid, kThreads, dq_smem_bytes<T, HS, kM>(), stream, dq, dout,
                             q, k, v, out, lse, s, scale_log2, scale, terms);
      e != cudaSuccess)
    return e;
  const dim3 grid(static_cast<unsigned>(s.B * s.NKV), static_cast<unsigned>((s.T + kRows<kM> - 1) / kRows<kM>));
  const size_t smem = dkv_smem_bytes<T, HS, kM>();
  if (terms.d != nullptr) {
    return launch(dkv_kernel<T, HS, kM, true>, grid, kThreads, smem, stream, dk, dv, dout, q, k, v, out, lse, s,
                  scale_log2, scale, terms);
  }
  return launch(dkv_kernel<T, HS, kM, false>, grid, kThreads, smem, stream, dk, dv, dout, q, k, v, out, lse, s,
                scale_log2, scale, terms);
}

// The caller has checked that the strides fit in an int (forward, backward).
Shape shape_of(int64_t B, int64_t T_len, int64_t NH, int64_t NKV, int64_t HS, int64_t qkv_stride) {
  const QkvRowStrides ld = qkv_row_strides(NH, NKV, HS, qkv_stride);
  return {B, T_len, NH, NKV, static_cast<int>(ld.q), static_cast<int>(ld.kv)};
}

// The m-tiles a warp of the three kernels owns at head size HS for `rows`; 0 when that choice is
// not built (two at head size 128).
int m_tiles(int64_t HS, WarpRows rows) {
  switch (rows) {
    case WarpRows::automatic:
      return HS == 64 ? 2 : 1;
    case WarpRows::m16:
      return 1;
    case WarpRows::m32:
      return HS == 64 ? 2 : 0;
  }
  return 0;
}

}  // namespace

template <typename T>
bool supported(int64_t HS, int64_t qkv_stride, std::initializer_list<const void*> pointers) {
  if constexpr (std::is_same_v<T, float>) {
    return false;
  } else {
    if (HS != 64 && HS != 128) return false;
    if (qkv_stride % 8 != 0) return false;  // every row of q, k, v 16-byte aligned
    for (const void* p : pointers)
      if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
    return true;
  }
}

template <typename T>
cudaError_t forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B, int64_t T_len, int64_t NH,
                    int64_t NKV, int64_t HS, cudaStream_t stream, int64_t qkv_stride, WarpRows rows) {
  if constexpr (std::is_same_v<T, float>) {
    return cudaErrorInvalidValue;
  } else {
    if (!supported<T>(HS, qkv_stride, {}) || (qkv_stride != 0 && qkv_stride < NH * HS) ||
        std::max(qkv_stride, NH * HS) > std::numeric_limits<int>::max()) {
      return cudaErrorInvalidValue;
    }
    const Shape s = shape_of(B, T_len, NH, NKV, HS, qkv_stride);
    if (B * NH > 0x7fffffff || (T_len + kTile - 1) / kTile > 65535) return cudaErrorInvalidValue;
    switch (m_tiles(HS, rows)) {
      case 1:
        return HS == 64 ? forward_hs<T, 64, 1>(out, lse, q, k, v, s, stream)
                        : forward_hs<T, 128, 1>(out, lse, q, k, v, s, stream);
      case 2:
        return forward_hs<T, 64, 2>(out, lse, q, k, v, s, stream);
      default:
        return cudaErrorInvalidValue;
    }
  }
}

template <typename T>
cudaError_t backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                     const float* lse, int64_t B, int64_t T_len, int64_t NH, int64_t NKV, int64_t HS,
                     cudaStream_t stream, float* scratch, size_t scratch_floats, int64_t qkv_stride,
                     WarpRows rows) {
  if constexpr (std::is_same_v<T, float>) {
    return cudaErrorInvalidValue;
  } else {
    if (!supported<T>(HS, qkv_stride, {}) || (qkv_stride != 0 && qkv_stride < NH * HS) ||
        std::max(qkv_stride, NH * HS) > std::numeric_limits<int>::max()) {
      return cudaErrorInvalidValue;
    }
    const Shape s = shape_of(B, T_len, NH, NKV, HS, qkv_stride);
    if (B * NH > 0x7fffffff || (T_len + kTile - 1) / kTile > 65535) return cudaErrorInvalidValue;
    switch (m_tiles(HS, rows)) {
      case 1:
        return HS == 64 ? backward_hs<T, 64, 1>(dq, dk, dv, dout, q, k, v, out, lse, s, scratch, scratch_floats, stream)
                        : backward_hs<T, 128, 1>(dq, dk, dv, dout, q, k, v, out, lse, s, scratch, scratch_floats,
                                                 stream);
      case 2:
        return backward_hs<T, 64, 2>(dq, dk, dv, dout, q, k, v, out, lse, s, scratch, scratch_floats, stream);
      default:
        return cudaErrorInvalidValue;
    }
  }
}

#define STRATA_INSTANTIATE_FLASH(T)                                                                              \
  template bool supported<T>(int64_t, int64_t, std::initializer_list<const void*>);                             \
  template cudaError_t forward<T>(T*, float*, const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,  \
                                  int64_t, cudaStream_t, int64_t, WarpRows);                                     \
  template cudaError_t backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const float*,   \
                                   int64_t, int64_t, int64_t, int64_t, int64_t, cudaStream_t, float*, size_t,    \
                                   int64_t, WarpRows);
STRATA_FOR_EACH_ELEMENT_TYPE(STRATA_INSTANTIATE_FLASH)
#undef STRATA_INSTANTIATE_FLASH

}  // namespace strata::kernels::cuda::flash
