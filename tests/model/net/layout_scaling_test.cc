// build_param_layout at scale (model/net/param_layout.h): a layout of 10000 layers builds in well
// under a second (linear in the layers: each new tensor's ordinal is counted, not recounted), its
// ordinals are a tensor's each, shared by a tensor's tiles; shared_param_layout is
// build_param_layout's layout, built once per distinct config and validated on every call.
#include <time.h>

#include <memory>

#include <gtest/gtest.h>

#include "model/net/model_config.h"
#include "model/net/param_layout.h"

namespace strata::model {
namespace {

TEST(LayoutScaling, TenThousandLayersBuildInWellUnderASecondAndAreSharedOnce) {
  const ModelConfig deep = model_config_with("gpt2-tiny", {.dim = 64, .n_layer = 10000, .n_head = 4}).value();
  // This thread's CPU time (a loaded machine stretches the wall time): 40 ms here, seconds when the
  // build was quadratic in the layers.
  const auto thread_seconds = [] {
    timespec t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + double(t.tv_nsec) / 1e9;
  };
  const double start = thread_seconds();
  const ParamLayout layout = build_param_layout(deep, 4).value();
  EXPECT_LT(thread_seconds() - start, 0.5);
  ASSERT_EQ(layout.chunks.size(), 10002u);
  ASSERT_EQ(layout.params.size(), 2u + 12u * 10000u + 2u);
  for (size_t i = 0; i < layout.params.size(); ++i) ASSERT_EQ(layout.params[i].tensor, int(i)) << i;  // untiled: one each
  EXPECT_EQ(layout.total_elements(), parameter_count(deep));

  // Tiled: a tensor's tiles share its ordinal, the next tensor takes the next one.
  ModelConfig tiled = model_config_with("llama-tiny", {.vocab = 4096}).value();
  tiled.vocab_tile = 1024;
  tiled.mlp_tiles = 4;
  const std::shared_ptr<const ParamLayout> shared = shared_param_layout(tiled, 2).value();
  const ParamLayout built = build_param_layout(tiled, 2).value();
  ASSERT_EQ(shared->params.size(), built.params.size());
  int ordinals = 0;
  for (size_t i = 0; i < built.params.size(); ++i) {
    const ParamSpec& a = shared->params[i];
    const ParamSpec& b = built.params[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.chunk, b.chunk);
    EXPECT_EQ(a.offset, b.offset);
    EXPECT_EQ(a.tensor, b.tensor);
    if (b.row_begin == 0) EXPECT_EQ(b.tensor, ordinals++) << b.name;  // a new tensor
    else EXPECT_LT(b.tensor, ordinals) << b.name;                     // a later tile of one
  }
  EXPECT_EQ(shared_param_layout(tiled, 2).value(), shared);  // the same object: built once
  EXPECT_NE(shared_param_layout(tiled, 4).value(), shared);  // another element size is another layout
  ModelConfig invalid = tiled;
  invalid.norm_eps = 0;
  EXPECT_FALSE(shared_param_layout(invalid, 2).is_ok());  // validated on every call
}

}  // namespace
}  // namespace strata::model
