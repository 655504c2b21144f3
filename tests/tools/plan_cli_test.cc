// `strata plan`: a described machine (no hardware needed) gets a placement for llama-70b that fits
// every budget; too little NVMe names the gigabytes missing and exits 1; --json holds the keys a
// script reads with sane values; impossible budgets, unknown presets and bad rates are refused
// with exit 2 and a message that names the flag. Across ranks (--ranks, --nodes): --ranks 1 is
// today's plan to the byte; llama-70b on 16 GPUs over 2 nodes plans a rank's share, its bytes per
// link and the limit; a world that does not divide is refused saying what to pass.
#include <algorithm>
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
  // What the pinned budget leaves holds a read cache of most of the weights.
  EXPECT_NE(r.out.find("fits: weights nvme (8 layers resident, read cache "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("), optimizer nvme, gradients nvme, activation checkpointing on"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("strata train --offload-param nvme --offload-optimizer nvme --resident-layers 8 --param-cache "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" --offload-grad nvme --activation-checkpointing"),
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

// --optimizer-device split is kept, and the plan's flags and JSON say so: the resident layers
// update on the device.
TEST(PlanCli, ASplitUpdateIsPlannedAndNamed) {
  const CliResult r = run_cli({"plan", "--preset", "gpt2-124m", "--gpu-mem", "8GiB", "--cpu-mem", "8GiB",
                               "--offload-param", "cpu", "--optimizer-device", "split", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("placement").at("optimizer_device"), "split");
  EXPECT_EQ(j.at("placement").at("offload_optimizer"), "cpu");
  EXPECT_GT(j.at("placement").at("resident_layers").get<int>(), 0);
  EXPECT_NE(j.at("placement").at("flags").get<std::string>().find("--optimizer-device split"), std::string::npos);
  EXPECT_GT(j.at("bytes").at("gpu").at("moments").get<uint64_t>(), 0u);  // the resident layers' moments
}

// NVMe-homed weights under a pinned budget: the read cache fills what the rest leaves, and the JSON,
// the flags and the pinned figure say how much; a given --param-cache is kept.
TEST(PlanCli, NvmeWeightsTakeAReadCacheFromThePinnedBudget) {
  // 2500 MiB leaves about 110 MiB beside the optimizer state and the sums: cache buffers (of a
  // layer's size) for some of the 14 chunks, not all.
  const std::vector<std::string> base = {"plan",      "--preset",    "gpt2-124m", "--gpu-mem",       "1GiB",
                                         "--cpu-mem", "2500MiB",        "--nvme-mem", "100GB",          "--offload-param",
                                         "nvme",      "--nvme-path", "/tmp",       "--activation-checkpointing",
                                         "--resident-layers", "0", "--json"};
  const CliResult r = run_cli(base);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const uint64_t cache = j.at("placement").at("param_cache").get<uint64_t>();
  EXPECT_GT(cache, 0u);
  EXPECT_LE(j.at("cpu_bytes").get<uint64_t>(), 2500ull << 20);
  EXPECT_NE(j.at("placement").at("flags").get<std::string>().find("--param-cache "), std::string::npos);
  std::vector<std::string> given = base;
  given.insert(given.end(), {"--param-cache", "0"});
  const CliResult none = run_cli(given);
  ASSERT_EQ(none.exit_code, 0) << none.err;
  const nlohmann::json n = nlohmann::json::parse(none.out);
  EXPECT_EQ(n.at("placement").at("param_cache"), 0);
  EXPECT_EQ(n.at("cpu_bytes").get<uint64_t>() + cache, j.at("cpu_bytes").get<uint64_t>());
  EXPECT_GT(j.at("traffic").at("nvme_read").get<uint64_t>(), 0u);
  EXPECT_LT(j.at("traffic").at("nvme_read").get<uint64_t>(), n.at("traffic").at("nvme_read").get<uint64_t>());
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

// --ranks 1 --nodes 1 (the defaults) is today's plan, to the byte, in text and JSON.
TEST(PlanCli, OneRankIsTodaysPlan) {
  for (const std::vector<std::string>& extra : {std::vector<std::string>{}, std::vector<std::string>{"--json"}}) {
    const CliResult today = run_cli(with(with(k70b, {"--nvme-mem", "2TB"}), extra));
    const CliResult one = run_cli(with(with(k70b, {"--nvme-mem", "2TB", "--ranks", "1", "--nodes", "1"}), extra));
    ASSERT_EQ(today.exit_code, 0) << today.err;
    EXPECT_EQ(one.exit_code, 0) << one.err;
    EXPECT_EQ(one.out, today.out);
    EXPECT_EQ(today.out.find("world"), std::string::npos) << today.out;
  }
}

// llama-70b on 16 GPUs over 2 nodes (8 per node), DGX-like: a rank's share of each node's RAM and
// NVMe, its bytes per step on every link, the link that limits it and what train runs today.
TEST(PlanCli, Llama70bAcrossTwoNodesPlansOneRank) {
  const std::vector<std::string> dgx = {"plan",      "--preset",   "llama-70b", "--dtype",     "bf16",
                                        "--gpu-mem", "80GiB",      "--cpu-mem", "1TiB",        "--nvme-mem",
                                        "8TB",       "--ranks",    "16",        "--nodes",     "2",
                                        "--grad-accum", "16",      "--micro-batch", "1",       "--seq", "4096"};
  const CliResult j = run_cli(with(dgx, {"--json"}));
  ASSERT_EQ(j.exit_code, 0) << j.err << j.out;
  const nlohmann::json plan = nlohmann::json::parse(j.out);
  const nlohmann::json& world = plan.at("world");
  EXPECT_EQ(world.at("ranks"), 16);
  EXPECT_EQ(world.at("nodes"), 2);
  EXPECT_EQ(world.at("ranks_per_node"), 8);
  EXPECT_EQ(plan.at("budgets").at("cpu").get<uint64_t>(), (1ull << 40) / 8);  // a rank's share of the node's
  EXPECT_EQ(plan.at("budgets").at("nvme").get<uint64_t>(), 8'000'000'000'000ull / 8);
  // Per collective a rank gets 7/16 of the chunk from its node and 8/16 from the other one.
  const nlohmann::json& t = world.at("traffic");
  const uint64_t gathered = t.at("gathered"), reduced = t.at("reduced");
  const uint64_t intra = t.at("intra_node"), inter = t.at("inter_node");
  EXPECT_GT(gathered, 0u);
  EXPECT_GT(reduced, 0u);
  EXPECT_NEAR(double(intra), double(gathered + reduced) * 7 / 15, 16.0);
  EXPECT_NEAR(double(inter), double(gathered + reduced) * 8 / 15, 16.0);
  // A rank holds its 1/16 of the 70B parameters' fp32 masters: 17.5 GB, not the model's 280 GB.
  // (Where the optimizer runs; a device optimizer's pinned mirror is the same shard again.)
  const uint64_t masters = std::max({plan.at("bytes").at("cpu").at("masters").get<uint64_t>(),
                                     plan.at("bytes").at("gpu").at("masters").get<uint64_t>(),
                                     plan.at("bytes").at("nvme").at("masters").get<uint64_t>()});
  EXPECT_GE(masters, plan.at("params").get<uint64_t>() * 4 / 16);
  EXPECT_LT(masters, plan.at("params").get<uint64_t>() * 4 / 15);
  EXPECT_DOUBLE_EQ(world.at("time").at("inter_node_s").get<double>(), double(inter) / 50e9);
  EXPECT_EQ(world.at("limit"), plan.at("bottleneck"));
  EXPECT_NE(world.at("train_today").at("text").get<std::string>().find("fp32 or 8-bit moments with either"),
            std::string::npos);
  const CliResult r = run_cli(dgx);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("world: 16 ranks on 2 nodes (8 per node), ZeRO-3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("intra-node 450 GB/s per GPU each way (assumed default"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bytes a rank moves per step (1 micro-batch of its own)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fmt::format("limit: {}", world.at("limit").get<std::string>())), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("today: train across ranks runs ZeRO-3 with the optimizer on the CPU"),
            std::string::npos) << r.out;
  // A slower network is given, and named.
  const CliResult slow = run_cli(with(dgx, {"--rate-inter-node", "12.5", "--json"}));
  ASSERT_EQ(slow.exit_code, 0) << slow.err;
  const nlohmann::json s = nlohmann::json::parse(slow.out).at("world");
  EXPECT_EQ(s.at("links").at("inter_node").at("source"), "given");
  EXPECT_DOUBLE_EQ(s.at("links").at("inter_node").at("rate").get<double>(), 12.5e9);
}

TEST(PlanCli, AWorldThatDoesNotDivideIsRefusedSayingWhatToPass) {
  const std::vector<std::string> base = {"plan", "--preset", "gpt2-124m", "--gpu-mem", "8GiB", "--cpu-mem", "8GiB"};
  const CliResult uneven = run_cli(with(base, {"--ranks", "16", "--nodes", "3", "--grad-accum", "16"}));
  EXPECT_EQ(uneven.exit_code, 2) << uneven.out;
  EXPECT_NE(uneven.err.find("--ranks 18 (6 per node)"), std::string::npos) << uneven.err;
  const CliResult batch = run_cli(with(base, {"--ranks", "4", "--nodes", "2"}));
  EXPECT_EQ(batch.exit_code, 2) << batch.out;
  EXPECT_NE(batch.err.find("must be a multiple of --ranks 4; pass --grad-accum 4"), std::string::npos) << batch.err;
  EXPECT_TRUE(batch.out.empty()) << batch.out;
}

}  // namespace
}  // namespace strata
