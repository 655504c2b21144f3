// Tiled causal attention on the tensor cores (contract in flash_attention.cuh), FlashAttention-2's
// structure with mma.sync m16n8k16 (bf16/fp16 operands, fp32 accumulators) and ldmatrix:
//   forward : a block owns 64 query rows (4 warps x 16), walks the key tiles of 64 up to the
//             diagonal: S = Q K^T, online softmax (base 2), O += P V; writes out and lse.
//   dq      : a block owns 64 query rows: P recomputed from lse, dP = dO V^T, dS = P (dP - D),
//             dq += scale dS K, with D = rowsum(dO * O) formed once per row -- and, given scratch,
//             written there with lse in base 2 for the dk, dv kernel.
//   dk, dv  : a block owns 64 keys of one kv head and walks, for each query head of its group, the
//             query tiles from the diagonal on: dv += P^T dO, dk += scale dS^T Q (D and lse read
//             from the scratch the dq kernel filled, else formed again for each tile).
// Every walk is software-pipelined: the next tiles' cp.async copies are in flight (two shared
// buffers) while the current ones are used. Two kernels for the backward (dq apart from dk, dv)
// instead of atomics: deterministic. P and dS enter the tensor cores rounded to the element type,
// as in FlashAttention; sums stay fp32.
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"): lane = 4 * g + t; A holds rows
// g, g + 8 and columns 2t, 2t + 1 (+ 8); B columns g, rows 2t, 2t + 1 (+ 8); C rows g, g + 8 and
// columns 2t, 2t + 1. Shared tiles have a pitch of HS + 8 elements so ldmatrix rows fall in
// different banks.
#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/flash_attention.cuh"

