// Tests for kernels/cpu/ops_loss.h (fused softmax + cross-entropy) against a plain float64
// reference: lse, per-row losses and mean over GPT-2's vocabulary (V = 50257) with ignored
// targets, the gradient (and its float64 finite-difference check), accumulation, the in-place
// variant, every target ignored, guard bytes, determinism.
#include "kernels/cpu/ops_loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/kernels/ops_test_support.h"

namespace strata::kernels {
namespace {

using testing::GuardedBuffer;

// Reference values of one (logits, targets) problem, in float64.
struct ReferenceLoss {
  std::vector<double> lse, losses;  // (N), (N); ignored rows have loss 0
  double mean = 0.0;
  int64_t valid = 0;
};

ReferenceLoss reference_loss(const std::vector<double>& logits, const std::vector<int32_t>& targets, int64_t V) {
  const int64_t N = static_cast<int64_t>(targets.size());
  ReferenceLoss r{std::vector<double>(N), std::vector<double>(N)};
  double sum = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    double max_logit = logits[n * V];
    for (int64_t v = 0; v < V; ++v) max_logit = std::max(max_logit, logits[n * V + v]);
    double s = 0.0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(logits[n * V + v] - max_logit);
    r.lse[n] = max_logit + std::log(s);
    if (targets[n] == kIgnoreTarget) continue;
    r.losses[n] = r.lse[n] - logits[n * V + targets[n]];
    sum += r.losses[n];
    ++r.valid;
  }
  r.mean = r.valid > 0 ? sum / r.valid : 0.0;
  return r;
}

// dlogits (N, V) = dloss (softmax - onehot) for counted rows, 0 for ignored ones.
std::vector<double> reference_dlogits(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                                      int64_t V, double dloss) {
  const ReferenceLoss r = reference_loss(logits, targets, V);
  std::vector<double> d(logits.size(), 0.0);
  for (size_t n = 0; n < targets.size(); ++n) {
    if (targets[n] == kIgnoreTarget) continue;
    for (int64_t v = 0; v < V; ++v) {
      d[n * V + v] = dloss * (std::exp(logits[n * V + v] - r.lse[n]) - (v == targets[n] ? 1.0 : 0.0));
    }
  }
  return d;
}

// Targets spread over [0, V) with every third row ignored.
std::vector<int32_t> some_ignored_targets(int64_t N, int64_t V) {
  std::vector<int32_t> t(N);
  for (int64_t n = 0; n < N; ++n) t[n] = n % 3 == 1 ? kIgnoreTarget : static_cast<int32_t>((n * 7919) % V);
  return t;
}

// GPT-2's vocabulary, N = 17 rows, logits spread over [-8, 8] like a trained head's.
class OpsLossGpt2Vocab : public ::testing::Test {
 protected:
  static constexpr int64_t N = 17, V = 50257;
  const std::vector<float> logits = testing::random_floats(N * V, 71, -8.0f, 8.0f);
  const std::vector<int32_t> targets = some_ignored_targets(N, V);
  const ReferenceLoss ref = reference_loss(testing::widen(logits), targets, V);
};

TEST_F(OpsLossGpt2Vocab, ForwardMatchesReference) {
  GuardedBuffer lse(N), losses(N);
  const CrossEntropyResult result = crossentropy_forward(lse.data(), losses.data(), logits.data(), targets.data(), N, V);
  EXPECT_EQ(result.valid_count, 11);  // rows 1, 4, 7, 10, 13, 16 ignored
  // lse ~ 15: fp32 rounding of the max-shifted log-sum (double sum) is ~1e-6 absolute.
  EXPECT_TRUE(testing::all_close(lse.data(), ref.lse, 1e-5, 1e-6));
  EXPECT_TRUE(testing::all_close(losses.data(), ref.losses, 1e-5, 1e-6));
  EXPECT_NEAR(result.mean_loss, ref.mean, 1e-5);
  EXPECT_NEAR(result.loss_sum, ref.mean * ref.valid, 1e-4);
  for (int64_t n = 1; n < N; n += 3) EXPECT_EQ(losses.data()[n], 0.0f) << "ignored row " << n;
  EXPECT_TRUE(lse.guards_intact() && losses.guards_intact());
}

TEST_F(OpsLossGpt2Vocab, BackwardAddsGradientOfCountedRowsOnly) {
  GuardedBuffer lse(N);
  const CrossEntropyResult result = crossentropy_forward(lse.data(), nullptr, logits.data(), targets.data(), N, V);
  const float dloss = 1.0f / static_cast<float>(result.valid_count);
  const std::vector<float> initial = testing::random_floats(N * V, 72, -1e-3f, 1e-3f);
  GuardedBuffer dlogits(initial);
  crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), dloss, N, V);
  std::vector<double> want = reference_dlogits(testing::widen(logits), targets, V, dloss);
  for (size_t i = 0; i < want.size(); ++i) want[i] += initial[i];
  // Probabilities ~1e-5 with fp32 exp error ~1e-7 relative; the target entry is O(dloss).
  EXPECT_TRUE(testing::all_close(dlogits.data(), want, 1e-9, 1e-5));
  for (int64_t n = 1; n < N; n += 3) {  // ignored rows exactly untouched
    EXPECT_EQ(std::memcmp(dlogits.data() + n * V, initial.data() + n * V, sizeof(float) * V), 0) << "row " << n;
  }
  EXPECT_TRUE(dlogits.guards_intact());
}

