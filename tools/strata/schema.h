// The strata CLI's config schema: every layer's keys in one ConfigSchema, which `strata config`
// and the commands that read a Config (train, plan, bench) bind to their flags. Not the keys
// themselves (each layer's add_*_config_keys).
#pragma once

#include "runtime/config_schema.h"

namespace strata::cli {

// A fresh schema with the keys of every layer, in layer order (runtime first).
ConfigSchema strata_config_schema();

}  // namespace strata::cli
