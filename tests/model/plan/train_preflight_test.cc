// The preflight decisions of a training run (model/plan/train_preflight.h), without a process:
// the host memory check against a given host, the checkpoint rotation's size, and the device
// budget's refusal with what would fit (model/train/train_offload.h's check_device_budget).
#include "model/plan/train_preflight.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/net/model_config.h"
#include "model/plan/planner.h"
#include "model/train/train_offload.h"
#include "runtime/backend.h"
#include "tests/model/plan/run_config.h"
#include "tests/model/model_test_files.h"

namespace strata::model {
namespace {

using testing::expect_value;

constexpr uint64_t kPreflightMiB = 1ull << 20, kPreflightGiB = 1ull << 30;

ModelConfig tiny() { return expect_value(model_config_with("gpt2-tiny", {})); }

TEST(HostMemoryCheck, TheOptimizerStateMustFitInWhatIsAvailable) {
  const ModelConfig mc = tiny();
  const uint64_t params = parameter_count(mc);
  const HostMemory small{.available = 12 * params - 1, .memlock = std::nullopt};
  StatusOr<std::vector<std::string>> r = check_host_memory(mc, AdamStates::f32, false, false, 0, small);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::out_of_memory);
  EXPECT_NE(r.status().message().find(mc.name + " (" + std::to_string(params) + " parameters) needs at least"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("--offload-optimizer nvme --nvme-path DIR"), std::string::npos);
  // 8-bit moments need half; states on the device or on NVMe need none of the host.
  EXPECT_TRUE(check_host_memory(mc, AdamStates::q8, false, false, 0, small).is_ok());
  EXPECT_TRUE(check_host_memory(mc, AdamStates::f32, true, false, 0, {.available = 0, .memlock = {}}).is_ok());
  EXPECT_TRUE(check_host_memory(mc, AdamStates::f32, false, true, 0, {.available = 0, .memlock = {}}).is_ok());
  // An unreadable MemAvailable checks nothing.
  EXPECT_TRUE(check_host_memory(mc, AdamStates::f32, false, false, 0, {}).is_ok());
}

TEST(HostMemoryCheck, ACpuMemBudgetAboveWhatIsAvailableIsRefusedAndAboveMemlockWarned) {
  const ModelConfig mc = tiny();
  StatusOr<std::vector<std::string>> over =
      check_host_memory(mc, AdamStates::f32, false, false, 8 * kPreflightGiB, {.available = 4 * kPreflightGiB, .memlock = {}});
  ASSERT_FALSE(over.is_ok());
  EXPECT_EQ(over.status().code(), Code::out_of_memory);
  EXPECT_NE(over.status().message().find(
                "--cpu-mem 8 GiB is more than the 4 GiB of memory available on this machine; pass --cpu-mem 4 GiB"),
            std::string::npos)
      << over.status().message();
  const std::vector<std::string> warned = expect_value(
      check_host_memory(mc, AdamStates::f32, false, false, 2 * kPreflightGiB, {.available = 4 * kPreflightGiB, .memlock = 64 * kPreflightMiB}));
  ASSERT_EQ(warned.size(), 1u);
  EXPECT_NE(warned[0].find("above the locked-memory limit of 64 MiB (ulimit -l)"), std::string::npos) << warned[0];
  EXPECT_TRUE(expect_value(check_host_memory(mc, AdamStates::f32, false, false, 2 * kPreflightGiB,
                                             {.available = 4 * kPreflightGiB, .memlock = 4 * kPreflightGiB}))
                  .empty());
}

TEST(CheckpointRotation, ThePeakIsTheKeptCheckpointsPlusTheOneBeingWrittenLessThosePresent) {
  const ModelConfig mc = tiny();
  const uint64_t params = parameter_count(mc);
  const uint64_t f32 = 12 * params, q8 = 4 * params + 2 * params + params / 8;
  EXPECT_EQ(estimate_checkpoint_bytes(mc, AdamStates::f32), f32 + f32 / 16 + kPreflightMiB);
  EXPECT_EQ(estimate_checkpoint_bytes(mc, AdamStates::q8), q8 + q8 / 16 + kPreflightMiB);
  EXPECT_EQ((CheckpointRotation{.one = 10, .keep = 2, .present = 0}).peak_new(), 30u);
  EXPECT_EQ((CheckpointRotation{.one = 10, .keep = 2, .present = 1}).peak_new(), 20u);
  EXPECT_EQ((CheckpointRotation{.one = 10, .keep = 2, .present = 5}).peak_new(), 10u);
}

TEST(CheckpointRoom, ARotationNoDiskHoldsIsRefusedNamingTheAmounts) {
  const CheckpointRotation huge{.one = 1ull << 61, .keep = 2, .present = 0};
  const Status s = check_checkpoint_room(::testing::TempDir(), huge, "gpt2-tiny");
  ASSERT_EQ(s.code(), Code::no_space) << s.to_string();
  EXPECT_NE(s.message().find("its rotation needs about"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--keep-checkpoints 2 checkpoints of gpt2-tiny plus the one being written"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(check_checkpoint_room(::testing::TempDir(), {.one = 1, .keep = 2, .present = 0}, "gpt2-tiny").is_ok());
}

// A device budget below the run's working set is refused with what would fit, one change a line.
struct BudgetCase {
  test::Flags flags;
  uint64_t budget;
  std::vector<std::string> words;
};

void expect_refused(const BudgetCase& c) {
  const Config config = expect_value(test::run_config(c.flags));
  const TrainOptions o = expect_value(train_options_from_config(config));
  const ModelConfig mc = expect_value(model_config_with(o.preset, o.model));
  auto backend = expect_value(make_backend({.kind = BackendKind::cpu, .memory_budget = c.budget}));
  const Status s = check_device_budget(mc, o, *backend, PlanRates{});
  ASSERT_EQ(s.code(), Code::out_of_memory) << s.to_string();
  for (const std::string& w : c.words) EXPECT_NE(s.message().find(w), std::string::npos) << w << "\n" << s.message();
}

TEST(DeviceBudget, TooLittleForResidentWeightsSuggestsPaging) {
  // 24 layers of width 256: resident weights and gradients (~80 MiB fp32) outgrow 24 MiB, two slots do not.
  expect_refused({.flags = {{"--n-layer", "24"}, {"--dim", "256"}, {"--micro-batch", "1"}, {"--seq", "16"},
                            {"--offload-param", "none"}},
                  .budget = 24 * kPreflightMiB,
                  .words = {"\n  --offload-param cpu: pages the weights through the device"}});
}

TEST(DeviceBudget, ABudgetBelowThePagedWorkingSetNamesTheMinimumAndCheckpointing) {
  // 64 x 64 tokens: the activations alone outgrow the smallest budget.
  expect_refused({.flags = {{"--n-layer", "6"}, {"--offload-param", "cpu"}, {"--micro-batch", "64"}, {"--seq", "64"}},
                  .budget = 16 * kPreflightMiB,
                  .words = {"needs", "(2 slots, home cpu)", "\n  --gpu-mem ", ": the run as it is: needs ",
                            "\n  --activation-checkpointing: "}});
}

}  // namespace
}  // namespace strata::model
