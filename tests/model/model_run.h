// ModelRun: a tiny Transformer with the golden weights and batch on the device of a CPU or CUDA
// backend, and the comparisons the golden tests make (loss, logits and every gradient against the
// golden file or against another run). The CPU golden tests and the gpu-labelled ones both build
// on it, so the two backends are checked by the same code. Also the test parameters they share and
// the fixture that skips a test where no CUDA device is visible. Not used outside tests/model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_required.h"

#include "kernels/cpu/half.h"
#include "model/net/transformer.h"
#include "runtime/backend.h"
#include "tests/model/golden_file.h"
#include "tests/model/model_test_files.h"

namespace strata::model::testing {

// The backend of the model tests: CPU with a 64 MiB budget of host memory, or CUDA device 0 with
// a 256 MiB arena (the tiny models need a few MiB; the rest is headroom, not a requirement).
// `tf32` lets CUDA fp32 GEMMs use TF32 tensor cores; the CPU ignores it.
inline BackendOptions test_backend(BackendKind kind, bool tf32 = false) {
  return BackendOptions{.kind = kind,
                        .device_index = 0,
                        .memory_budget = kind == BackendKind::cuda ? 256ull << 20 : 64ull << 20,
                        .tf32 = tf32};
}

// A parameterized test that needs a CUDA device: skipped, with the reason, where none is visible
// (the body does not run when SetUp skips).
template <typename Param>
class CudaParamTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) STRATA_GPU_SKIP(why);
  }
};

// A parameterized case: a preset in a working precision; printed "gpt2-tiny bf16", named
// "Gpt2_bf16" by precision_case_name.
struct PrecisionCase {
  std::string preset;
  DType dtype = DType::f32;
};
inline void PrintTo(const PrecisionCase& c, std::ostream* os) { *os << c.preset << " " << dtype_name(c.dtype); }

// gpt2-tiny and llama-tiny in each of `dtypes`.
inline std::vector<PrecisionCase> tiny_models_in(std::initializer_list<DType> dtypes) {
  std::vector<PrecisionCase> cases;
  for (DType dt : dtypes) {
    for (const char* preset : {"gpt2-tiny", "llama-tiny"}) cases.push_back(PrecisionCase{preset, dt});
  }
  return cases;
}

inline std::string precision_case_name(const ::testing::TestParamInfo<PrecisionCase>& info) {
  return std::string(info.param.preset == "gpt2-tiny" ? "Gpt2" : "Llama") + "_" +
         std::string(dtype_name(info.param.dtype));
}

using GradientMap = std::map<std::string, std::vector<float>>;  // HF parameter name -> fp32 values

// A model with the golden weights and the golden batch on the device. Lifetime: the backend
// outlives the model (members are destroyed in reverse order).
struct ModelRun {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Transformer> model;
  int32_t* inputs = nullptr;   // device (B, T)
  int32_t* targets = nullptr;  // device (B, T)

  Status forward(const Golden& g) { return model->forward(inputs, targets, g.B, g.T); }
  // zero_grad, forward, backward.
  void fresh_gradients(const Golden& g) {
    ASSERT_TRUE(model->zero_grad().is_ok());
    ASSERT_TRUE(forward(g).is_ok());
    ASSERT_TRUE(model->backward().is_ok());
  }
  // The mean loss of the last forward.
  double mean_loss() {
    const auto loss = expect_value(model->read_loss());
    return double(loss.mean_loss);
  }
  // n working-precision elements at device address p, widened to fp32.
  std::vector<float> device_to_host(const std::byte* p, size_t n) {
    const DType dt = model->dtype();
    std::vector<float> out(n);
    std::vector<uint16_t> halves(dt == DType::f32 ? 0 : n);
    void* dst = dt == DType::f32 ? static_cast<void*>(out.data()) : halves.data();
    EXPECT_TRUE(backend->synchronize(Stream::compute).is_ok());
    EXPECT_TRUE(backend->copy_to_host(dst, p, n * dtype_size(dt), Stream::d2h).is_ok());
    EXPECT_TRUE(backend->synchronize(Stream::d2h).is_ok());
    const auto format = dt == DType::bf16 ? kernels::FloatFormat::bf16 : kernels::FloatFormat::f16;
    for (size_t i = 0; i < halves.size(); ++i) out[i] = kernels::half_to_float(format, halves[i]);
    return out;
  }
  // The logits (B*T, V) of the last forward (backward overwrites them), read row by row from the
  // device buffer's padded rows (Transformer::logits_stride()) and packed.
  std::vector<float> logits(const Golden& g) {
    const auto rows = size_t(g.B * g.T), V = size_t(model->config().vocab), Vp = size_t(model->logits_stride());
    const std::vector<float> padded = device_to_host(model->activations().logits, (rows - 1) * Vp + V);
    std::vector<float> packed(rows * V);
    for (size_t n = 0; n < rows; ++n) {
      std::copy_n(padded.begin() + std::ptrdiff_t(n * Vp), V, packed.begin() + std::ptrdiff_t(n * V));
    }
    return packed;
  }
  GradientMap gradients() {
    GradientMap all;
    for (const auto& p : model->layout().params) {
      all[p.name] = expect_value(model->copy_parameter_to_host(p.name, ParamState::gradients));
    }
    return all;
  }
};

