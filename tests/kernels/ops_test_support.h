// Test support for the CPU ops (tests/kernels/ops_*_test.cc): guarded output buffers, closeness
// checks against float64 references, central finite differences in float64, and one harness that
// checks an op (forward, backward, accumulation, guards, determinism) from an OpSpec.
// Header-only because only *_test.cc files are compiled into the test binary. Not a tensor library.
#pragma once

#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace strata::kernels::testing {

// Floats of sentinel before and after every output; the sentinel is a NaN bit pattern that no op
// produces from finite inputs, compared bit for bit.
inline constexpr size_t kGuardFloats = 16;
inline constexpr uint32_t kGuardBits = 0x7fa5a5a5u;

// n usable floats between two guard zones.
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t n, float fill = 0.0f) : n_(n), storage_(n + 2 * kGuardFloats, fill) {
    float sentinel;
    std::memcpy(&sentinel, &kGuardBits, sizeof sentinel);
    for (size_t i = 0; i < kGuardFloats; ++i) storage_[i] = storage_[kGuardFloats + n + i] = sentinel;
  }
  explicit GuardedBuffer(const std::vector<float>& values) : GuardedBuffer(values.size()) {
    std::memcpy(data(), values.data(), sizeof(float) * values.size());
  }
  float* data() { return storage_.data() + kGuardFloats; }
  const float* data() const { return storage_.data() + kGuardFloats; }
  size_t size() const { return n_; }
  std::vector<float> values() const { return std::vector<float>(data(), data() + n_); }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuardFloats; ++i) {
      uint32_t before, after;
      std::memcpy(&before, &storage_[i], sizeof before);
      std::memcpy(&after, &storage_[kGuardFloats + n_ + i], sizeof after);
      if (before != kGuardBits || after != kGuardBits) return false;
    }
    return true;
  }

 private:
  size_t n_;
  std::vector<float> storage_;
};

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<double> widen(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// |got - want| <= atol + rtol |want| for every element; the failure names the worst element.
template <typename T>
::testing::AssertionResult all_close(const T* got, const std::vector<double>& want, double atol, double rtol) {
  size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double excess = err - (atol + rtol * std::fabs(want[i]));
    if (!(excess <= 0.0)) ++bad;  // NaN counts as bad
    if (!(excess <= worst_excess)) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << want.size() << " elements differ; worst at " << worst
                                       << ": got " << got[worst] << ", want " << want[worst] << " (atol " << atol
                                       << ", rtol " << rtol << ")";
}
template <typename T>
::testing::AssertionResult all_close(const std::vector<T>& got, const std::vector<double>& want, double atol,
                                     double rtol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  return all_close(got.data(), want, atol, rtol);
}

inline bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

// Central differences (f(x + h e_i) - f(x - h e_i)) / 2h of a float64 function, for every i.
inline std::vector<double> finite_difference_gradient(const std::function<double(const std::vector<double>&)>& f,
                                                      std::vector<double> x, double h = 1e-5) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = f(x);
    x[i] = saved - h;
    const double minus = f(x);
    x[i] = saved;
    grad[i] = (plus - minus) / (2.0 * h);
  }
  return grad;
}

// Runs fn inside a oneTBB arena of `threads` threads (allowed past the core count for the call, so
// the split of the work really changes on a small machine).
template <typename F>
void run_with_threads(int threads, F&& fn) {
  tbb::global_control allow(tbb::global_control::max_allowed_parallelism, threads);
  tbb::task_arena arena(threads);
  arena.execute(fn);
}

using Doubles = std::vector<std::vector<double>>;
using FloatPtrs = std::vector<float*>;
using ConstFloatPtrs = std::vector<const float*>;

// One op at one shape. `inputs` are the differentiable float inputs (integer inputs such as token
// ids, and saved statistics, live in the lambdas); outputs are the differentiable outputs.
// backward must recompute whatever it needs from the forward (into its own guarded buffers) and
// then ACCUMULATE into grads, one per input.
struct OpSpec {
  std::string name;
  std::vector<std::vector<float>> inputs;
  std::vector<size_t> output_sizes;
  std::function<void(const ConstFloatPtrs& in, const FloatPtrs& out)> forward;
  std::function<void(const ConstFloatPtrs& in, const ConstFloatPtrs& dout, const FloatPtrs& grads)> backward;
  std::function<Doubles(const Doubles& in)> reference_forward;
  std::function<Doubles(const Doubles& in, const Doubles& dout)> reference_backward;
  double forward_atol = 1e-6, forward_rtol = 1e-5;
  double backward_atol = 1e-5, backward_rtol = 1e-4;
  double fd_atol = 1e-7, fd_rtol = 1e-6;  // float64 reference vs float64 finite differences
};

namespace detail {

inline std::vector<GuardedBuffer> guarded(const std::vector<size_t>& sizes) {
  std::vector<GuardedBuffer> out;
  for (size_t n : sizes) out.emplace_back(n);
  return out;
}
inline std::vector<GuardedBuffer> guarded(const std::vector<std::vector<float>>& values) {
  std::vector<GuardedBuffer> out;
  for (const auto& v : values) out.emplace_back(v);
  return out;
}
inline FloatPtrs ptrs(std::vector<GuardedBuffer>& bufs) {
  FloatPtrs p;
  for (auto& b : bufs) p.push_back(b.data());
  return p;
}
inline ConstFloatPtrs const_ptrs(const std::vector<std::vector<float>>& vs) {
  ConstFloatPtrs p;
  for (const auto& v : vs) p.push_back(v.data());
  return p;
}
inline std::vector<size_t> sizes_of(const std::vector<std::vector<float>>& vs) {
  std::vector<size_t> s;
  for (const auto& v : vs) s.push_back(v.size());
  return s;
}
inline std::vector<std::vector<float>> random_douts(const OpSpec& spec) {
  std::vector<std::vector<float>> d;
  for (size_t i = 0; i < spec.output_sizes.size(); ++i) d.push_back(random_floats(spec.output_sizes[i], 900 + i));
  return d;
}
inline Doubles widen_all(const std::vector<std::vector<float>>& vs) {
  Doubles d;
  for (const auto& v : vs) d.push_back(widen(v));
  return d;
}
inline void expect_guards(const std::vector<GuardedBuffer>& bufs, const char* what) {
  for (size_t i = 0; i < bufs.size(); ++i) EXPECT_TRUE(bufs[i].guards_intact()) << what << " " << i << " guard bytes";
}

}  // namespace detail

