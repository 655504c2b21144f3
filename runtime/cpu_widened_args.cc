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

// dst (n floats) = the n 16-bit elements at src.
void widen(float* dst, const void* src, kernels::FloatFormat format, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  if (format == kernels::FloatFormat::bf16) {
    for_each_element(n, [&](int64_t i) { dst[i] = kernels::bf16_to_float(h[i]); });
  } else {
    for_each_element(n, [&](int64_t i) { dst[i] = kernels::fp16_to_float(h[i]); });
  }
}

// The n 16-bit elements at dst = src (n floats), rounded to nearest even.
void narrow_into(void* dst, const float* src, kernels::FloatFormat format, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  if (format == kernels::FloatFormat::bf16) {
    for_each_element(n, [&](int64_t i) { h[i] = kernels::float_to_bf16(src[i]); });
  } else {
    for_each_element(n, [&](int64_t i) { h[i] = kernels::float_to_fp16(src[i]); });
  }
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

const float* WidenedArgs::in(const void* p, int64_t n) {
  if (format_ == kernels::FloatFormat::f32 || p == nullptr) return static_cast<const float*>(p);
  float* view = next_buffer(n);
  widen(view, p, format_, n);
  return view;
}

float* WidenedArgs::out(void* p, int64_t n) {
  if (format_ == kernels::FloatFormat::f32 || p == nullptr) return static_cast<float*>(p);
  float* view = next_buffer(n);
  outputs_.push_back({p, view, n});
  return view;
}

float* WidenedArgs::inout(void* p, int64_t n) {
  float* view = out(p, n);
  if (view != p) widen(view, p, format_, n);
  return view;
}

void WidenedArgs::narrow() {
  for (const Output& o : outputs_) narrow_into(o.tensor, o.view, format_, o.n);
  outputs_.clear();
}

int64_t table_rows_used(const int32_t* tokens, int64_t n) {
  if (n <= 0) return 0;
  return int64_t{*std::max_element(tokens, tokens + n)} + 1;
}

}  // namespace strata
