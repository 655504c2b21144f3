// A training run's placement decision (model/plan/train_placement.h), without a process: a given
// placement is never replaced, an explicit --offload auto plans even when the resident run fits
// (the flag, the variable and a config file alike), a run that fits nowhere is refused with the
// planner's report, and the end-of-run comparison's lines and JSON.
#include "model/plan/train_placement.h"

#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/plan/placement.h"
#include "model/plan/planner.h"
#include "tests/model/model_test_files.h"
#include "tests/model/plan/run_config.h"

namespace strata::model {
namespace {

using testing::expect_value;

// 24 layers of width 256: resident weights and gradients (~80 MiB fp32) outgrow 24 MiB; paged through
// two slots they do not.
const test::Flags kDeep = {{"--n-layer", "24"}, {"--dim", "256"}, {"--micro-batch", "1"}, {"--seq", "16"},
                           {"--eval-every", "0"}, {"--gpu-mem", "24MiB"}};

test::Flags with(test::Flags flags, const test::Flags& more) {
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

StatusOr<TrainPlacement> place(const test::Flags& flags, std::vector<std::string> env = {}) {
  STRATA_ASSIGN_OR_RETURN(Config config, test::run_config(flags, std::move(env)));
  STRATA_ASSIGN_OR_RETURN(TrainOptions o, train_options_from_config(config));
  STRATA_ASSIGN_OR_RETURN(ModelConfig mc, model_config_with(o.preset, o.model));
  return choose_train_placement(config, o, mc);
}

TEST(TrainPlacement, AGivenPlacementIsNeverReplaced) {
  // Resident weights given (as a flag, as DeepSpeed's key in a file, or every choice fixed by
  // --offload off) that do not fit: kept as given, for the device-budget check to refuse.
  const std::string file = ::testing::TempDir() + "/strata_train_placement_ds.json";
  std::ofstream(file) << R"({"zero_optimization": {"offload_param": {"device": "none"}}})";
  for (const test::Flags& given : {test::Flags{{"--offload-param", "none"}}, test::Flags{{"--config", file}},
                                   test::Flags{{"--offload", "off"}}}) {
    const TrainPlacement p = expect_value(place(with(kDeep, given)));
    EXPECT_FALSE(p.planned);
    EXPECT_EQ(p.options.weight_home, Tier::device);
    EXPECT_FALSE(p.predicted.fits());
  }
}

TEST(TrainPlacement, WithNoPlacementGivenARunThatDoesNotFitTakesThePlanners) {
  const TrainPlacement p = expect_value(place(kDeep));
  EXPECT_TRUE(p.planned);
  EXPECT_TRUE(p.predicted.fits());
  EXPECT_NE(p.options.weight_home, Tier::device);
  EXPECT_EQ(placement_summary(p.options), placement_summary(p.predicted.options));
  // It is `strata plan`'s choice for the same flags.
  const Config config = expect_value(test::run_config(kDeep));
  const TrainOptions o = expect_value(train_options_from_config(config));
  const Plan plan = expect_value(
      make_plan(expect_value(model_config_with(o.preset, o.model)), o, p.machine.hardware, plan_fixed_choices(config)));
  EXPECT_EQ(placement_summary(plan.chosen.options), placement_summary(p.options));
}

TEST(TrainPlacement, AnExplicitAutoPlansEvenWhenTheResidentRunFits) {
  const test::Flags small = {{"--steps", "2"}, {"--eval-every", "0"}};
  const TrainPlacement resident = expect_value(place(small));
  EXPECT_FALSE(resident.planned);  // auto by default, but it fits as the flags place it
  const TrainPlacement flag = expect_value(place(with(small, {{"--offload", "auto"}})));
  EXPECT_TRUE(flag.planned);
  // The environment and a config file say it as the flag does.
  const TrainPlacement env = expect_value(place(small, {"STRATA_OFFLOAD=auto"}));
  EXPECT_TRUE(env.planned);
  EXPECT_EQ(placement_summary(env.options), placement_summary(flag.options));
}

TEST(TrainPlacement, ARunThatFitsNowhereIsRefusedWithThePlannersReport) {
  // 1 MiB of pinned memory holds no placement of even a tiny model's optimizer state.
  StatusOr<TrainPlacement> p = place({{"--n-layer", "2"}, {"--dim", "64"}, {"--n-head", "4"}, {"--vocab", "256"},
                                      {"--seq", "32"}, {"--micro-batch", "2"}, {"--eval-every", "0"},
                                      {"--cpu-mem", "1MiB"}, {"--steps", "2"}});
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), Code::out_of_memory);
  const std::string& m = p.status().message();
  EXPECT_NE(m.find("fits no placement on this machine"), std::string::npos) << m;
  EXPECT_EQ(m.find("0.0 GB more"), std::string::npos) << m;
  EXPECT_NE(m.find("(weights gpu, optimizer gpu, gradients gpu, activation checkpointing off) needs "),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("KiB more cpu"), std::string::npos) << m;
  EXPECT_NE(m.find("the cpu column's masters and moments are their pinned mirror"), std::string::npos) << m;
}

TEST(TrainPlacement, ThePredictionLinesCompareMeasuredWithPredicted) {
  TrainPlacement p = expect_value(place({{"--steps", "2"}}));
  p.predicted.time.step_s = 2.0;
  const RunMeasured measured{.first_step = 1, .steps = 3, .mean_step_s = 1.0, .gpu_peak = 0, .cpu_peak = 0};
  const std::vector<std::string> lines = prediction_lines(p, measured);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0].find("predicted vs measured ("), 0u) << lines[0];
  EXPECT_NE(lines[1].find("x0.50  (mean of steps 2-3;"), std::string::npos) << lines[1];
  const nlohmann::json j = nlohmann::json::parse(prediction_json_line(p, measured));
  EXPECT_TRUE(j.at("prediction").get<bool>());
  EXPECT_FALSE(j.at("planned").get<bool>());
  EXPECT_EQ(j.at("step_ratio").get<double>(), 0.5);
  EXPECT_EQ(j.at("measured_steps").get<uint64_t>(), 2u);
  EXPECT_EQ(j.at("rate_sources").at("flops").get<std::string>(), "assumed default");
}

}  // namespace
}  // namespace strata::model