TEST_F(OpsLossGpt2Vocab, InPlaceEqualsAccumulateFromZero) {
  GuardedBuffer lse(N);
  crossentropy_forward(lse.data(), nullptr, logits.data(), targets.data(), N, V);
  GuardedBuffer from_zero(N * V), in_place(logits);
  crossentropy_backward(from_zero.data(), logits.data(), lse.data(), targets.data(), 0.125f, N, V);
  crossentropy_backward_inplace(in_place.data(), lse.data(), targets.data(), 0.125f, N, V);
  EXPECT_TRUE(testing::bit_identical(in_place.values(), from_zero.values()));
  EXPECT_TRUE(in_place.guards_intact() && from_zero.guards_intact());
}

TEST_F(OpsLossGpt2Vocab, DeterministicAcrossThreadCounts) {
  std::vector<float> results[2];
  double sums[2] = {0.0, 0.0};
  const int threads[2] = {1, 4};
  for (int run = 0; run < 2; ++run) {
    testing::run_with_threads(threads[run], [&] {
      std::vector<float> lse(N), dlogits(N * V, 0.0f);
      sums[run] = crossentropy_forward(lse.data(), nullptr, logits.data(), targets.data(), N, V).loss_sum;
      crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), 0.1f, N, V);
      results[run] = lse;
      results[run].insert(results[run].end(), dlogits.begin(), dlogits.end());
    });
  }
  EXPECT_EQ(sums[0], sums[1]);
  EXPECT_TRUE(testing::bit_identical(results[0], results[1]));
}

// The reference gradient of the mean loss against central differences, on a tiny problem.
TEST(OpsLoss, ReferenceGradientMatchesFiniteDifferences) {
  const int64_t N = 4, V = 7;
  const auto logits = testing::widen(testing::random_floats(N * V, 73, -3.0f, 3.0f));
  const std::vector<int32_t> targets = {2, kIgnoreTarget, 6, 0};
  const auto mean_loss = [&](const std::vector<double>& x) { return reference_loss(x, targets, V).mean; };
  EXPECT_TRUE(testing::all_close(reference_dlogits(logits, targets, V, 1.0 / 3.0),
                                 testing::finite_difference_gradient(mean_loss, logits), 1e-8, 1e-6));
}

TEST(OpsLoss, BackwardTwiceDoublesTheGradient) {
  const int64_t N = 5, V = 11;
  const auto logits = testing::random_floats(N * V, 74, -3.0f, 3.0f);
  const std::vector<int32_t> targets = {0, 10, kIgnoreTarget, 5, 5};
  std::vector<float> lse(N);
  crossentropy_forward(lse.data(), nullptr, logits.data(), targets.data(), N, V);
  GuardedBuffer once(N * V), twice(N * V);
  crossentropy_backward(once.data(), logits.data(), lse.data(), targets.data(), 0.25f, N, V);
  for (int call = 0; call < 2; ++call) {
    crossentropy_backward(twice.data(), logits.data(), lse.data(), targets.data(), 0.25f, N, V);
  }
  std::vector<float> doubled = once.values();
  for (float& x : doubled) x *= 2.0f;
  EXPECT_TRUE(testing::bit_identical(twice.values(), doubled));
  EXPECT_TRUE(twice.guards_intact());
}

TEST(OpsLoss, EveryTargetIgnoredGivesZeroCountAndNoGradient) {
  const int64_t N = 3, V = 4;
  const auto logits = testing::random_floats(N * V, 75);
  const std::vector<int32_t> targets(N, kIgnoreTarget);
  GuardedBuffer lse(N), losses(N, 9.0f), dlogits(N * V, 0.5f), in_place(logits);
  const CrossEntropyResult r = crossentropy_forward(lse.data(), losses.data(), logits.data(), targets.data(), N, V);
  EXPECT_EQ(r.valid_count, 0);
  EXPECT_EQ(r.loss_sum, 0.0);
  EXPECT_EQ(r.mean_loss, 0.0f);
  EXPECT_TRUE(testing::bit_identical(losses.values(), std::vector<float>(N, 0.0f)));
  crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), 1.0f, N, V);
  EXPECT_TRUE(testing::bit_identical(dlogits.values(), std::vector<float>(N * V, 0.5f)));
  crossentropy_backward_inplace(in_place.data(), lse.data(), targets.data(), 1.0f, N, V);
  EXPECT_TRUE(testing::bit_identical(in_place.values(), std::vector<float>(N * V, 0.0f)));
}

// V = 1: the only class has probability 1, so loss and gradient are exactly 0.
TEST(OpsLoss, SingleClassHasZeroLossAndGradient) {
  const std::vector<float> logits = {3.5f, -2.0f};
  const std::vector<int32_t> targets = {0, 0};
  GuardedBuffer lse(2), dlogits(2);
  const CrossEntropyResult r = crossentropy_forward(lse.data(), nullptr, logits.data(), targets.data(), 2, 1);
  EXPECT_EQ(r.valid_count, 2);
  EXPECT_EQ(r.mean_loss, 0.0f);
  crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), 0.5f, 2, 1);
  EXPECT_TRUE(testing::bit_identical(dlogits.values(), {0.0f, 0.0f}));
}

// Large logits (1e4 apart) do not overflow: the max is subtracted before exp.
TEST(OpsLoss, LargeLogitsStayFinite) {
  const std::vector<float> logits = {1e4f, 0.0f, -1e4f};
  const std::vector<int32_t> targets = {1};
  std::vector<float> lse(1), dlogits(3, 0.0f);
  const CrossEntropyResult r = crossentropy_forward(lse.data(), nullptr, logits.data(), targets.data(), 1, 3);
  EXPECT_FLOAT_EQ(r.mean_loss, 1e4f);
  crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), 1.0f, 1, 3);
  EXPECT_TRUE(testing::all_close(dlogits, {1.0, -1.0, 0.0}, 1e-6, 0.0));
}

}  // namespace
}  // namespace strata::kernels
