// The offload layer's config keys: where the NVMe swap files go (nvme_path), the I/O engine and
// its shape (io_engine, aio_block_size, aio_queue_depth) and the stripe unit across paths, with
// their DeepSpeed-style JSON aliases (zero_optimization.offload_*.nvme_path, aio.block_size,
// aio.queue_depth). Also the reading of those keys back into an IoEngineConfig. Not the values'
// precedence (runtime/config.h).
#pragma once

#include "offload/io_engine_factory.h"
#include "runtime/config.h"
#include "runtime/config_schema.h"

namespace strata {

void add_offload_config_keys(ConfigSchema& schema);

// io_engine, aio_block_size and aio_queue_depth from a Config whose schema has the offload keys.
StatusOr<IoEngineConfig> io_engine_config(const Config& config);

}  // namespace strata