namespace strata::kernels::cuda::flash {
namespace {

constexpr int kTile = 64;  // rows a block owns, and columns of each inner tile
constexpr int kWarps = 4;  // each warp owns 16 of the block's rows
constexpr int kThreads = 32 * kWarps;
// At head size 64 the backward kernels' registers are capped for three blocks per multiprocessor
// (the dk, dv kernel's pipelined walk otherwise takes ~210, two blocks where the unpipelined one ran
// three; the cap spills 40 bytes; the dq kernel would take 177); at 128 they need all 255 (a cap
// spills ~600 bytes) and shared memory allows two.
template <int HS>
constexpr int kBackwardBlocksPerSm = HS == 64 ? 3 : 1;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int HS>
constexpr int kPitch = HS + 8;

// One mma.sync m16n8k16 for each 16-bit type: d += a . b.
template <typename T>
struct Mma;
template <>
struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  // Two floats as a packed pair, `lo` in the low half (the lower column), round to nearest even: one
  // cvt for both (the same bits as detail::f32_to_bf16_bits for every value but NaN, whose payload
  // the hardware does not keep).
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
};
template <>
struct Mma<__half> {
  static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {  // as above, IEEE fp16
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
};

// 2^x on the special-function unit alone (results below 2^-126 flush to 0; exp2f adds a range fix
// of three instructions per score for them). Every kernel here uses it, so the backward's P is the
// forward's to the bit.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}

// 16 bytes global -> shared, zero-filled when !valid (cp.async with src-size 0 reads nothing).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
// 4 bytes global -> shared, zero-filled when !valid.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}


// Queues rows [row0, row0 + kTile) of a (T, ld) row-major tensor (HS elements used per row) into
// a kTile x kPitch shared tile; rows at or past T become zeros. The caller waits and syncs.
template <typename T, int HS>
__device__ __forceinline__ void queue_tile(T* tile, const T* base, int64_t ld, int64_t row0, int64_t T_len) {
  constexpr int kChunks = HS / 8;  // 16-byte chunks per row
  for (int i = threadIdx.x; i < kTile * kChunks; i += kThreads) {
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

// acc (16 x 64: 8 n-tiles) = A (this warp's 16 rows of `rows`, HS wide) . B^T, B the 64 rows of `cols`.
template <typename T, int HS>
__device__ __forceinline__ void rows_times_cols(float (&acc)[8][4], const T* rows, int warp_row0, const T* cols) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
#pragma unroll
  for (int kb = 0; kb < HS / 16; ++kb) {
    uint32_t a[4];
    load_a<HS>(a, rows, warp_row0, kb * 16);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t b[4];
      load_b_rows_n<HS>(b, cols, np * 16, kb * 16);
      Mma<T>::run(acc[2 * np], a, b[0], b[1]);
      Mma<T>::run(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// out (16 x HS: HS / 8 n-tiles) += P (16 x 64, C fragments, packed to T) . tile (64 x HS, rows k).
template <typename T, int HS>
__device__ __forceinline__ void p_times_tile(float (&out)[HS / 8][4], const float (&p)[8][4], const T* tile) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    // The C fragments of n-tiles 2kk and 2kk + 1 are the A fragment of k-block kk.
    const uint32_t a[4] = {Mma<T>::pack(p[2 * kk][0], p[2 * kk][1]), Mma<T>::pack(p[2 * kk][2], p[2 * kk][3]),
                           Mma<T>::pack(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                           Mma<T>::pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int np = 0; np < HS / 16; ++np) {
      uint32_t b[4];
      load_b_rows_k<HS>(b, tile, kk * 16, np * 16);
      Mma<T>::run(out[2 * np], a, b[0], b[1]);
      Mma<T>::run(out[2 * np + 1], a, b[2], b[3]);
    }
  }
}

struct Shape {
  int64_t B, T, NH, NKV;
};

template <typename T, int HS>
__global__ void __launch_bounds__(kThreads) forward_kernel(T* out, float* lse, const T* q, const T* k, const T* v,
                                                           Shape s, float scale_log2) {
  extern __shared__ __align__(16) unsigned char smem[];
  // Two (K, V) buffers [K0 V0 K1 V1]: tile kt in buffer kt % 2 while tile kt + 1 arrives in the
  // other. (Offsets, not arrays of pointers: a run-time index would put an array in local memory.)
  T* const base = reinterpret_cast<T*>(smem);
  constexpr int kTileElems = kTile * kPitch<HS>;
  const auto sK = [&](int buf) { return base + 2 * buf * kTileElems; };
  const auto sV = [&](int buf) { return base + (2 * buf + 1) * kTileElems; };
  const int64_t b = blockIdx.x / s.NH, h = blockIdx.x % s.NH, kh = h / (s.NH / s.NKV);
  const int qt = gridDim.y - 1 - blockIdx.y;  // the longest rows start first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
  const int64_t q_ld = s.NH * HS, kv_ld = s.NKV * HS;
  const T* q_base = q + (b * s.T * s.NH + h) * HS;
  const T* k_base = k + (b * s.T * s.NKV + kh) * HS;
  const T* v_base = v + (b * s.T * s.NKV + kh) * HS;
  const int64_t q0 = static_cast<int64_t>(qt) * kTile;

  // Q's fragments stay in registers; the tile passes through sV(1), while K, V tile 0 arrive.
  queue_tile<T, HS>(sV(1), q_base, q_ld, q0, s.T);
  cp_async_commit();
  queue_tile<T, HS>(sK(0), k_base, kv_ld, 0, s.T);
  queue_tile<T, HS>(sV(0), v_base, kv_ld, 0, s.T);
  cp_async_commit();
  cp_async_wait<1>();  // Q's group
  __syncthreads();
  uint32_t qf[HS / 16][4];
#pragma unroll
  for (int kb = 0; kb < HS / 16; ++kb) load_a<HS>(qf[kb], sV(1), warp * 16, kb * 16);
  __syncthreads();  // every warp has its Q fragments: buffer 1 is free

  float o[HS / 8][4];
#pragma unroll
  for (int n = 0; n < HS / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  const int64_t rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  // 32-bit copies for the masks (forward() checks that T's tiles fit).
  const int row32[2] = {static_cast<int>(rows[0]), static_cast<int>(rows[1])};
  const int T32 = static_cast<int>(s.T);

  for (int kt = 0; kt <= qt; ++kt) {
    const int cur = kt & 1;
    if (kt < qt) {  // the next tiles into the other buffer, free since the last iteration's barrier
      queue_tile<T, HS>(sK(cur ^ 1), k_base, kv_ld, static_cast<int64_t>(kt + 1) * kTile, s.T);
      queue_tile<T, HS>(sV(cur ^ 1), v_base, kv_ld, static_cast<int64_t>(kt + 1) * kTile, s.T);
      cp_async_commit();
      cp_async_wait<1>();  // tile kt has landed; kt + 1 may still be in flight
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    float sc[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[n][e] = 0.0f;
#pragma unroll
    for (int kb = 0; kb < HS / 16; ++kb)
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bf[4];
        load_b_rows_n<HS>(bf, sK(cur), np * 16, kb * 16);
        Mma<T>::run(sc[2 * np], qf[kb], bf[0], bf[1]);
        Mma<T>::run(sc[2 * np + 1], qf[kb], bf[2], bf[3]);
      }

#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[n][e] *= scale_log2;
    // Only the diagonal tile has keys after a row or past T (a tile before it ends below q0 < T).
    if (kt == qt) {
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = kt * kTile + n * 8 + t4 * 2 + (e & 1);
          if (col > row32[e >> 1] || col >= T32) sc[n][e] = -INFINITY;
        }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int c = 0; c < 2; ++c) tile_max = fmaxf(tile_max, sc[n][2 * i + c]);
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float new_max = fmaxf(row_max[i], tile_max);
      const float correction = fast_exp2(row_max[i] - new_max);  // 0 on the first tile
      row_max[i] = new_max;
      row_sum[i] *= correction;
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        o[n][2 * i] *= correction;
        o[n][2 * i + 1] *= correction;
      }
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float p = fast_exp2(sc[n][2 * i + c] - new_max);
          sc[n][2 * i + c] = p;
          row_sum[i] += p;
        }
    }
    p_times_tile<T, HS>(o, sc, sV(cur));
    __syncthreads();  // every warp is done with buffer cur before the next iteration refills it
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = row_sum[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (rows[i] >= s.T) continue;
    const float inv = 1.0f / sum;
    T* o_row = out + ((b * s.T + rows[i]) * s.NH + h) * HS;
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      *reinterpret_cast<uint32_t*>(o_row + n * 8 + t4 * 2) = Mma<T>::pack(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
    }
    if (t4 == 0) lse[(b * s.NH + h) * s.T + rows[i]] = (row_max[i] + log2f(sum)) * kLn2;
  }
}

// D = rowsum(dout * out) in fp32 for the 64 rows of a tile (rows past T: 0), into d[64]; lse in
// base 2 (rows past T: +inf, so their P is 0) into lse2[64]. All threads; the caller syncs after.
template <typename T, int HS>
__device__ __forceinline__ void row_terms(float* d, float* lse2, const T* dout_rows, const T* out_rows, int64_t ld,
                                          const float* lse_rows, int64_t row0, int64_t T_len) {
  for (int r = threadIdx.x / 2; r < kTile; r += kThreads / 2) {
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

template <typename T, int HS>
__global__ void __launch_bounds__(kThreads, kBackwardBlocksPerSm<HS>) dq_kernel(T* dq, const T* dout, const T* q, const T* k, const T* v,
                                                      const T* out, const float* lse, Shape s, float scale_log2,
                                                      float scale, RowTerms terms) {
  extern __shared__ __align__(16) unsigned char smem[];
  // Two (K, V) buffers [K0 V0 K1 V1], as the forward; Q and dO pass through buffer 1 first.
  T* const base = reinterpret_cast<T*>(smem);
  constexpr int kTileElems = kTile * kPitch<HS>;
  const auto sK = [&](int buf) { return base + 2 * buf * kTileElems; };
  const auto sV = [&](int buf) { return base + (2 * buf + 1) * kTileElems; };
  float* sD = reinterpret_cast<float*>(base + 4 * kTileElems);
  float* sL = sD + kTile;
  const int64_t b = blockIdx.x / s.NH, h = blockIdx.x % s.NH, kh = h / (s.NH / s.NKV);
  const int qt = gridDim.y - 1 - blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
  const int64_t q_ld = s.NH * HS, kv_ld = s.NKV * HS;
  const int64_t q_off = (b * s.T * s.NH + h) * HS;
  const T* k_base = k + (b * s.T * s.NKV + kh) * HS;
  const T* v_base = v + (b * s.T * s.NKV + kh) * HS;
  const int64_t q0 = static_cast<int64_t>(qt) * kTile;

  queue_tile<T, HS>(sK(1), q + q_off, q_ld, q0, s.T);
  queue_tile<T, HS>(sV(1), dout + q_off, q_ld, q0, s.T);
  cp_async_commit();
  queue_tile<T, HS>(sK(0), k_base, kv_ld, 0, s.T);
  queue_tile<T, HS>(sV(0), v_base, kv_ld, 0, s.T);
  cp_async_commit();
  row_terms<T, HS>(sD, sL, dout + q_off, out + q_off, q_ld, lse + (b * s.NH + h) * s.T, q0, s.T);
  cp_async_wait<1>();  // Q and dO
  __syncthreads();
  uint32_t qf[HS / 16][4], dof[HS / 16][4];
#pragma unroll
  for (int kb = 0; kb < HS / 16; ++kb) {
    load_a<HS>(qf[kb], sK(1), warp * 16, kb * 16);
    load_a<HS>(dof[kb], sV(1), warp * 16, kb * 16);
  }
  const int64_t rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  const int row32[2] = {static_cast<int>(rows[0]), static_cast<int>(rows[1])};
  const int T32 = static_cast<int>(s.T);
  const float row_d[2] = {sD[warp * 16 + g], sD[warp * 16 + g + 8]};
  const float row_lse[2] = {sL[warp * 16 + g], sL[warp * 16 + g + 8]};
  if (terms.d != nullptr && threadIdx.x < kTile && q0 + threadIdx.x < s.T) {
    const int64_t row = (b * s.NH + h) * s.T + q0 + threadIdx.x;
    terms.d[row] = sD[threadIdx.x];
    terms.lse2[row] = sL[threadIdx.x];
  }
  __syncthreads();  // buffer 1 is free

  float acc[HS / 8][4];
#pragma unroll
  for (int n = 0; n < HS / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;

  for (int kt = 0; kt <= qt; ++kt) {
    const int cur = kt & 1;
    if (kt < qt) {
      queue_tile<T, HS>(sK(cur ^ 1), k_base, kv_ld, static_cast<int64_t>(kt + 1) * kTile, s.T);
      queue_tile<T, HS>(sV(cur ^ 1), v_base, kv_ld, static_cast<int64_t>(kt + 1) * kTile, s.T);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    float p[8][4], dp[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) p[n][e] = dp[n][e] = 0.0f;
#pragma unroll
    for (int kb = 0; kb < HS / 16; ++kb)
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bk[4], bv[4];
        load_b_rows_n<HS>(bk, sK(cur), np * 16, kb * 16);
        load_b_rows_n<HS>(bv, sV(cur), np * 16, kb * 16);
        Mma<T>::run(p[2 * np], qf[kb], bk[0], bk[1]);
        Mma<T>::run(p[2 * np + 1], qf[kb], bk[2], bk[3]);
        Mma<T>::run(dp[2 * np], dof[kb], bv[0], bv[1]);
        Mma<T>::run(dp[2 * np + 1], dof[kb], bv[2], bv[3]);
      }
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) p[n][e] = fast_exp2(p[n][e] * scale_log2 - row_lse[e >> 1]);
    if (kt == qt) {  // as in the forward, only the diagonal tile has masked keys
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = kt * kTile + n * 8 + t4 * 2 + (e & 1);
          if (col > row32[e >> 1] || col >= T32) p[n][e] = 0.0f;
        }
    }
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) p[n][e] *= dp[n][e] - row_d[e >> 1];  // dS
    p_times_tile<T, HS>(acc, p, sK(cur));
    __syncthreads();  // buffer cur is free for the iteration after next's tiles
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (rows[i] >= s.T) continue;
    T* row = dq + ((b * s.T + rows[i]) * s.NH + h) * HS;
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      T* at = row + n * 8 + t4 * 2;
      *reinterpret_cast<uint32_t*>(at) = Mma<T>::pack(detail::load(at) + scale * acc[n][2 * i],
                                                      detail::load(at + 1) + scale * acc[n][2 * i + 1]);
    }
  }
}

// kTermsGiven: D and lse2 of every query row come from `terms` (the dq kernel wrote them), copied
// with the tiles; otherwise each tile's are formed from dout, out and lse again.
template <typename T, int HS, bool kTermsGiven>
__global__ void __launch_bounds__(kThreads, kBackwardBlocksPerSm<HS>) dkv_kernel(T* dk, T* dv, const T* dout, const T* q, const T* k,
                                                       const T* v, const T* out, const float* lse, Shape s,
                                                       float scale_log2, float scale, RowTerms terms) {
  static_assert(kThreads == 2 * kTile, "one thread per row term: D by the first half, lse2 by the second");
  extern __shared__ __align__(16) unsigned char smem[];
  // [K V Q0 dO0 Q1 dO1 | D0 lse0 D1 lse1]: K and V for the whole walk, two (Q, dO, D, lse2)
  // buffers: step i in buffer i % 2 while step i + 1 arrives in the other.
  constexpr int kTileElems = kTile * kPitch<HS>;
  T* const sK = reinterpret_cast<T*>(smem);
  T* const sV = sK + kTileElems;
  float* const terms_base = reinterpret_cast<float*>(sK + 6 * kTileElems);
  const auto sQ = [&](int buf) { return sK + (2 + 2 * buf) * kTileElems; };
  const auto sO = [&](int buf) { return sK + (3 + 2 * buf) * kTileElems; };
  const auto sD = [&](int buf) { return terms_base + 2 * buf * kTile; };
  const auto sL = [&](int buf) { return terms_base + (2 * buf + 1) * kTile; };
  const int64_t b = blockIdx.x / s.NKV, kh = blockIdx.x % s.NKV, group = s.NH / s.NKV;
  const int kt = blockIdx.y;  // the first key tiles see the most queries: they start first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
  const int64_t q_ld = s.NH * HS, kv_ld = s.NKV * HS;
  const int64_t kv_off = (b * s.T * s.NKV + kh) * HS;
  const int64_t k0 = static_cast<int64_t>(kt) * kTile;
  const int n_qt = static_cast<int>((s.T + kTile - 1) / kTile);
  // The steps: for each query head h of the group, the query tiles qt = kt .. n_qt - 1.
  const int spans = n_qt - kt;
  const int steps = static_cast<int>(group) * spans;
  const auto head_of = [&](int i) { return kh * group + i / spans; };
  const auto tile_of = [&](int i) { return kt + i % spans; };
  const auto queue_step = [&](int i, int buf) {
    const int64_t h = head_of(i), q0 = static_cast<int64_t>(tile_of(i)) * kTile;
    const int64_t q_off = (b * s.T * s.NH + h) * HS;
    queue_tile<T, HS>(sQ(buf), q + q_off, q_ld, q0, s.T);
    queue_tile<T, HS>(sO(buf), dout + q_off, q_ld, q0, s.T);
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

  queue_tile<T, HS>(sK, k + kv_off, kv_ld, k0, s.T);
  queue_tile<T, HS>(sV, v + kv_off, kv_ld, k0, s.T);
  queue_step(0, 0);
  cp_async_commit();
  const int64_t keys[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  const int key32[2] = {static_cast<int>(keys[0]), static_cast<int>(keys[1])};
  const int k0_32 = static_cast<int>(k0), T32 = static_cast<int>(s.T);

  float dk_acc[HS / 8][4], dv_acc[HS / 8][4];
#pragma unroll
  for (int n = 0; n < HS / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[n][e] = dv_acc[n][e] = 0.0f;

  for (int i = 0; i < steps; ++i) {
    const int cur = i & 1;
    const int64_t q0 = static_cast<int64_t>(tile_of(i)) * kTile;
    if (i + 1 < steps) {  // the other buffer is free since the last iteration's closing barrier
      queue_step(i + 1, cur ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    if constexpr (!kTermsGiven) {
      const int64_t h = head_of(i), q_off = (b * s.T * s.NH + h) * HS;
      row_terms<T, HS>(sD(cur), sL(cur), dout + q_off, out + q_off, q_ld, lse + (b * s.NH + h) * s.T, q0, s.T);
    }
    __syncthreads();

    // S^T (this warp's 16 keys x 64 queries) = K Q^T, then P^T.
    float p[8][4];
    rows_times_cols<T, HS>(p, sK, warp * 16, sQ(cur));
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) p[n][e] = fast_exp2(p[n][e] * scale_log2 - sL(cur)[n * 8 + t4 * 2 + (e & 1)]);
    // Masked: queries before a key (the diagonal tile) and rows past T (the last query tile).
    const int q0_32 = static_cast<int>(q0);
    if (q0_32 == k0_32 || q0_32 + kTile > T32) {
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int query = q0_32 + n * 8 + t4 * 2 + (e & 1);
          if ((q0_32 == k0_32 && query < key32[e >> 1]) || query >= T32) p[n][e] = 0.0f;
        }
    }
    p_times_tile<T, HS>(dv_acc, p, sO(cur));  // dv += P^T dO
    float ds[8][4];
    rows_times_cols<T, HS>(ds, sV, warp * 16, sO(cur));  // dP^T = V dO^T
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[n][e] = p[n][e] * (ds[n][e] - sD(cur)[n * 8 + t4 * 2 + (e & 1)]);
    p_times_tile<T, HS>(dk_acc, ds, sQ(cur));  // dk += dS^T Q (scaled below)
    __syncthreads();  // every warp is done with buffer cur before the step after next refills it
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (keys[i] >= s.T) continue;
    T* dk_row = dk + kv_off + keys[i] * kv_ld;
    T* dv_row = dv + kv_off + keys[i] * kv_ld;
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      T* a = dk_row + n * 8 + t4 * 2;
      *reinterpret_cast<uint32_t*>(a) = Mma<T>::pack(detail::load(a) + scale * dk_acc[n][2 * i],
                                                     detail::load(a + 1) + scale * dk_acc[n][2 * i + 1]);
      T* c = dv_row + n * 8 + t4 * 2;
      *reinterpret_cast<uint32_t*>(c) =
          Mma<T>::pack(detail::load(c) + dv_acc[n][2 * i], detail::load(c + 1) + dv_acc[n][2 * i + 1]);
    }
  }
}

template <int HS, typename T>
constexpr size_t tile_bytes() {
  return static_cast<size_t>(kTile) * kPitch<HS> * sizeof(T);
}

// Launches `kernel` with `smem` bytes of dynamic shared memory, raising its limit past 48 KiB once.
template <typename Kernel, typename... Args>
cudaError_t launch(Kernel kernel, dim3 grid, size_t smem, cudaStream_t stream, Args... args) {
  if (smem > 48 * 1024) {
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem));
        e != cudaSuccess)
      return e;
  }
  kernel<<<grid, kThreads, smem, stream>>>(args...);
  return cudaGetLastError();
}

template <typename T, int HS>
cudaError_t forward_hs(T* out, float* lse, const T* q, const T* k, const T* v, Shape s, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(s.B * s.NH), static_cast<unsigned>((s.T + kTile - 1) / kTile));
  const float scale_log2 = kLog2e / sqrtf(static_cast<float>(HS));
  return launch(forward_kernel<T, HS>, grid, 4 * tile_bytes<HS, T>(), stream, out, lse, q, k, v, s, scale_log2);
}

template <typename T, int HS>
cudaError_t backward_hs(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                        const float* lse, Shape s, float* scratch, size_t scratch_floats, cudaStream_t stream) {
  const unsigned tiles = static_cast<unsigned>((s.T + kTile - 1) / kTile);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const float scale_log2 = kLog2e * scale;
  const size_t rows_bytes = 2 * kTile * sizeof(float);
  const uint64_t rows = static_cast<uint64_t>(s.B * s.NH * s.T);
  RowTerms terms;
  if (scratch != nullptr && 2 * rows <= scratch_floats) terms = RowTerms{scratch, scratch + rows};
  if (cudaError_t e = launch(dq_kernel<T, HS>, dim3(static_cast<unsigned>(s.B * s.NH), tiles),
                             4 * tile_bytes<HS, T>() + rows_bytes, stream, dq, dout, q, k, v, out, lse, s, scale_log2,
                             scale, terms);
      e != cudaSuccess)
    return e;
  const dim3 grid(static_cast<unsigned>(s.B * s.NKV), tiles);
  const size_t smem = 6 * tile_bytes<HS, T>() + 2 * rows_bytes;
  if (terms.d != nullptr) {
    return launch(dkv_kernel<T, HS, true>, grid, smem, stream, dk, dv, dout, q, k, v, out, lse, s, scale_log2, scale,
                  terms);
  }
  return launch(dkv_kernel<T, HS, false>, grid, smem, stream, dk, dv, dout, q, k, v, out, lse, s, scale_log2, scale,
                terms);
}

}  // namespace

