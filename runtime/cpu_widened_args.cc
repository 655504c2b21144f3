// WidenedArgs and Fp32Scratch (contract in cpu_widened_args.h): the 16-bit <-> fp32 conversions
// around the CPU backend's fp32 kernels. Large tensors convert in parallel over oneTBB (the
// caller's arena, as the kernels); every element converts on its own, so the split never matters.
// Not where any op computes.
#include "runtime/cpu_widened_args.h"

#include <algorithm>

#include "runtime/parallel_ranges.h"

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
  parallel_ranges<int64_t>(n, kConvertGrain, run);
}

// Calls element(i) for the offset i of every element in columns [0, cols) of `rows` rows that
// start `stride` elements apart: one flat loop when the rows are contiguous, else rows in tasks of
// about kConvertGrain elements. For listed rows only, those rows in tasks of the same size.
template <typename Element>
void for_each_element(const WidenedArgs::Rows& rows, const Element& element) {
  const int64_t cols = rows.cols, stride = rows.stride;
  if (!rows.listed_only && (stride == cols || rows.rows <= 1)) {
    for_each_element(rows.rows * cols, element);
    return;
  }
  const auto row_at = [&](int64_t k) { return rows.listed_only ? rows.listed[k] : k; };
  const auto run = [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      for (int64_t i = row_at(k) * stride, end = i + cols; i < end; ++i) element(i);
    }
  };
  const int64_t count = rows.listed_only ? static_cast<int64_t>(rows.listed.size()) : rows.rows;
  const int64_t row_grain = std::max<int64_t>(1, kConvertGrain / std::max<int64_t>(cols, 1));
  if (count <= row_grain) {
    run(0, count);
    return;
  }
  parallel_ranges<int64_t>(count, row_grain, run);
}

// dst = the 16-bit elements at src, over the `rows` elements of both.
void widen(float* dst, const void* src, kernels::FloatFormat format, const WidenedArgs::Rows& rows) {
  const auto* h = static_cast<const uint16_t*>(src);
  if (format == kernels::FloatFormat::bf16) {
    for_each_element(rows, [&](int64_t i) { dst[i] = kernels::bf16_to_float(h[i]); });
  } else {
    for_each_element(rows, [&](int64_t i) { dst[i] = kernels::fp16_to_float(h[i]); });
  }
}

// The 16-bit elements at dst = src rounded to nearest even, over the `rows` elements.
void narrow_into(void* dst, const float* src, kernels::FloatFormat format, const WidenedArgs::Rows& rows) {
  auto* h = static_cast<uint16_t*>(dst);
  if (format == kernels::FloatFormat::bf16) {
    for_each_element(rows, [&](int64_t i) { h[i] = kernels::float_to_bf16(src[i]); });
  } else {
    for_each_element(rows, [&](int64_t i) { h[i] = kernels::float_to_fp16(src[i]); });
  }
}

// Elements a (rows, cols, stride) tensor spans: (rows - 1) * stride + cols, 0 when empty.
int64_t span_of(const WidenedArgs::Rows& r) {
  return r.rows <= 0 || r.cols <= 0 ? 0 : (r.rows - 1) * r.stride + r.cols;
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
  return in_view(p, Rows{rows, cols, stride, false, {}});
}

float* WidenedArgs::out_rows(void* p, int64_t rows, int64_t cols, int64_t stride) {
  return out_view(p, Rows{rows, cols, stride, false, {}});
}

float* WidenedArgs::inout_rows(void* p, int64_t rows, int64_t cols, int64_t stride) {
  const Rows all{rows, cols, stride, false, {}};
  float* view = out_view(p, all);
  if (view != p) widen(view, p, format_, all);
  return view;
}

const float* WidenedArgs::in_listed_rows(const void* p, int64_t rows, int64_t cols, std::span<const int64_t> listed) {
  return in_view(p, Rows{rows, cols, cols, true, listed});
}

float* WidenedArgs::out_listed_rows(void* p, int64_t rows, int64_t cols, std::span<const int64_t> listed) {
  return out_view(p, Rows{rows, cols, cols, true, listed});
}

const float* WidenedArgs::in_view(const void* p, const Rows& rows) {
  if (format_ == kernels::FloatFormat::f32 || p == nullptr) return static_cast<const float*>(p);
  float* view = next_buffer(span_of(rows));
  widen(view, p, format_, rows);
  return view;
}

float* WidenedArgs::out_view(void* p, const Rows& rows) {
  if (format_ == kernels::FloatFormat::f32 || p == nullptr) return static_cast<float*>(p);
  float* view = next_buffer(span_of(rows));
  outputs_.push_back(Output{p, view, rows, std::vector<int64_t>(rows.listed.begin(), rows.listed.end())});
  outputs_.back().rows.listed = {};  // narrow() reads the copy
  return view;
}

void WidenedArgs::narrow() {
  for (const Output& o : outputs_) {
    Rows rows = o.rows;
    rows.listed = o.listed;
    narrow_into(o.tensor, o.view, format_, rows);
  }
  outputs_.clear();
}

}  // namespace strata
