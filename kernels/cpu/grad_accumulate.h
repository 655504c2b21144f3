// Gradient accumulation on the host and the deterministic sum of squares behind the global
// gradient norm: the one definition of both, used by every placement (gradients resident on the
// device, or streamed to pinned host memory by offload/gradient_offloader.h), so that placement
// never changes a bit (DESIGN.md, "Exactness contract").
// Pure functions, no threads inside: callers split ranges. accumulate_widened is elementwise, so
// any split gives identical bits; sum_squares fixes its reduction order by block, so its result
// never depends on how many threads computed the blocks. Not an optimizer, not a norm clipper.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "kernels/cpu/half.h"
#include "kernels/cpu/simd_level.h"

namespace strata::kernels {

// acc[i] = float(src[i])            when `first` (a copy: -0 stays -0, NaN payloads are kept)
// acc[i] = acc[i] + float(src[i])   otherwise (one fp32 addition, round to nearest even)
// for i in [0, n). src holds n elements of `src_format` (f32, bf16 or f16, raw bits); the widening
// to fp32 is exact (half.h). Elementwise: any split of [0, n) gives identical bits, and so does
// every SIMD level (the fp16 AVX2 path uses F16C, which widens exactly as fp16_to_float).
// NaN stays NaN (which payload survives when both operands are NaN is unspecified). src and acc
// must not overlap.
void accumulate_widened(FloatFormat src_format, const void* src, float* acc, size_t n, bool first,
                        SimdLevel level);
// The same at best_simd_level().
void accumulate_widened(FloatFormat src_format, const void* src, float* acc, size_t n, bool first);

// The block of the deterministic sum of squares: 4096 floats (16 KiB, L1-sized).
inline constexpr size_t kSumSquaresBlock = 4096;

// Sum of x[i]^2 over one block (n <= kSumSquaresBlock; larger n is still computed by this
// definition, but sum_squares never passes one). Definition, exactly: 8 double lanes, lane j
// accumulates double(x[i]) * double(x[i]) for i = j, j + 8, j + 16, ... < n in increasing i
// (starting from +0.0); the result is ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
// The product of two floats is exact in double, so fused and unfused multiply-add agree.
// Inf and NaN propagate (a non-finite input gives a non-finite result).
double sum_squares_block(const float* x, size_t n);

// Calls body(begin, end) over [0, n) split into ranges of at least `grain` items, possibly in
// parallel, and returns when every call has returned. ThreadPool::parallel_for fits
// (runtime/thread_pool.h; kernels/ does not depend on runtime/, so it is passed in).
using ParallelFor =
    std::function<void(size_t n, size_t grain, const std::function<void(size_t begin, size_t end)>& body)>;

// Sum of x[i]^2 over [0, n): blocks [k*kSumSquaresBlock, (k+1)*kSumSquaresBlock) (the last one
// shorter), each by sum_squares_block, then combined sequentially in block order starting from
// +0.0: ((0 + b0) + b1) + b2 ... The blocks may be computed in parallel through `parallel_for`
// (empty: on the calling thread); the result is the same bits either way. n == 0 gives +0.0.
// Non-finite detection is the caller's: the sum is non-finite if any element is.
// No heap allocation.
double sum_squares(const float* x, size_t n, const ParallelFor& parallel_for = {});
// The same, also writing each block's sum (the b_k above, ceil(n / kSumSquaresBlock) of them) to
// `blocks_out` (null: not written): a rank homing a block-aligned shard of a chunk gives its blocks
// to the others, whose ordered sum is then the whole chunk's (offload/gradient_exchange.h).
double sum_squares(const float* x, size_t n, double* blocks_out, const ParallelFor& parallel_for = {});

}  // namespace strata::kernels
