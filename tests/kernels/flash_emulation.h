// A host emulation of the CUDA execution model that kernels/cuda/flash_attention.cu uses, so a CPU
// test can run those kernels -- their indexing, masks, tile walks, barriers and the fragment
// layouts of mma.sync and ldmatrix -- without a GPU. What it emulates:
//   - a launch: the grid's blocks one after another, each block's threads as fibers (ucontext) on
//     the calling thread, resumed in a shuffled order each round so that a missing barrier shows;
//   - threadIdx, blockIdx, blockDim, gridDim; __syncthreads (all the block's threads);
//     __shfl_xor_sync; the block's dynamic shared memory (fresh, poisoned with 0xA5, per block);
//   - flash_primitives.cuh's names: mma.sync m16n8k16 (A row-major, B column-major, fp32 sums in
//     k order: not the tensor cores' order, so not their bits), the cvt packing (round to nearest
//     even: kernels/cpu/half.h's conversions), ex2.approx.ftz (exp2f, results below 2^-126
//     flushed), ldmatrix .x4 and .x4.trans (each lane's row address, the PTX ISA's fragment
//     layouts), cp.async (each committed group
//     lands, by a seeded coin, at once or only at the cp.async.wait_group that lets it: the
//     earliest and the latest the hardware may, so a copy into a buffer still read and a read
//     before its wait both show), and the launch itself;
//   - the bit casts and __fmul_rn device_common.cuh needs.
// Warp-wide operations must be reached by all 32 lanes (the kernels' are warp-uniform); a warp
// operation or barrier reached by some threads and not others hangs the run, which the test's
// timeout reports. Include this first, then define STRATA_FLASH_EMULATION and include the .cu.
// Not thread-safe: one launch at a time in a process.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <ucontext.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cpu/half.h"

namespace strata::emulation {

inline constexpr int kWarpSize = 32;

// One thread of the block being run.
struct Fiber {
  ucontext_t context{};
  std::vector<unsigned char> stack;
  uint3 thread_idx{};
  bool done = false;
  // cp.async: the copies of each committed group (oldest first), then the open group's.
  struct Copy {
    void* dst;
    const void* src;
    int bytes;  // 0: zero-fill
    int size;
  };
  std::vector<std::vector<Copy>> groups;
  std::vector<Copy> open;
};

// A barrier of `count` fibers: the last to arrive releases the others (who yield until it does).
struct Barrier {
  int count = 0;
  int arrived = 0;
  uint64_t generation = 0;
};

// A warp's exchange area for warp-wide operations: two sets of slots, used alternately, so a lane
// that has read its values may write the next operation's while a slower lane still reads.
struct WarpState {
  Barrier barrier;
  std::array<std::array<std::array<uint64_t, 8>, kWarpSize>, 2> slots{};
};

struct BlockRun {
  dim3 grid, block;
  uint3 block_idx{};
  std::vector<Fiber> fibers;
  std::vector<WarpState> warps;
  Barrier block_barrier;
  std::vector<unsigned char> shared;
  ucontext_t scheduler{};
  int current = -1;
  std::function<void()> body;
  std::mt19937 random{12345};  // the schedule's shuffles and cp.async's landing times
  int coin() { return static_cast<int>(random() & 1u); }
};

inline BlockRun*& current_block() {
  static BlockRun* run = nullptr;
  return run;
}
inline Fiber& current_fiber() { return current_block()->fibers[static_cast<size_t>(current_block()->current)]; }
inline int linear_thread() {
  const uint3 t = current_fiber().thread_idx;
  const dim3 b = current_block()->block;
  return static_cast<int>(t.x + b.x * (t.y + b.y * t.z));
}
inline void yield_to_scheduler() {
  BlockRun& run = *current_block();
  swapcontext(&run.fibers[static_cast<size_t>(run.current)].context, &run.scheduler);
}
inline void arrive_and_wait(Barrier& b) {
  const uint64_t generation = b.generation;
  if (++b.arrived == b.count) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  while (b.generation == generation) yield_to_scheduler();
}

// Every lane's `value` (up to 64 bytes), indexed by lane, once all 32 lanes have given theirs.
template <typename V>
std::array<V, kWarpSize> warp_exchange(const V& value) {
  static_assert(sizeof(V) <= 8 * sizeof(uint64_t) && std::is_trivially_copyable_v<V>);
  const int thread = linear_thread();
  WarpState& w = current_block()->warps[static_cast<size_t>(thread / kWarpSize)];
  const int lane = thread % kWarpSize;
  auto& slots = w.slots[w.barrier.generation & 1];
  std::memcpy(slots[static_cast<size_t>(lane)].data(), &value, sizeof(V));
  arrive_and_wait(w.barrier);
  std::array<V, kWarpSize> all;
  for (size_t l = 0; l < kWarpSize; ++l) std::memcpy(&all[l], slots[l].data(), sizeof(V));
  return all;
}
inline int lane_id() { return linear_thread() % kWarpSize; }

inline void fiber_entry() {
  BlockRun& run = *current_block();
  run.body();
  run.fibers[static_cast<size_t>(run.current)].done = true;
}

// Makes f's context start fiber_entry on f's stack, and return to `link`. (getcontext "returns
// twice" in principle, so it sits in a function of its own, with nothing live across it.)
[[gnu::noinline]] inline void prepare_fiber(Fiber& f, ucontext_t* link) {
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack.data();
  f.context.uc_stack.ss_size = f.stack.size();
  f.context.uc_link = link;
  makecontext(&f.context, fiber_entry, 0);
}

// Runs body() as every thread of every block of `grid` x `block`, with `shared_bytes` of dynamic
// shared memory a block.
inline void run_grid(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body) {
  constexpr size_t kStackBytes = 256 * 1024;
  const int threads = static_cast<int>(block.x * block.y * block.z);
  BlockRun run;
  run.grid = grid;
  run.block = block;
  run.body = body;
  run.fibers.resize(static_cast<size_t>(threads));
  for (Fiber& f : run.fibers) f.stack.resize(kStackBytes);
  std::vector<int> order(static_cast<size_t>(threads));
  current_block() = &run;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        run.block_idx = uint3{bx, by, bz};
        run.shared.assign(shared_bytes + 16, 0xA5);
        run.block_barrier = Barrier{threads, 0, 0};
        run.warps.assign(static_cast<size_t>((threads + kWarpSize - 1) / kWarpSize), WarpState{});
        for (WarpState& w : run.warps) w.barrier.count = kWarpSize;
        for (int t = 0; t < threads; ++t) {
          Fiber& f = run.fibers[static_cast<size_t>(t)];
          f.done = false;
          f.groups.clear();
          f.open.clear();
          f.thread_idx = uint3{static_cast<unsigned>(t) % block.x, (static_cast<unsigned>(t) / block.x) % block.y,
                               static_cast<unsigned>(t) / (block.x * block.y)};
          prepare_fiber(f, &run.scheduler);
          order[static_cast<size_t>(t)] = t;
        }
        for (bool live = true; live;) {
          live = false;
          std::shuffle(order.begin(), order.end(), run.random);
          for (const int t : order) {
            if (run.fibers[static_cast<size_t>(t)].done) continue;
            live = true;
            run.current = t;
            swapcontext(&run.scheduler, &run.fibers[static_cast<size_t>(t)].context);
          }
        }
      }
  current_block() = nullptr;
}

