// CPU Adam over many tensors, parallel over blocks: splits one optimizer step (any number of
// tensors, fp32 or 8-bit states) into cache-sized blocks and runs the kernels of
// kernels/cpu/adam.h / adam8bit.h on a ThreadPool (oneTBB, pinned workers). Blocks do not interact,
// so the result is bit-identical to one single-threaded pass whatever the threads or block size.
// Not the optimizer pipeline (NVMe reads/writes around the step are the caller's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/cpu/adam.h"
#include "kernels/cpu/adam8bit.h"
#include "runtime/status.h"

namespace strata {

class ThreadPool;

enum class AdamStates : uint8_t {
  f32,  // fp32 m and v (adamw)
  q8,   // 8-bit m and v codes with per-block scales (adamw8bit, kernels/cpu/adam8bit.h)
};

std::string_view adam_states_name(AdamStates s);  // "fp32", "8bit"

// One tensor of the step. param: n fp32 master weights. States: m and v (fp32) for
// AdamStates::f32; m_code, v_code (n bytes each) and m_scale, v_scale
// (kernels::adam8bit_blocks(n) floats each) for AdamStates::q8. grad: n elements of the step's
// gradient format. copy_out: n 16-bit elements, or null when the copy format is none.
// The caller owns every buffer; they must not overlap and must stay valid for the call.
struct CpuAdamTensor {
  float* param = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  int8_t* m_code = nullptr;
  uint8_t* v_code = nullptr;
  float* m_scale = nullptr;
  float* v_scale = nullptr;
  const void* grad = nullptr;
  void* copy_out = nullptr;
  size_t n = 0;
};

struct CpuAdamOptions {
  kernels::AdamHyper hyper;
  kernels::AdamFormats formats;
  AdamStates states = AdamStates::f32;
  kernels::SimdLevel simd = kernels::SimdLevel::avx512;  // clamped to what the CPU runs
  // Elements per parallel block: a multiple of kernels::kAdam8bitBlock. 64 Ki elements touch
  // ~2 MiB across Adam's streams: enough to amortize scheduling, small enough to balance threads.
  size_t block_elems = 64 * 1024;
  // Check every gradient for Inf/NaN first (a separate parallel pass over the gradients) and, if
  // one is found, change nothing and report skipped. Off when the caller already checked (e.g.
  // during backward, as the gradients arrived).
  bool skip_nonfinite = false;
};

struct CpuAdamResult {
  bool skipped = false;         // a non-finite gradient was found; nothing was written
  kernels::SimdLevel simd{};    // the level that ran
  size_t blocks = 0;            // parallel blocks the step was split into
};

// Empty if the hyper-parameters are usable; otherwise what is wrong, in words a user can act on.
Status validate_adam_hyper(const kernels::AdamHyper& hyper);

// One step over `tensors`. `pool` may be null: then the blocks run on the calling thread.
// Errors (invalid_argument): bad hyper-parameters, a block size that is not a multiple of 256,
// a missing buffer. Thread-safety: concurrent steps on disjoint tensors are fine.
StatusOr<CpuAdamResult> cpu_adam_step(ThreadPool* pool, std::span<const CpuAdamTensor> tensors,
                                      const CpuAdamOptions& options);

}  // namespace strata