inline void expect_forward_matches_reference(const OpSpec& spec) {
  auto out = detail::guarded(spec.output_sizes);
  spec.forward(detail::const_ptrs(spec.inputs), detail::ptrs(out));
  const Doubles want = spec.reference_forward(detail::widen_all(spec.inputs));
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_TRUE(all_close(out[i].data(), want[i], spec.forward_atol, spec.forward_rtol)) << "output " << i;
  }
  detail::expect_guards(out, "output");
}

// Gradients start from random values G0 and must end at G0 + reference.
inline void expect_backward_matches_reference(const OpSpec& spec) {
  const auto dout = detail::random_douts(spec);
  std::vector<std::vector<float>> initial;
  for (size_t i = 0; i < spec.inputs.size(); ++i) initial.push_back(random_floats(spec.inputs[i].size(), 700 + i));
  auto grads = detail::guarded(initial);
  spec.backward(detail::const_ptrs(spec.inputs), detail::const_ptrs(dout), detail::ptrs(grads));
  const Doubles ref = spec.reference_backward(detail::widen_all(spec.inputs), detail::widen_all(dout));
  for (size_t i = 0; i < grads.size(); ++i) {
    std::vector<double> want(ref[i]);
    for (size_t e = 0; e < want.size(); ++e) want[e] += initial[i][e];
    EXPECT_TRUE(all_close(grads[i].data(), want, spec.backward_atol, spec.backward_rtol)) << "gradient " << i;
  }
  detail::expect_guards(grads, "gradient");
}

// The float64 analytic reference against central differences of L = sum(dout * forward(inputs)).
inline void expect_reference_backward_matches_finite_differences(const OpSpec& spec) {
  const Doubles dout = detail::widen_all(detail::random_douts(spec));
  const Doubles inputs = detail::widen_all(spec.inputs);
  const Doubles analytic = spec.reference_backward(inputs, dout);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto loss = [&](const std::vector<double>& x) {
      Doubles perturbed = inputs;
      perturbed[i] = x;
      const Doubles out = spec.reference_forward(perturbed);
      double l = 0.0;
      for (size_t o = 0; o < out.size(); ++o) {
        for (size_t e = 0; e < out[o].size(); ++e) l += dout[o][e] * out[o][e];
      }
      return l;
    };
    EXPECT_TRUE(all_close(analytic[i], finite_difference_gradient(loss, inputs[i]), spec.fd_atol, spec.fd_rtol))
        << "reference gradient " << i << " vs finite differences";
  }
}

// From zero, two backward calls give exactly twice one call (g + g is exact in floating point).
inline void expect_backward_accumulates(const OpSpec& spec) {
  const auto dout = detail::random_douts(spec);
  auto once = detail::guarded(detail::sizes_of(spec.inputs));
  auto twice = detail::guarded(detail::sizes_of(spec.inputs));
  spec.backward(detail::const_ptrs(spec.inputs), detail::const_ptrs(dout), detail::ptrs(once));
  for (int call = 0; call < 2; ++call) {
    spec.backward(detail::const_ptrs(spec.inputs), detail::const_ptrs(dout), detail::ptrs(twice));
  }
  for (size_t i = 0; i < once.size(); ++i) {
    std::vector<float> doubled = once[i].values();
    for (float& x : doubled) x *= 2.0f;
    EXPECT_TRUE(bit_identical(twice[i].values(), doubled)) << "gradient " << i << " after two backward calls";
  }
  detail::expect_guards(twice, "gradient");
}

// Forward and backward in a 1-thread and a 4-thread arena give bit-identical results.
inline void expect_deterministic_across_thread_counts(const OpSpec& spec) {
  const auto dout = detail::random_douts(spec);
  std::vector<std::vector<float>> results[2];
  const int threads[2] = {1, 4};
  for (int run = 0; run < 2; ++run) {
    run_with_threads(threads[run], [&] {
      auto out = detail::guarded(spec.output_sizes);
      auto grads = detail::guarded(detail::sizes_of(spec.inputs));
      spec.forward(detail::const_ptrs(spec.inputs), detail::ptrs(out));
      spec.backward(detail::const_ptrs(spec.inputs), detail::const_ptrs(dout), detail::ptrs(grads));
      for (const auto& b : out) results[run].push_back(b.values());
      for (const auto& b : grads) results[run].push_back(b.values());
    });
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i) {
    EXPECT_TRUE(bit_identical(results[0][i], results[1][i])) << "result " << i << " differs between 1 and 4 threads";
  }
}

// Every check above, each traced with the spec's name.
inline void expect_op_conforms(const OpSpec& spec) {
  SCOPED_TRACE(spec.name);
  expect_forward_matches_reference(spec);
  expect_backward_matches_reference(spec);
  expect_reference_backward_matches_finite_differences(spec);
  expect_backward_accumulates(spec);
  expect_deterministic_across_thread_counts(spec);
}

}  // namespace strata::kernels::testing