template <typename T>
bool supported(int64_t HS, std::initializer_list<const void*> pointers) {
  if constexpr (std::is_same_v<T, float>) {
    return false;
  } else {
    if (HS != 64 && HS != 128) return false;
    for (const void* p : pointers)
      if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
    return true;
  }
}

template <typename T>
cudaError_t forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B, int64_t T_len, int64_t NH,
                    int64_t NKV, int64_t HS, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    return cudaErrorInvalidValue;
  } else {
    const Shape s{B, T_len, NH, NKV};
    if (B * NH > 0x7fffffff || (T_len + kTile - 1) / kTile > 65535) return cudaErrorInvalidValue;
    return HS == 64 ? forward_hs<T, 64>(out, lse, q, k, v, s, stream)
                    : forward_hs<T, 128>(out, lse, q, k, v, s, stream);
  }
}

template <typename T>
cudaError_t backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                     const float* lse, int64_t B, int64_t T_len, int64_t NH, int64_t NKV, int64_t HS,
                     cudaStream_t stream, float* scratch, size_t scratch_floats) {
  if constexpr (std::is_same_v<T, float>) {
    return cudaErrorInvalidValue;
  } else {
    const Shape s{B, T_len, NH, NKV};
    if (B * NH > 0x7fffffff || (T_len + kTile - 1) / kTile > 65535) return cudaErrorInvalidValue;
    return HS == 64 ? backward_hs<T, 64>(dq, dk, dv, dout, q, k, v, out, lse, s, scratch, scratch_floats, stream)
                    : backward_hs<T, 128>(dq, dk, dv, dout, q, k, v, out, lse, s, scratch, scratch_floats, stream);
  }
}

#define STRATA_INSTANTIATE_FLASH(T)                                                                              \
  template bool supported<T>(int64_t, std::initializer_list<const void*>);                                      \
  template cudaError_t forward<T>(T*, float*, const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,  \
                                  int64_t, cudaStream_t);                                                        \
  template cudaError_t backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const float*,   \
                                   int64_t, int64_t, int64_t, int64_t, int64_t, cudaStream_t, float*, size_t);
STRATA_FOR_EACH_ELEMENT_TYPE(STRATA_INSTANTIATE_FLASH)
#undef STRATA_INSTANTIATE_FLASH

}  // namespace strata::kernels::cuda::flash
