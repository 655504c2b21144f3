// When `strata train` prints its full progress line (model/train/train_progress.h): the user's
// --log-every everywhere; auto, every step in a pipe and a tenth of the run on a terminal; the
// last step always; evaluations too in a pipe (the line carries the held-out loss). And the ETA
// from the steps after the first.
#include "model/train/train_progress.h"

#include <thread>

#include <gtest/gtest.h>

namespace strata::model {
namespace {

TEST(TrainProgressTest, LineEvery) {
  EXPECT_EQ(progress_line_every(7, 1000, true), 7u);
  EXPECT_EQ(progress_line_every(7, 1000, false), 7u);
  EXPECT_EQ(progress_line_every(0, 1000, false), 1u);
  EXPECT_EQ(progress_line_every(0, 1000, true), 100u);
  EXPECT_EQ(progress_line_every(0, 45, true), 5u);  // rounded up: at most ten summaries
  EXPECT_EQ(progress_line_every(0, 3, true), 1u);
}

TEST(TrainProgressTest, WhichStepsPrint) {
  EXPECT_TRUE(prints_progress_line(100, 1000, 100, true, false));
  EXPECT_FALSE(prints_progress_line(50, 1000, 100, true, true));  // a terminal's live line shows val
  EXPECT_TRUE(prints_progress_line(50, 1000, 100, false, true));  // a pipe's line carries it
  EXPECT_FALSE(prints_progress_line(51, 1000, 100, false, false));
  EXPECT_TRUE(prints_progress_line(999, 999, 100, true, false));  // the last step
}

TEST(TrainProgressTest, EtaIsTheMeanStepAfterTheFirstTimesTheStepsLeft) {
  TrainProgress progress({.total_steps = 10}, nullptr);
  StepMetrics m;
  m.step = 1;
  progress.step(m);
  EXPECT_EQ(progress.eta_seconds(1), std::nullopt);  // one step: the first is no estimate
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  m.step = 2;
  progress.step(m);
  const std::optional<double> eta = progress.eta_seconds(2);
  ASSERT_TRUE(eta.has_value());
  EXPECT_GE(*eta, 8 * 0.050);  // 8 steps left at >= 50 ms
  EXPECT_LT(*eta, 8 * 1.0);
  EXPECT_EQ(progress.eta_seconds(10), 0.0);
}

}  // namespace
}  // namespace strata::model
