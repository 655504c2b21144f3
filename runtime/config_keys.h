// The runtime layer's config keys: config file, logging, device choice and memory budgets,
// threads, SIMD level, seed. Each layer has one add_*_config_keys function like this one; the
// CLI composes them (tools/strata/schema.cc). Not where the values are used.
#pragma once

#include "runtime/config_schema.h"

namespace strata {

// Adds: config, log_level, device, gpu_index, gpu_mem, cpu_mem, threads, simd, seed.
void add_runtime_config_keys(ConfigSchema& schema);

}  // namespace strata