// cp.async: queue a copy into the thread's open group; the groups land at a wait.
inline void queue_copy(void* dst, const void* src, int size, bool valid) {
  current_fiber().open.push_back(Fiber::Copy{dst, src, valid ? size : 0, size});
}
inline void land(const std::vector<Fiber::Copy>& group) {
  for (const Fiber::Copy& c : group) {
    if (c.bytes == 0) {
      std::memset(c.dst, 0, static_cast<size_t>(c.size));
    } else {
      std::memcpy(c.dst, c.src, static_cast<size_t>(c.bytes));
    }
  }
}
// A committed group lands, by a coin the run's seed fixes, either at once (so a copy into a buffer
// other warps still read shows as a missing barrier) or at the wait that lets it (so a read before
// that wait sees the poison).
inline void commit_copies() {
  Fiber& f = current_fiber();
  if (current_block()->coin() != 0) {
    land(f.open);
    f.groups.emplace_back();
  } else {
    f.groups.push_back(std::move(f.open));
  }
  f.open.clear();
}
inline void land_copies(int pending) {
  Fiber& f = current_fiber();
  while (static_cast<int>(f.groups.size()) > pending) {
    land(f.groups.front());
    f.groups.erase(f.groups.begin());
  }
}

}  // namespace strata::emulation

// CUDA's built-in variables and device functions, for host code.
#if !defined(__launch_bounds__)
#define __launch_bounds__(...)
#endif
using std::min;
#define threadIdx (::strata::emulation::current_fiber().thread_idx)
#define blockIdx (::strata::emulation::current_block()->block_idx)
#define blockDim (::strata::emulation::current_block()->block)
#define gridDim (::strata::emulation::current_block()->grid)

inline void __syncthreads() {
  ::strata::emulation::arrive_and_wait(::strata::emulation::current_block()->block_barrier);
}
template <typename V>
V __shfl_xor_sync(unsigned /*mask: all lanes*/, V value, int lane_mask) {
  const auto all = ::strata::emulation::warp_exchange(value);
  return all[static_cast<size_t>(::strata::emulation::lane_id() ^ lane_mask)];
}
inline float __uint_as_float(unsigned x) { return ::strata::kernels::bits_float(x); }
inline unsigned __float_as_uint(float f) { return ::strata::kernels::float_bits(f); }
inline float __fmul_rn(float a, float b) { return a * b; }

