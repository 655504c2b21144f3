// The committed PyTorch golden files (tests/data/golden, see its README) as the model tests read
// them: tensors by name with their dtype checked, the batch, the loss, the normwise error the
// README advises for comparing against them, and the bounds the CPU backend meets, with their
// reasons (the CUDA tests derive theirs from these). Not used outside tests/model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/hf/safetensors.h"
#include "runtime/dtype.h"
#include "tests/model/model_test_files.h"

namespace strata::model::testing {

struct Golden {
  SafetensorsFile file;
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens, targets;

  // Tensor `name`, which must have the dtype `want` (elements of T).
  template <typename T>
  std::vector<T> read(const std::string& name, SafeDType want) const {
    const SafetensorsTensor* t = file.find(name);
    EXPECT_TRUE(t != nullptr && t->dtype == want) << name;
    std::vector<T> out(t ? t->elements() : 0);
    if (t) std::memcpy(out.data(), file.data(*t).data(), t->bytes());
    return out;
  }
  std::vector<double> f64(const std::string& name) const { return read<double>(name, SafeDType::f64); }
  std::vector<float> f32(const std::string& name) const { return read<float>(name, SafeDType::f32); }
  std::vector<int32_t> i32(const std::string& name) const { return read<int32_t>(name, SafeDType::i32); }
  double loss() const { return f64("loss").at(0); }
};

inline Golden open_golden(const std::string& preset) {
  const std::string file = preset == "gpt2-tiny" ? "gpt2_tiny" : "llama_tiny";
  Golden g{.file = expect_value(
               SafetensorsFile::open(std::string(STRATA_TEST_DATA_DIR) + "/golden/" + file + ".safetensors")),
           .B = 0, .T = 0, .tokens = {}, .targets = {}};
  const auto batch = nlohmann::json::parse(g.file.metadata().at("batch"));
  g.B = batch.at("B").get<int64_t>();
  g.T = batch.at("T").get<int64_t>();
  g.tokens = g.i32("tokens");
  g.targets = g.i32("targets");
  return g;
}

// max |got - want| / max |want| over the tensor: elements near zero carry only absolute error
// (GPT-2's key-bias gradient is exactly zero up to round-off).
inline double normwise_error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff = std::max(diff, std::fabs(double(got[i]) - double(want[i])));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  EXPECT_GT(scale, 0.0) << "an all-zero reference tensor checks nothing";
  return scale > 0.0 ? diff / scale : diff;
}

// Tolerances against the golden files on the CPU backend, normwise (normwise_error above) except
// the loss (relative).
// fp32:
// - Activations and logits: a few fp32 ops deep from exact fp32 weights; each op adds ~1e-7
//   normwise (dot products of <= 192 terms, row statistics), torch's own fp32 run lands at
//   1e-7..3e-7 ("torch_fp32_error" in the file). 2e-6 leaves a margin for the depth.
// - Loss: a mean of 64 fp32 cross-entropies from fp32 logits; relative 1e-6.
// - Gradients: the backward chains ~20 fp32 ops (two layers, head, embedding) and sums over
//   B*T = 64 rows; torch's fp32 gradients land at 1.5e-7..6e-7. 1e-5 is the brief's target and
//   still 10^5 below what a convention error (a transposed weight, a missing bias gradient, the
//   wrong RoPE pairing, a half-applied tied head) moves.
// bf16 / fp16: the weights are the golden ones rounded once (relative error <= u = 2^-8 bf16,
// 2^-11 fp16) and every stored activation and gradient is rounded again, so errors are O(u) times
// a modest depth factor, not fp32's 1e-7. Measured (gpt2-tiny / llama-tiny) relative loss error,
// normwise logits error and worst normwise gradient error, and the tolerances:
//   bf16: loss 1.8e-5 / 1.9e-6, logits 5.4e-3 / 6.3e-3 (~1.5u), gradients 1.0e-2 / 1.2e-2 (~3u)
//         -> tolerances 5e-4, 2e-2 and 4e-2
//   fp16: loss 1.4e-7 / 8.4e-7, logits 6.3e-4 / 7.0e-4 (~1.4u), gradients 1.7e-3 / 3.7e-3 (~7u)
//         -> tolerances 1e-4, 2.5e-3 and 1e-2
// (>= 3x margins over the worst measured; the mean loss averages its 64 rounding errors away,
// hence its small error; a convention error moves the logits and a gradient by O(1)).
struct GoldenBound {
  double loss = 0.0;    // relative error of the mean loss
  double logits = 0.0;  // normwise error of the logits
  double grad = 0.0;    // normwise error of each gradient tensor
};

constexpr GoldenBound golden_bound(DType working_precision) {
  switch (working_precision) {
    case DType::bf16: return GoldenBound{.loss = 5e-4, .logits = 2e-2, .grad = 4e-2};
    case DType::f16: return GoldenBound{.loss = 1e-4, .logits = 2.5e-3, .grad = 1e-2};
    default: return GoldenBound{.loss = 1e-6, .logits = 2e-6, .grad = 1e-5};  // fp32, the only other working dtype
  }
}

// fp32 activations (layer 0's internals) as the logits.
inline constexpr double kFp32ActivationTolerance = golden_bound(DType::f32).logits;

}  // namespace strata::model::testing
