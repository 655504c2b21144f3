// LrSchedule: exact values of linear and log warmup, cosine, linear and constant schedules, and
// validation.
#include "model/train/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/model/model_test_files.h"

namespace strata::model {
namespace {

LrSchedule make(LrScheduleOptions o) { return testing::expect_value(LrSchedule::create(o)); }

TEST(LrScheduleTest, WarmupFromZeroThenCosine) {
  LrSchedule s = make({.peak_lr = 1.0, .warmup_steps = 4, .decay = LrDecay::cosine, .total_steps = 12,
                       .final_fraction = 0.1});
  EXPECT_DOUBLE_EQ(s.lr(0), 0.25);
  EXPECT_DOUBLE_EQ(s.lr(1), 0.5);
  EXPECT_DOUBLE_EQ(s.lr(3), 1.0);
  EXPECT_DOUBLE_EQ(s.lr(4), 1.0);    // decay progress 0
  EXPECT_DOUBLE_EQ(s.lr(6), 0.1 + 0.9 * 0.5 * (1.0 + std::cos(M_PI * 0.25)));
  EXPECT_DOUBLE_EQ(s.lr(8), 0.55);   // half way: the mean of peak and final
  EXPECT_NEAR(s.lr(11), 0.1 + 0.9 * 0.5 * (1.0 + std::cos(M_PI * 7.0 / 8.0)), 1e-15);
  EXPECT_DOUBLE_EQ(s.lr(12), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(1000000), 0.1);
}

TEST(LrScheduleTest, WarmupFromAFractionThenLinear) {
  LrSchedule s = make({.peak_lr = 2e-3, .warmup_steps = 4, .warmup_start_fraction = 0.2, .decay = LrDecay::linear,
                       .total_steps = 8, .final_fraction = 0.0});
  EXPECT_DOUBLE_EQ(s.lr(0), 2e-3 * (0.2 + 0.8 * 0.25));
  EXPECT_DOUBLE_EQ(s.lr(3), 2e-3);
  EXPECT_DOUBLE_EQ(s.lr(5), 2e-3 * 0.75);
  EXPECT_DOUBLE_EQ(s.lr(7), 2e-3 * 0.25);
  EXPECT_DOUBLE_EQ(s.lr(8), 0.0);
}

TEST(LrScheduleTest, ConstantAndNoWarmup) {
  LrSchedule s = make({.peak_lr = 3e-4, .warmup_steps = 2, .decay = LrDecay::constant});
  EXPECT_DOUBLE_EQ(s.lr(0), 1.5e-4);
  EXPECT_DOUBLE_EQ(s.lr(2), 3e-4);
  EXPECT_DOUBLE_EQ(s.lr(1u << 30), 3e-4);
  LrSchedule cosine = make({.peak_lr = 1.0, .warmup_steps = 0, .decay = LrDecay::cosine, .total_steps = 2});
  EXPECT_DOUBLE_EQ(cosine.lr(0), 1.0);
  EXPECT_DOUBLE_EQ(cosine.lr(1), 0.5);
  EXPECT_DOUBLE_EQ(cosine.lr(2), 0.0);
}

// DeepSpeed's "log" warmup shape, shifted like the linear one: ln(step + 2) / ln(W + 1).
TEST(LrScheduleTest, LogWarmupRisesFastThenFlattensAndEndsAtThePeak) {
  LrSchedule s = make({.peak_lr = 1.0, .warmup_steps = 7, .warmup = LrWarmup::log, .decay = LrDecay::constant});
  EXPECT_DOUBLE_EQ(s.lr(0), std::log(2.0) / std::log(8.0));  // 1/3: not wasted at 0
  EXPECT_DOUBLE_EQ(s.lr(2), std::log(4.0) / std::log(8.0));  // 2/3
  EXPECT_DOUBLE_EQ(s.lr(6), 1.0);                            // step W-1 runs at the peak
  EXPECT_DOUBLE_EQ(s.lr(7), 1.0);
  EXPECT_GT(s.lr(1) - s.lr(0), s.lr(6) - s.lr(5));          // concave: early steps rise most
  // From a start fraction (DeepSpeed's warmup_min_ratio), then cosine to the final fraction.
  LrSchedule c = make({.peak_lr = 2.0, .warmup_steps = 3, .warmup_start_fraction = 0.5, .warmup = LrWarmup::log,
                       .decay = LrDecay::cosine, .total_steps = 5, .final_fraction = 0.25});
  EXPECT_DOUBLE_EQ(c.lr(0), 2.0 * (0.5 + 0.5 * std::log(2.0) / std::log(4.0)));  // 1.5
  EXPECT_DOUBLE_EQ(c.lr(2), 2.0);
  EXPECT_DOUBLE_EQ(c.lr(4), 0.5 + 1.5 * 0.5 * (1.0 + std::cos(M_PI * 0.5)));
  EXPECT_DOUBLE_EQ(c.lr(5), 0.5);
  // One warmup step is the peak at once, as with linear warmup.
  EXPECT_DOUBLE_EQ(make({.peak_lr = 1.0, .warmup_steps = 1, .warmup = LrWarmup::log, .decay = LrDecay::constant})
                       .lr(0), 1.0);
}

TEST(LrScheduleTest, WarmupNamesParse) {
  EXPECT_EQ(*parse_lr_warmup("log"), LrWarmup::log);
  EXPECT_EQ(*parse_lr_warmup("linear"), LrWarmup::linear);
  EXPECT_EQ(lr_warmup_name(LrWarmup::log), "log");
  auto unknown = parse_lr_warmup("exp");
  EXPECT_EQ(unknown.status().code(), Code::invalid_argument);
  EXPECT_NE(unknown.status().message().find("'exp'; use linear or log"), std::string::npos);
}

TEST(LrScheduleTest, RejectsBadOptions) {
  auto no_room = LrSchedule::create({.peak_lr = 1.0, .warmup_steps = 10, .decay = LrDecay::cosine, .total_steps = 10});
  EXPECT_EQ(no_room.status().code(), Code::invalid_argument);
  EXPECT_NE(no_room.status().message().find("cosine decay needs more total steps (10) than warmup steps (10)"),
            std::string::npos) << no_room.status().to_string();
  EXPECT_EQ(LrSchedule::create({.peak_lr = 0.0}).status().code(), Code::invalid_argument);
  EXPECT_EQ(LrSchedule::create({.peak_lr = NAN}).status().code(), Code::invalid_argument);
  EXPECT_EQ(LrSchedule::create({.peak_lr = 1.0, .warmup_start_fraction = 1.5, .decay = LrDecay::constant})
                .status().code(), Code::invalid_argument);
  auto final_bad = LrSchedule::create({.peak_lr = 1.0, .decay = LrDecay::linear, .total_steps = 5,
                                       .final_fraction = -0.1});
  EXPECT_NE(final_bad.status().message().find("final learning-rate fraction"), std::string::npos);
  EXPECT_EQ(*parse_lr_decay("linear"), LrDecay::linear);
  auto unknown = parse_lr_decay("step");
  EXPECT_EQ(unknown.status().code(), Code::invalid_argument);
  EXPECT_NE(unknown.status().message().find("cosine"), std::string::npos);
}

}  // namespace
}  // namespace strata::model
