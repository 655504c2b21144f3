// LossScaler: growth after the interval, immediate backoff, hysteresis (plain and consecutive),
// the minimum and maximum, static scaling, state round trips and validation.
#include "model/train/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/model/model_test_files.h"

namespace strata::model {
namespace {

LossScaler make(LossScalerOptions o) { return testing::expect_value(LossScaler::create(o)); }

// Feeds a sequence ('o' = overflow, '.' = good step) and returns the scale after each step.
std::vector<double> run(LossScaler& s, std::string_view steps) {
  std::vector<double> out;
  for (char c : steps) out.push_back(s.update(c == 'o').scale);
  return out;
}

TEST(LossScalerTest, GrowsAfterTheIntervalAndBacksOffAtOnce) {
  LossScaler s = make({.initial_scale = 8, .growth_interval = 3});
  EXPECT_EQ(run(s, "..."), (std::vector<double>{8, 8, 16}));
  LossScaleUpdate u = s.update(true);
  EXPECT_TRUE(u.skip_step);
  EXPECT_TRUE(u.backed_off);
  EXPECT_EQ(u.scale, 8);
  // An overflow restarts the run of good steps: two good, overflow, two good -> no growth.
  EXPECT_EQ(run(s, "..o.."), (std::vector<double>{8, 8, 4, 4, 4}));
  EXPECT_EQ(run(s, "."), (std::vector<double>{8}));
  EXPECT_EQ(s.state().steps, 10u);
  EXPECT_EQ(s.state().skipped_steps, 2u);
}

TEST(LossScalerTest, HysteresisAbsorbsOverflowsUntilAGrowth) {
  LossScaler s = make({.initial_scale = 64, .growth_interval = 2, .hysteresis = 3});
  LossScaleUpdate first = s.update(true);
  EXPECT_TRUE(first.skip_step);  // absorbed overflows are still skipped steps
  EXPECT_FALSE(first.backed_off);
  EXPECT_EQ(first.scale, 64);
  EXPECT_EQ(s.state().hysteresis_left, 2u);
  // second overflow absorbed, third backs off; hysteresis stays spent: the fourth backs off too.
  EXPECT_EQ(run(s, "ooo"), (std::vector<double>{64, 32, 16}));
  // A growth refills it: two good steps grow, then two overflows are absorbed again.
  EXPECT_EQ(run(s, "..ooo"), (std::vector<double>{16, 32, 32, 32, 16}));
}

TEST(LossScalerTest, ConsecutiveHysteresisRefillsAfterEveryGoodStep) {
  LossScaler s = make({.initial_scale = 64, .growth_interval = 100, .hysteresis = 2, .consecutive_hysteresis = true});
  EXPECT_EQ(run(s, "o.o.o.oo"), (std::vector<double>{64, 64, 64, 64, 64, 64, 64, 32}));
  LossScaler plain = make({.initial_scale = 64, .growth_interval = 100, .hysteresis = 2});
  EXPECT_EQ(run(plain, "o.o."), (std::vector<double>{64, 64, 32, 32}));
}

TEST(LossScalerTest, StopsAtTheMinimumAndTheMaximum) {
  LossScaler s = make({.initial_scale = 2, .growth_interval = 1, .min_scale = 1, .max_scale = 4});
  LossScaleUpdate u = s.update(true);
  EXPECT_EQ(u.scale, 1);
  EXPECT_FALSE(u.at_minimum);
  u = s.update(true);
  EXPECT_EQ(u.scale, 1);
  EXPECT_TRUE(u.at_minimum);
  EXPECT_FALSE(u.backed_off);
  EXPECT_TRUE(u.skip_step);
  EXPECT_EQ(run(s, "...."), (std::vector<double>{2, 4, 4, 4}));
}

TEST(LossScalerTest, StaticScaleSkipsButNeverChanges) {
  LossScaler s = make({.dynamic = false, .initial_scale = 128, .growth_interval = 1});
  EXPECT_EQ(run(s, "..o.."), (std::vector<double>{128, 128, 128, 128, 128}));
  EXPECT_EQ(s.state().skipped_steps, 1u);
}

TEST(LossScalerTest, StateRoundTripsAndContinuesIdentically) {
  LossScaler a = make({.initial_scale = 1024, .growth_interval = 3, .hysteresis = 2});
  run(a, "o..o.o.");
  LossScaler b = make({.initial_scale = 1024, .growth_interval = 3, .hysteresis = 2});
  ASSERT_TRUE(b.deserialize(a.serialize()).is_ok());
  EXPECT_EQ(b.state(), a.state());
  EXPECT_EQ(run(b, "..o...oo."), run(a, "..o...oo."));
  EXPECT_EQ(b.state(), a.state());
}

TEST(LossScalerTest, RejectsBadStateAndOptions) {
  LossScaler s = make({.initial_scale = 1024, .growth_interval = 3, .hysteresis = 2});
  const Status garbage = s.deserialize("{\"scale\": 1024");
  EXPECT_EQ(garbage.code(), Code::corruption);
  EXPECT_NE(garbage.message().find("not a JSON object"), std::string::npos);
  EXPECT_EQ(s.deserialize(R"({"scale": 1024, "good_steps": 0, "steps": 1, "skipped_steps": 0})").code(),
            Code::corruption);
  const Status mismatch = s.deserialize(
      R"({"scale": 1024, "good_steps": 5, "hysteresis_left": 1, "steps": 9, "skipped_steps": 1})");
  EXPECT_EQ(mismatch.code(), Code::invalid_argument);
  EXPECT_NE(mismatch.message().find("growth interval 3"), std::string::npos) << mismatch.to_string();
  EXPECT_EQ(s.restore({.scale = 0.5, .hysteresis_left = 1}).code(), Code::invalid_argument);
  EXPECT_EQ(s.state().scale, 1024);  // a rejected state changes nothing

  EXPECT_EQ(LossScaler::create({.initial_scale = 0.5, .min_scale = 1}).status().code(), Code::invalid_argument);
  EXPECT_EQ(LossScaler::create({.backoff_factor = 1.0}).status().code(), Code::invalid_argument);
  EXPECT_EQ(LossScaler::create({.growth_factor = 1.0}).status().code(), Code::invalid_argument);
  auto zero = LossScaler::create({.hysteresis = 0});
  EXPECT_EQ(zero.status().code(), Code::invalid_argument);
  EXPECT_NE(zero.status().message().find("hysteresis (0)"), std::string::npos);
  EXPECT_EQ(LossScaler::create({.initial_scale = INFINITY}).status().code(), Code::invalid_argument);
}

}  // namespace
}  // namespace strata::model
