// `strata plan`: a described machine (no hardware needed) gets a placement for llama-70b that fits
// every budget; too little NVMe names the gigabytes missing and exits 1; --json holds the keys a
// script reads with sane values; impossible budgets, unknown presets and bad rates are refused
// with exit 2 and a message that names the flag.
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tools/run_cli.h"

namespace strata {
namespace {

using test::CliResult;
using test::run_cli;

const std::vector<std::string> k70b = {"plan", "--preset", "llama-70b", "--dtype", "bf16", "--gpu-mem", "24GiB",
                                       "--cpu-mem", "128GiB"};

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(PlanCli, Llama70bFitsADescribedWorkstation) {
  const CliResult r = run_cli(with(k70b, {"--nvme-mem", "2TB"}));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("machine (described)"), std::string::npos) << r.out;
  // The budget the paged working set leaves holds 8 of the 80 layers (PlannerTest covers the fill).
  EXPECT_NE(r.out.find("fits: weights nvme (8 layers resident), optimizer nvme, gradients nvme, activation "
                       "checkpointing on"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("strata train --offload-param nvme --offload-optimizer nvme --resident-layers 8 --offload-grad "
                       "nvme --activation-checkpointing"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("bottleneck: nvme"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("assumed default"), std::string::npos) << r.out;
}

TEST(PlanCli, TooLittleNvmeNamesTheMissingGigabytes) {
  const CliResult r = run_cli(with(k70b, {"--nvme-mem", "500GB"}));
  EXPECT_EQ(r.exit_code, 1) << r.err << r.out;
  EXPECT_NE(r.out.find("does not fit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GB more nvme"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--nvme-path DIR: add an NVMe path with"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--optimizer-type adamw8bit"), std::string::npos) << r.out;
  // The figure printed is the JSON's missing bytes in GB.
  const CliResult j = run_cli(with(k70b, {"--nvme-mem", "500GB", "--json"}));
  ASSERT_EQ(j.exit_code, 1) << j.err;
  const nlohmann::json plan = nlohmann::json::parse(j.out);
  const uint64_t missing = plan.at("missing").at("nvme");
  EXPECT_GT(missing, 500'000'000'000ull);  // 2 + 4 + 4 + 8 bytes per parameter is over 1.2 TB
  EXPECT_NE(r.out.find(fmt::format("{:.1f} GB more nvme", double(missing) / 1e9)), std::string::npos) << r.out;
  EXPECT_EQ(plan.at("nvme_bytes").get<uint64_t>() - 500'000'000'000ull, missing);
}

TEST(PlanCli, JsonHasTheKeysWithSaneValues) {
  const CliResult r = run_cli(with(k70b, {"--nvme-mem", "2TB", "--json", "--rate-nvme-read", "12"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j.at("fits").get<bool>());
  EXPECT_GT(j.at("params").get<uint64_t>(), 68'000'000'000ull);
  EXPECT_LT(j.at("params").get<uint64_t>(), 71'000'000'000ull);
  EXPECT_LE(j.at("gpu_bytes").get<uint64_t>(), 24ull << 30);
  EXPECT_GT(j.at("gpu_bytes").get<uint64_t>(), 1ull << 30);
  EXPECT_LE(j.at("cpu_bytes").get<uint64_t>(), 128ull << 30);
  EXPECT_LE(j.at("nvme_bytes").get<uint64_t>(), 2'000'000'000'000ull);
  EXPECT_GT(j.at("nvme_bytes").get<uint64_t>(), 1'000'000'000'000ull);
  EXPECT_GT(j.at("step_s").get<double>(), 0.0);
  EXPECT_EQ(j.at("bottleneck"), "nvme");
  EXPECT_EQ(j.at("rates").at("nvme_read").get<double>(), 12e9);
  const std::vector<std::string> assumed = j.at("assumed_rates");
  EXPECT_EQ(assumed.size(), 4u);  // all but --rate-nvme-read
  uint64_t states = 0;
  for (const auto& [state, bytes] : j.at("bytes").at("nvme").items()) states += bytes.get<uint64_t>();
  EXPECT_EQ(states, j.at("nvme_bytes").get<uint64_t>());
}

TEST(PlanCli, AFixedPlacementIsKept) {
  const CliResult r = run_cli({"plan", "--preset", "gpt2-124m", "--gpu-mem", "8GiB", "--cpu-mem", "8GiB",
                               "--offload-param", "cpu", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("placement").at("offload_param"), "cpu");
  EXPECT_EQ(j.at("nvme_bytes"), 0);
  // 8 GiB holds the whole of gpt2-124m's 12 layers beside the paged tables.
  EXPECT_EQ(j.at("placement").at("resident_layers"), 12);
}

TEST(PlanCli, ItsVariablesAreReadByPlanAndIgnoredElsewhere) {
  const CliResult r = run_cli(with(k70b, {"--nvme-mem", "2TB", "--json"}), {"STRATA_RATE_PCIE=50"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("rates").at("pcie").get<double>(), 50e9);
  const CliResult config = run_cli({"config"}, {"STRATA_RATE_PCIE=50", "STRATA_NVME_MEM=2TB"});
  EXPECT_EQ(config.exit_code, 0) << config.err;
}

TEST(PlanCli, BadInputsAreRefusedNamingTheFlag) {
  struct Bad {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {{"--preset", "llama-71b", "--gpu-mem", "24GiB", "--cpu-mem", "8GiB"}, "unknown model preset 'llama-71b'"},
      {{"--preset", "gpt2-124m", "--gpu-mem", "0", "--cpu-mem", "8GiB"}, "--gpu-mem 0: gpu_mem must be a size >= 16 MiB"},
      {{"--preset", "gpt2-124m", "--gpu-mem", "8GiB", "--cpu-mem", "0"}, "the pinned CPU memory budget is 0"},
      {{"--preset", "gpt2-124m", "--gpu-mem", "8GiB", "--cpu-mem", "-4GB"}, "--cpu-mem -4GB"},
      {{"--preset", "gpt2-124m", "--gpu-mem", "lots", "--cpu-mem", "8GiB"}, "'lots' is not a size"},
      {{"--preset", "gpt2-124m", "--gpu-mem", "8GiB", "--cpu-mem", "8GiB", "--nvme-mem", "2XB"}, "--nvme-mem 2XB"},
      {{"--preset", "gpt2-124m", "--gpu-mem", "8GiB", "--cpu-mem", "8GiB", "--rate-pcie", "0"}, "--rate-pcie 0"},
      {{"--preset", "gpt2-124m", "--gpu-mem", "8GiB", "--cpu-mem", "8GiB", "--seq", "4096"}, "--seq 4096 is longer"},
  };
  for (const Bad& b : bad) {
    const CliResult r = run_cli(with({"plan"}, b.args));
    EXPECT_EQ(r.exit_code, 2) << b.message << ": " << r.err << r.out;
    EXPECT_NE(r.err.find(b.message), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << "no plan is printed for bad input: " << r.out;
  }
}

}  // namespace
}  // namespace strata
