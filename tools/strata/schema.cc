// Composition of the layers' config keys for the strata CLI (see schema.h).
#include "tools/strata/schema.h"

#include <fmt/format.h>

#include "model/plan/planner.h"
#include "model/train/train_config_keys.h"
#include "offload/config_keys.h"
#include "runtime/config_keys.h"

namespace strata::cli {
namespace {

// The key add_plan_machine_keys defines: only `strata plan` describes another machine's NVMe.
constexpr const char* kPlanOnlyKeys[] = {"nvme_mem"};

// The CLI's own keys, read by `strata plan` and `strata train` (--offload auto and the end-of-run
// prediction, tools/strata/train_placement.h): the calibration cache and the step-time model's
// rates. The rate defaults are model::PlanRates's (a workstation, assumed, not measured); a rate
// not given is taken from the calibration cache when this machine measured it.
void add_plan_rate_keys(ConfigSchema& schema) {
  const model::PlanRates d;
  schema.add({.name = "calibration",
              .type = ValueType::path,
              .help = "Calibration cache of measured rates (strata bench and strata plan --calibrate record into "
                      "it; plan and train read this machine's rates from it): default "
                      "$XDG_CACHE_HOME/strata/calibration.json, else ~/.cache/strata/calibration.json; none: no "
                      "cache"});
  schema.add({.name = "rate_flops",
              .type = ValueType::real,
              .default_text = "auto",
              .help = fmt::format("Device TFLOP/s the step-time model takes (auto: measured, else {:g} at bf16/fp16, "
                                  "{:g} at fp32)",
                                  model::default_flops(DType::bf16) / 1e12, model::default_flops(DType::f32) / 1e12),
              .min = 1e-6,
              .allow_auto = true});
  schema.add({.name = "rate_pcie",
              .type = ValueType::real,
              .default_text = fmt::format("{:g}", d.pcie / 1e9),
              .help = "Host <-> device GB/s, each direction, the step-time model takes (not given: measured, else "
                      "this)",
              .min = 1e-6});
  schema.add({.name = "rate_nvme_read",
              .type = ValueType::real,
              .default_text = fmt::format("{:g}", d.nvme_read / 1e9),
              .help = "NVMe read GB/s, all paths together, the step-time model takes (not given: measured, else this)",
              .min = 1e-6});
  schema.add({.name = "rate_nvme_write",
              .type = ValueType::real,
              .default_text = fmt::format("{:g}", d.nvme_write / 1e9),
              .help = "NVMe write GB/s, all paths together, the step-time model takes (not given: measured, else "
                      "this)",
              .min = 1e-6});
  schema.add({.name = "rate_adam",
              .type = ValueType::real,
              .default_text = fmt::format("{:g}", d.adam / 1e9),
              .help = "CPU AdamW billions of parameters per second (every thread) the step-time model takes (not "
                      "given: measured, else this)",
              .min = 1e-6});
}

// `strata plan`'s own: the NVMe capacity of a described machine.
void add_plan_machine_keys(ConfigSchema& schema) {
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
  add_plan_rate_keys(schema);
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
