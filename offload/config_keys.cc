// Definitions of the offload layer's config keys (see config_keys.h).
#include "offload/config_keys.h"

namespace strata {

void add_offload_config_keys(ConfigSchema& schema) {
  constexpr double kKiB = 1024.0, kGiB = 1024.0 * 1024.0 * 1024.0;
  schema.add({.name = "nvme_path",
              .type = ValueType::path_list,
              .help = "Directories for the NVMe swap files, one per drive (comma list); extents are striped over all",
              .file_aliases = {"zero_optimization.offload_optimizer.nvme_path",
                               "zero_optimization.offload_param.nvme_path"}});
  schema.add({.name = "io_engine",
              .type = ValueType::choice,
              .default_text = "auto",
              .help = "NVMe I/O engine: io_uring, posix (pread/pwrite threads), or auto (io_uring where it works)",
              .choices = {"auto", "io_uring", "posix"}});
  // 1 MiB: NVMe drives reach their sequential bandwidth from 128 KiB-1 MiB requests; larger
  // pieces only add latency per completion.
  schema.add({.name = "aio_block_size",
              .type = ValueType::size,
              .default_text = "1MiB",
              .help = "Size of the pieces large transfers are split into (a multiple of 4 KiB)",
              .min = 4 * kKiB,
              .max = kGiB,
              .file_aliases = {"aio.block_size"}});
  // 32: a drive needs ~8 outstanding 1 MiB requests for full sequential speed; 32 keeps four
  // striped drives busy, and costs only 32 MiB of buffers in flight.
  schema.add({.name = "aio_queue_depth",
              .type = ValueType::integer,
              .default_text = "32",
              .help = "Pieces in flight at once across all NVMe paths",
              .min = 1,
              .max = 4096,
              .file_aliases = {"aio.queue_depth"}});
  // 8 MiB: on one virtio disk, two paths striped in 8 MiB units ran at 100-106% of one path, in
  // 1 MiB units at 82-92% (bench/NOTES.md); layer-sized extents (tens of MiB and up) still spread
  // over every drive.
  schema.add({.name = "nvme_stripe_unit",
              .type = ValueType::size,
              .default_text = "8MiB",
              .help = "Bytes of an extent placed on one NVMe path before moving to the next (a multiple of 4 KiB)",
              .min = 4 * kKiB,
              .max = kGiB});
}

StatusOr<IoEngineConfig> io_engine_config(const Config& config) {
  IoEngineConfig c;
  STRATA_ASSIGN_OR_RETURN(c.kind, parse_io_engine_kind(config.get_text("io_engine")));
  c.shape.block_bytes = config.get_size("aio_block_size");
  c.shape.queue_depth = static_cast<uint32_t>(config.get_int("aio_queue_depth"));
  if (c.shape.block_bytes % 4096 != 0)
    return error(Code::invalid_argument, "aio_block_size {} ({}) is not a multiple of 4 KiB", config.text("aio_block_size"),
                 config.describe_source("aio_block_size"));
  return c;
}

}  // namespace strata