// `preset` ("gpt2-tiny", "llama-tiny") in `dtype` on the backend `options` asks for, with the
// golden file's weights, and its batch copied to the device.
inline ModelRun make_model_run(const std::string& preset, const Golden& g, bool checkpoint, DType dtype = DType::f32,
                               const BackendOptions& options = test_backend(BackendKind::cpu)) {
  ModelRun r;
  r.backend = expect_value(make_backend(options));
  const ModelConfig config = expect_value(model_preset(preset));
  r.model = expect_value(Transformer::create(
      *r.backend, config,
      TransformerOptions{.batch = g.B, .seq_len = g.T, .checkpoint_layers = checkpoint, .dtype = dtype}));
  EXPECT_TRUE(r.model->load_hf_safetensors(g.file).is_ok());
  const uint64_t bytes = uint64_t(g.B * g.T) * sizeof(int32_t);
  r.inputs = static_cast<int32_t*>(expect_value(r.backend->allocate(bytes, "test inputs")));
  r.targets = static_cast<int32_t*>(expect_value(r.backend->allocate(bytes, "test targets")));
  EXPECT_TRUE(r.backend->copy_to_device(r.inputs, g.tokens.data(), bytes, Stream::h2d).is_ok());
  EXPECT_TRUE(r.backend->copy_to_device(r.targets, g.targets.data(), bytes, Stream::h2d).is_ok());
  EXPECT_TRUE(r.backend->synchronize(Stream::h2d).is_ok());
  return r;
}

inline double relative_error(double got, double want) { return std::fabs(got - want) / std::fabs(want); }

// The golden file's gradients by parameter name ("grad." removed).
inline GradientMap golden_gradients(const Golden& g) {
  GradientMap all;
  for (const auto& t : g.file.tensors()) {
    if (t.name.starts_with("grad.")) all[t.name.substr(5)] = g.f32(t.name);
  }
  return all;
}

struct WorstError {
  double error = 0.0;
  std::string name;  // the tensor it was found in
};

// Every tensor of `got` against the same-named one of `want`, normwise (golden_file.h) within
// `tolerance`; both must hold the same names. Returns the worst error.
inline WorstError compare_gradients(const GradientMap& got, const GradientMap& want, double tolerance) {
  WorstError worst;
  std::set<std::string> got_names, want_names;
  for (const auto& [name, values] : want) want_names.insert(name);
  for (const auto& [name, values] : got) {
    got_names.insert(name);
    const auto it = want.find(name);
    if (it == want.end()) continue;
    const double err = normwise_error(values, it->second);
    EXPECT_LE(err, tolerance) << name;
    if (err > worst.error) worst = WorstError{err, name};
  }
  EXPECT_EQ(got_names, want_names) << "the model's parameters and the reference gradients must be the same set";
  return worst;
}

// What one zero_grad, forward, backward of a ModelRun gives against the golden file.
struct GoldenErrors {
  double loss = 0.0;    // relative
  double logits = 0.0;  // normwise
  WorstError grad;      // normwise, the worst tensor
};

// zero_grad, forward, backward of `r` on the golden batch; the loss, the logits (read before the
// backward overwrites them) and every gradient checked against the golden file within `bound`.
inline GoldenErrors check_against_golden(ModelRun& r, const Golden& g, const GoldenBound& bound) {
  GoldenErrors e;
  EXPECT_TRUE(r.model->zero_grad().is_ok());
  EXPECT_TRUE(r.forward(g).is_ok());
  e.loss = relative_error(r.mean_loss(), g.loss());
  e.logits = normwise_error(r.logits(g), g.f32("logits"));
  EXPECT_TRUE(r.model->backward().is_ok());
  e.grad = compare_gradients(r.gradients(), golden_gradients(g), bound.grad);
  EXPECT_LE(e.loss, bound.loss);
  EXPECT_LE(e.logits, bound.logits);
  return e;
}

}  // namespace strata::model::testing
