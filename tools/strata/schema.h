// The strata CLI's config schema: every layer's keys in one ConfigSchema, which `strata config`
// and the commands that read a Config (train, plan, bench) bind to their flags. Not the keys
// themselves (each layer's add_*_config_keys).
#pragma once

#include "runtime/config_schema.h"

namespace strata::cli {

// A fresh schema with the keys of every layer, in layer order (runtime first), then the CLI's own:
// the calibration cache (calibration) and the step-time model's rates (rate_flops, rate_pcie,
// rate_nvme_read, rate_nvme_write, rate_adam), which `strata plan` and `strata train --offload
// auto` read. The STRATA_* variable of `strata plan`'s own key is ignored (set for plan, it is no
// error elsewhere).
ConfigSchema strata_config_schema();
// The same plus `strata plan`'s key: nvme_mem (the NVMe capacity of a described machine).
ConfigSchema strata_plan_config_schema();

}  // namespace strata::cli