namespace strata::kernels::cuda::flash {

namespace emulated {
// The 16-bit format of T (kernels/cpu/half.h's conversions are the rounding the hardware's cvt.rn does).
template <typename T>
constexpr FloatFormat kFormat = std::is_same_v<T, __nv_bfloat16> ? FloatFormat::bf16 : FloatFormat::f16;
// The low and high halves of a packed pair, as floats.
inline float unpack_lo(uint32_t v, FloatFormat f) { return half_to_float(f, static_cast<uint16_t>(v & 0xffffu)); }
inline float unpack_hi(uint32_t v, FloatFormat f) { return unpack_lo(v >> 16, f); }
// d += A (16 x 16) . B (16 x 8): the operands gathered from the warp's fragments.
inline void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, FloatFormat format) {
  struct Frag {
    uint32_t a[4], b[2];
  };
  const auto all = ::strata::emulation::warp_exchange(Frag{{a[0], a[1], a[2], a[3]}, {b0, b1}});
  float A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    const Frag& f = all[static_cast<size_t>(lane)];
    const int rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
    for (int r = 0; r < 4; ++r) {
      A[rows[r]][cols[r]] = unpack_lo(f.a[r], format);
      A[rows[r]][cols[r] + 1] = unpack_hi(f.a[r], format);
    }
    B[2 * t][g] = unpack_lo(f.b[0], format);
    B[2 * t + 1][g] = unpack_hi(f.b[0], format);
    B[2 * t + 8][g] = unpack_lo(f.b[1], format);
    B[2 * t + 9][g] = unpack_hi(f.b[1], format);
  }
  const int lane = ::strata::emulation::lane_id(), g = lane >> 2, t = lane & 3;
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
    d[e] += sum;
  }
}
// ldmatrix .x4: lanes 8j .. 8j + 7 give the rows of matrix j; lane L receives, of matrix j, row L/4
// columns 2(L%4), 2(L%4) + 1 (transposed: rows 2(L%4), 2(L%4) + 1 of column L/4).
inline void ldmatrix(uint32_t (&r)[4], const void* p, bool transposed) {
  const auto rows = ::strata::emulation::warp_exchange(reinterpret_cast<uintptr_t>(p));
  const int lane = ::strata::emulation::lane_id();
  for (int j = 0; j < 4; ++j) {
    uint16_t lo, hi;
    if (!transposed) {
      const uint16_t* row = reinterpret_cast<const uint16_t*>(rows[static_cast<size_t>(8 * j + lane / 4)]);
      lo = row[2 * (lane % 4)];
      hi = row[2 * (lane % 4) + 1];
    } else {
      lo = reinterpret_cast<const uint16_t*>(rows[static_cast<size_t>(8 * j + 2 * (lane % 4))])[lane / 4];
      hi = reinterpret_cast<const uint16_t*>(rows[static_cast<size_t>(8 * j + 2 * (lane % 4) + 1)])[lane / 4];
    }
    r[j] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
}
}  // namespace emulated

template <typename T>
struct Mma {
  static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    emulated::mma(d, a, b0, b1, emulated::kFormat<T>);
  }
  static uint32_t pack(float lo, float hi) {
    return static_cast<uint32_t>(float_to_half(emulated::kFormat<T>, lo)) |
           (static_cast<uint32_t>(float_to_half(emulated::kFormat<T>, hi)) << 16);
  }
};
inline float fast_exp2(float x) {
  const float y = std::exp2(x);
  return y < 0x1p-126f ? 0.0f : y;
}
inline void ldsm_x4(uint32_t (&r)[4], const void* p) { emulated::ldmatrix(r, p, false); }
inline void ldsm_x4_trans(uint32_t (&r)[4], const void* p) { emulated::ldmatrix(r, p, true); }
inline void cp_async_16(void* dst, const void* src, bool valid) {
  ::strata::emulation::queue_copy(dst, src, 16, valid);
}
inline void cp_async_4(void* dst, const void* src, bool valid) { ::strata::emulation::queue_copy(dst, src, 4, valid); }
inline void cp_async_commit() { ::strata::emulation::commit_copies(); }
template <int kPending>
void cp_async_wait() {
  ::strata::emulation::land_copies(kPending);
}
inline unsigned char* dynamic_smem() {
  // 16-byte aligned within the block's buffer.
  auto& shared = ::strata::emulation::current_block()->shared;
  const uintptr_t base = reinterpret_cast<uintptr_t>(shared.data());
  return shared.data() + ((16 - base % 16) % 16);
}
template <typename Kernel, typename... Args>
cudaError_t launch(Kernel kernel, dim3 grid, int threads, size_t smem, cudaStream_t /*stream*/, Args... args) {
  if (smem > 227 * 1024) return cudaErrorInvalidValue;  // over a Hopper block's opt-in maximum
  ::strata::emulation::run_grid(grid, dim3(static_cast<unsigned>(threads)), smem, [&] { kernel(args...); });
  return cudaSuccess;
}

}  // namespace strata::kernels::cuda::flash
