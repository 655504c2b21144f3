// Composition of the layers' config keys for the strata CLI (see schema.h).
#include "tools/strata/schema.h"

#include "model/train_config_keys.h"
#include "offload/config_keys.h"
#include "runtime/config_keys.h"

namespace strata::cli {

ConfigSchema strata_config_schema() {
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

}  // namespace strata::cli
