// The committed PyTorch golden files (tests/data/golden, see its README) as the model tests read
// them: tensors by name with their dtype checked, the batch, the loss, and the normwise error the
// README advises for comparing against them. Not used outside tests/model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/safetensors.h"
#include "model_test_files.h"

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

}  // namespace strata::model::testing
