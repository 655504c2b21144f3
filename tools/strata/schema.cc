// Composition of the layers' config keys for the strata CLI (see schema.h).
#include "tools/strata/schema.h"

#include <fmt/format.h>

#include "model/planner.h"
#include "model/train_config_keys.h"
#include "offload/config_keys.h"
#include "runtime/config_keys.h"

namespace strata::cli {
namespace {

// The keys add_plan_config_keys defines.
constexpr const char* kPlanKeys[] = {"nvme_mem", "rate_flops", "rate_pcie", "rate_nvme_read", "rate_nvme_write",
                                     "rate_adam"};

// The plan's own keys: the NVMe capacity of a described machine and the step-time model's rates.
// The defaults are model::PlanRates's (a described workstation, assumed, not measured).
void add_plan_config_keys(ConfigSchema& schema) {
  const model::PlanRates d;
  schema.add({.name = "nvme_mem",
              .type = ValueType::size,
              .default_text = "auto",
              .help = "NVMe space for swap files, all paths together, e.g. 2TB (auto: the free space of --nvme-path; "
                      "none given: no NVMe; 0: no NVMe)",
              .min = 0,
              .allow_auto = true});
  schema.add({.name = "rate_flops",
              .type = ValueType::real,
              .default_text = "auto",
              .help = fmt::format("Device TFLOP/s the step-time model assumes (auto: {:g} at bf16/fp16, {:g} at fp32)",
                                  model::default_flops(DType::bf16) / 1e12, model::default_flops(DType::f32) / 1e12),
              .min = 1e-6,
              .allow_auto = true});
  schema.add({.name = "rate_pcie",
              .type = ValueType::real,
              .default_text = fmt::format("{:g}", d.pcie / 1e9),
              .help = "Host <-> device GB/s, each direction, the step-time model assumes",
              .min = 1e-6});
  schema.add({.name = "rate_nvme_read",
              .type = ValueType::real,
              .default_text = fmt::format("{:g}", d.nvme_read / 1e9),
              .help = "NVMe read GB/s, all paths together, the step-time model assumes",
              .min = 1e-6});
  schema.add({.name = "rate_nvme_write",
              .type = ValueType::real,
              .default_text = fmt::format("{:g}", d.nvme_write / 1e9),
              .help = "NVMe write GB/s, all paths together, the step-time model assumes",
              .min = 1e-6});
  schema.add({.name = "rate_adam",
              .type = ValueType::real,
              .default_text = fmt::format("{:g}", d.adam / 1e9),
              .help = "CPU AdamW billions of parameters per second (every thread) the step-time model assumes",
              .min = 1e-6});
}

// Every layer's keys.
ConfigSchema layer_keys() {
  ConfigSchema schema;
  // Set by tools/test.sh's caller for the build, not a runtime setting.
  schema.ignore_env("STRATA_CMAKE_ARGS");
  // The kill tests' fault seam of `strata train` (cmd_train.cc), not a setting.
  schema.ignore_env("STRATA_TEST_KILL_AT");
  // One line per layer.
  add_runtime_config_keys(schema);
  add_offload_config_keys(schema);
  model::add_train_config_keys(schema);
  return schema;
}

}  // namespace

ConfigSchema strata_config_schema() {
  ConfigSchema schema = layer_keys();
  // `strata plan`'s own settings: a STRATA_* variable meant for it is no error elsewhere.
  for (const char* key : kPlanKeys) schema.ignore_env(ConfigSchema::env_name(key));
  return schema;
}

ConfigSchema strata_plan_config_schema() {
  ConfigSchema schema = layer_keys();
  add_plan_config_keys(schema);
  return schema;
}

}  // namespace strata::cli
