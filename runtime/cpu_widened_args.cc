// WidenedArgs and Fp32Scratch (contract in cpu_widened_args.h): the 16-bit <-> fp32 conversions
// around the CPU backend's fp32 kernels. Large tensors convert in parallel over oneTBB (the
// caller's arena, as the kernels); every element converts on its own, so the split never matters.
// Not where any op computes.
#include "runtime/cpu_widened_args.h"

#include <algorithm>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace strata {
namespace {

// Elements per task: 64 KiB of fp32 per task is far above the task overhead, and a (N, C)
// activation of a small model is still split over the cores.
constexpr int64_t kConvertGrain = 16384;

// Calls element(i) for every i in [0, n), over oneTBB tasks when n is large.
template <typename Element>
void for_each_element(int64_t n, const Element& element) {
  const auto run = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) element(i);
  };
  if (n <= kConvertGrain) {
    run(0, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, kConvertGrain),
                    [&](const tbb::blocked_range<int64_t>& r) { run(r.begin(), r.end()); });
}

// Calls element(i) for the offset i of every element in columns [0, cols) of `rows` rows that
// start `stride` elements apart: one flat loop when the rows are contiguous, else rows in tasks of
// about kConvertGrain elements.
template <typename Element>
void for_each_element(int64_t rows, int64_t cols, int64_t stride, const Element& element) {
  if (stride == cols || rows <= 1) {
    for_each_element(rows * cols, element);
    return;
  }
  const auto run = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t i = r * stride, end = i + cols; i < end; ++i) element(i);
    }
  };
  const int64_t row_grain = std::max<int64_t>(1, kConvertGrain / std::max<int64_t>(cols, 1));
  if (rows <= row_grain) {
    run(0, rows);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, row_grain),
                    [&](const tbb::blocked_range<int64_t>& r) { run(r.begin(), r.end()); });
}

// dst = the 16-bit elements at src, over the (rows, cols, stride) elements of both.
void widen(float* dst, const void* src, kernels::FloatFormat format, int64_t rows, int64_t cols, int64_t stride) {
  const auto* h = static_cast<const uint16_t*>(src);
  if (format == kernels::FloatFormat::bf16) {
    for_each_element(rows, cols, stride, [&](int64_t i) { dst[i] = kernels::bf16_to_float(h[i]); });
  } else {
    for_each_element(rows, cols, stride, [&](int64_t i) { dst[i] = kernels::fp16_to_float(h[i]); });
  }
}

// The 16-bit elements at dst = src rounded to nearest even, over the (rows, cols, stride) elements.
void narrow_into(void* dst, const float* src, kernels::FloatFormat format, int64_t rows, int64_t cols,
                 int64_t stride) {
  auto* h = static_cast<uint16_t*>(dst);
  if (format == kernels::FloatFormat::bf16) {
    for_each_element(rows, cols, stride, [&](int64_t i) { h[i] = kernels::float_to_bf16(src[i]); });
  } else {
    for_each_element(rows, cols, stride, [&](int64_t i) { h[i] = kernels::float_to_fp16(src[i]); });
  }
}

// Elements a (rows, cols, stride) tensor spans: (rows - 1) * stride + cols, 0 when empty.
int64_t span_of(int64_t rows, int64_t cols, int64_t stride) {
  return rows <= 0 || cols <= 0 ? 0 : (rows - 1) * stride + cols;
}

}  // namespace

float* Fp32Scratch::buffer(size_t slot, int64_t n) {
  if (slot >= buffers_.size()) buffers_.resize(slot + 1);
  Buffer& b = buffers_[slot];
  const int64_t want = std::max<int64_t>(n, 1);
  if (b.capacity < want) {
    b.data.reset();  // free the old buffer before the larger one is allocated
    b.data = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(want));
    b.capacity = want;
  }
  return b.data.get();
}

uint64_t Fp32Scratch::bytes() const {
  uint64_t total = 0;
  for (const Buffer& b : buffers_) total += static_cast<uint64_t>(b.capacity) * sizeof(float);
  return total;
}

const float* WidenedArgs::in(const void* p, int64_t n) { return in_rows(p, 1, n, n); }
float* WidenedArgs::out(void* p, int64_t n) { return out_rows(p, 1, n, n); }
float* WidenedArgs::inout(void* p, int64_t n) { return inout_rows(p, 1, n, n); }

const float* WidenedArgs::in_rows(const void* p, int64_t rows, int64_t cols, int64_t stride) {
  if (format_ == kernels::FloatFormat::f32 || p == nullptr) return static_cast<const float*>(p);
  float* view = next_buffer(span_of(rows, cols, stride));
  widen(view, p, format_, rows, cols, stride);
  return view;
}

float* WidenedArgs::out_rows(void* p, int64_t rows, int64_t cols, int64_t stride) {
  if (format_ == kernels::FloatFormat::f32 || p == nullptr) return static_cast<float*>(p);
  float* view = next_buffer(span_of(rows, cols, stride));
  outputs_.push_back({p, view, rows, cols, stride});
  return view;
}

float* WidenedArgs::inout_rows(void* p, int64_t rows, int64_t cols, int64_t stride) {
  float* view = out_rows(p, rows, cols, stride);
  if (view != p) widen(view, p, format_, rows, cols, stride);
  return view;
}

void WidenedArgs::narrow() {
  for (const Output& o : outputs_) narrow_into(o.tensor, o.view, format_, o.rows, o.cols, o.stride);
  outputs_.clear();
}

int64_t table_rows_used(const int32_t* tokens, int64_t n) {
  if (n <= 0) return 0;
  return int64_t{*std::max_element(tokens, tokens + n)} + 1;
}

}  // namespace strata
