// Composition of the layers' config keys for the strata CLI (see schema.h).
#include "tools/strata/schema.h"

#include <fmt/format.h>

#include "model/plan/plan_machine.h"
#include "model/train/train_config_keys.h"
#include "offload/config_keys.h"
#include "runtime/config_keys.h"

namespace strata::cli {
namespace {

// The keys add_plan_machine_keys defines: only `strata plan` describes another machine's NVMe and
// the world of ranks it plans for.
constexpr const char* kPlanOnlyKeys[] = {"nvme_mem", "ranks", "nodes", "rate_intra_node", "rate_inter_node"};

// `strata plan`'s own: the NVMe capacity of a described machine; the ranks, nodes and links of the
// world (model/plan/world.h) whose rank it plans.
void add_plan_machine_keys(ConfigSchema& schema) {
  const auto count = [&schema](const char* name, const char* help) {
    schema.add({.name = name, .type = ValueType::integer, .default_text = "1", .help = help, .min = 1, .max = 65536});
  };
  count("ranks", "GPUs (ranks) the run is planned across, ZeRO-3: each homes 1/N of every chunk; the plan is one "
                 "rank's (1: one GPU, the plan of today)");
  count("nodes", "Machines the ranks are on, the same number on each (must divide --ranks); --cpu-mem and "
                 "--nvme-mem are then each node's");
  // GB/s per GPU each way; the defaults are model::World's (model/plan/world.h says where from).
  const model::World w;
  const auto rate = [&schema](const char* name, double bytes_per_s, const char* help) {
    schema.add({.name = name, .type = ValueType::real, .default_text = fmt::format("{:g}", bytes_per_s / 1e9),
                .help = help, .min = 1e-6});
  };
  rate("rate_intra_node", w.intra_node,
       "GB/s per GPU each way between the GPUs of a node (default: H100 SXM NVLink 4; a PCIe-only box: its PCIe "
       "figure)");
  rate("rate_inter_node", w.inter_node,
       "GB/s per GPU each way between nodes (default: one 400 Gb/s InfiniBand/RoCE NIC per GPU)");
  schema.add({.name = "nvme_mem",
              .type = ValueType::size,
              .default_text = "auto",
              .help = "NVMe space for swap files, all paths together, e.g. 2TB (auto: the free space of --nvme-path; "
                      "none given: no NVMe; 0: no NVMe)",
              .min = 0,
              .allow_auto = true});
}

// Every layer's keys.
ConfigSchema layer_keys() {
  ConfigSchema schema;
  // Set by tools/test.sh's caller for the build, not a runtime setting.
  schema.ignore_env("STRATA_CMAKE_ARGS");
  // The kill tests' fault seam of `strata train` (cmd_train.cc), not a setting.
  schema.ignore_env("STRATA_TEST_KILL_AT");
  // The signal tests' seam: a SIGTERM during `strata train`'s setup (cmd_train.cc), not a setting.
  schema.ignore_env("STRATA_TEST_SIGNAL_IN_SETUP");
  // The project's test harness: tools/test.sh's stages and the gpu tests' "fail, don't skip"
  // (tests/gpu_required.h, set by tools/gpu_check.sh). Known, so not even a warning.
  schema.ignore_env("STRATA_TEST_STAGES");
  schema.ignore_env("STRATA_REQUIRE_GPU");
  // One line per layer, then the CLI's own.
  add_runtime_config_keys(schema);
  add_offload_config_keys(schema);
  model::add_train_config_keys(schema);
  model::add_plan_rate_config_keys(schema);
  return schema;
}

}  // namespace

ConfigSchema strata_config_schema() {
  ConfigSchema schema = layer_keys();
  // `strata plan`'s own settings: a STRATA_* variable meant for it is no error elsewhere.
  for (const char* key : kPlanOnlyKeys) schema.ignore_env(ConfigSchema::env_name(key));
  return schema;
}

ConfigSchema strata_plan_config_schema() {
  ConfigSchema schema = layer_keys();
  add_plan_machine_keys(schema);
  return schema;
}

}  // namespace strata::cli
