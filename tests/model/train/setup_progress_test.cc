// SetupProgress (model/train/setup_progress.h): the setup's live line names the phase and each
// counter that has begun (done, of total, rate), and the summary lists the phases of 0.1 s or more
// in order, the rest as "other", then the detail. No timing is asserted: the phases of the
// object's own test are instants, so its summary has only "other".
#include "model/train/setup_progress.h"

#include <atomic>

#include <gtest/gtest.h>

namespace strata::model {
namespace {

TEST(SetupProgress, StatusNamesThePhaseAndEachCounterBegun) {
  const SetupCounter pinned{.name = "pinned", .done = {}, .total = 14ull << 30};
  const SetupCounter weights{.name = "weights", .done = {}, .total = 1'240'000'000, .bytes = false};
  const SetupCounter idle{.name = "idle", .done = {}, .total = 5};
  EXPECT_EQ(format_setup_status("optimizer state and weights", 12.34,
                                {{&pinned, 7ull << 30, 1.2e9}, {&weights, 400'000'000, 2.5e7}, {&idle, 0, 0}}),
            "setup 12.3 s: optimizer state and weights | pinned 7 GiB of 14 GiB, 1.20 GB/s | weights 400M of 1.24B "
            "parameters, 25M/s");
  EXPECT_EQ(format_setup_status("checks", 0.04, {}), "setup 0.0 s: checks");
}

TEST(SetupProgress, SummaryListsPhasesInOrderTheShortOnesAsOther) {
  EXPECT_EQ(format_setup_summary(41.23,
                                 {{"checks", 0.04}, {"weight homes", 3.0}, {"model", 0.02},
                                  {"optimizer state and weights", 37.51}},
                                 "pinning 12.0 s for 14 GiB"),
            "setup: 41.2 s (weight homes 3.0 s, optimizer state and weights 37.5 s, other 0.1 s; pinning 12.0 s for "
            "14 GiB)");
  EXPECT_EQ(format_setup_summary(0.5, {{"checks", 0.5}}, ""), "setup: 0.5 s (checks 0.5 s)");
}

TEST(SetupProgress, FinishEndsThePhasesAndReturnsTheSummary) {
  std::atomic<uint64_t> done{0};
  SetupProgress progress(nullptr, /*plain_every_s=*/0);  // a plain line every tick
  progress.begin("checks");
  progress.track({.name = "pinned", .done = [&] { return done.load(); }, .total = 100});
  progress.begin("weight homes");
  done = 60;
  const std::string line = progress.finish("pinning 0.0 s for 60 B");
  EXPECT_EQ(line.rfind("setup: ", 0), 0u) << line;
  EXPECT_NE(line.find("pinning 0.0 s for 60 B)"), std::string::npos) << line;
  EXPECT_GE(progress.elapsed(), 0.0);
}

}  // namespace
}  // namespace strata::model
