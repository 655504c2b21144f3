// A SIGTERM while `strata train` sets up (here right after the offload tiers made their swap
// directory; in a real run while it writes a large model's weights and optimizer state to NVMe)
// stops the run at the end of that phase: exit 128 + 15, a line saying nothing was trained, and
// the swap directory removed, not left for `strata clean`.
#include <csignal>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "tools/run_cli.h"

namespace strata {
namespace train_setup_signal_test {

TEST(TrainSetupSignal, ASigtermDuringSetupStopsCleanlyAndRemovesTheSwapDirectory) {
  const std::string swap = test::temp_path("strata_setup_signal_swap");
  std::filesystem::remove_all(swap);
  std::filesystem::create_directories(swap);
  const test::CliResult r = test::run_cli({"train", "--device", "cpu", "--steps", "3", "--eval-every", "0",
                                           "--offload-param", "nvme", "--offload-optimizer", "nvme", "--nvme-path",
                                           swap},
                                          {"STRATA_TEST_SIGNAL_IN_SETUP=1"});
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_NE(r.err.find("SIGTERM: stopped while creating the offload tiers, before the first step"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("step 1/3"), std::string::npos) << r.err;
  for (const auto& e : std::filesystem::directory_iterator(swap)) ADD_FAILURE() << "left behind: " << e.path();
}

}  // namespace train_setup_signal_test
}  // namespace strata
