// WidenedArgs: how the CPU backend runs its fp32 kernels (kernels/cpu/ops_*.h) on bf16 and fp16
// tensors. Inside one queued op it hands the kernel fp32 views: inputs widened into scratch,
// outputs in scratch (outputs the kernel reads first -- accumulated gradients, in-place tensors --
// widened from their 16-bit values), then narrow() rounds every output back to its tensor once,
// to nearest even (kernels/cpu/half.h, bit-identical to the CUDA stores). For fp32 every view is
// the tensor itself: no copy, results bit-identical to calling the kernel directly.
// Not a tensor type, and not thread-safe: one op at a time, on the compute stream's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/half.h"

namespace strata {

// Reusable fp32 buffers for WidenedArgs, numbered by slot (the k-th view an op asks for uses
// slot k). Each buffer grows to the largest view its slot has held and is kept, so an op costs
// only its conversions once the shapes have been seen; the memory (at most the fp32 size of the
// largest op's operands, e.g. about 2 N Vp floats for crossentropy_backward over padded logits)
// is freed with the owner.
// Thread-safety: none; the CpuComputeOps that owns it uses it only on its compute stream.
class Fp32Scratch {
 public:
  // Slot `slot`'s buffer with room for at least n floats (and at least one); contents unspecified.
  float* buffer(size_t slot, int64_t n);
  // Bytes held over all slots.
  uint64_t bytes() const;

 private:
  struct Buffer {
    std::unique_ptr<float[]> data;
    int64_t capacity = 0;
  };
  std::vector<Buffer> buffers_;
};

// The fp32 views of one op's float tensors of `format`. Every view is valid until narrow() (or,
// for fp32, for as long as the tensor). A null tensor (a gradient that is not computed, a missing
// bias) gives a null view. Views never alias one another for 16-bit formats, so an output that
// aliases an input (gelu and rope in place, residual_forward out == a) is safe: inputs are
// widened before the kernel runs, outputs narrowed after.
class WidenedArgs {
 public:
  WidenedArgs(kernels::FloatFormat format, Fp32Scratch& scratch) : format_(format), scratch_(scratch) {}
  WidenedArgs(const WidenedArgs&) = delete;
  WidenedArgs& operator=(const WidenedArgs&) = delete;

  // n elements at p, read by the kernel.
  const float* in(const void* p, int64_t n);
  // n elements at p that the kernel overwrites without reading.
  float* out(void* p, int64_t n);
  // n elements at p that the kernel reads and updates (+= gradients, in-place ops).
  float* inout(void* p, int64_t n);

  // The same three for a (rows, cols) tensor whose rows start `stride` >= cols elements apart (a
  // padded leading dimension). The view has the tensor's layout (same stride, so the kernel is
  // given the same stride for every format); only columns [0, cols) are widened and narrowed, so
  // the padding columns of the tensor are never written and those of the view are never defined.
  const float* in_rows(const void* p, int64_t rows, int64_t cols, int64_t stride);
  float* out_rows(void* p, int64_t rows, int64_t cols, int64_t stride);
  float* inout_rows(void* p, int64_t rows, int64_t cols, int64_t stride);
  // in and out for the `listed` rows only of a contiguous (rows, cols) tensor (row indices in
  // [0, rows), each at most once; an output keeps its own copy of the list): the view has the
  // tensor's layout, but only the listed rows are widened or narrowed, so the tensor's other rows
  // keep their bytes and the view's are undefined. What an embedding op over a table tile uses to
  // touch only the rows whose token the tile holds.
  const float* in_listed_rows(const void* p, int64_t rows, int64_t cols, std::span<const int64_t> listed);
  float* out_listed_rows(void* p, int64_t rows, int64_t cols, std::span<const int64_t> listed);
  // Rounds every out/inout view back into its tensor (nothing for fp32). Call once, after the kernel.
  void narrow();

  // The elements a view converts: columns [0, cols) of rows `stride` elements apart, of every row
  // in [0, rows) or of the listed rows only.
  struct Rows {
    int64_t rows, cols, stride;
    bool listed_only;
    std::span<const int64_t> listed;
  };

 private:
  struct Output {  // a tensor and its view; the listed rows (if rows.listed_only) in `listed`
    void* tensor;
    const float* view;
    Rows rows;
    std::vector<int64_t> listed;
  };
  const float* in_view(const void* p, const Rows& rows);
  float* out_view(void* p, const Rows& rows);
  float* next_buffer(int64_t n) { return scratch_.buffer(next_slot_++, n); }

  const kernels::FloatFormat format_;
  Fp32Scratch& scratch_;
  size_t next_slot_ = 0;
  std::vector<Output> outputs_;
};

}  // namespace strata
