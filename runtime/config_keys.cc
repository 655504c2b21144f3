// Definitions of the runtime layer's config keys (see config_keys.h).
#include "runtime/config_keys.h"

namespace strata {

void add_runtime_config_keys(ConfigSchema& schema) {
  constexpr double kMiB = 1024.0 * 1024.0;
  schema.add({.name = "config",
              .type = ValueType::path,
              .help = "JSON config file to read (its values are overridden by STRATA_* variables and flags)"});
  schema.add({.name = "log_level",
              .type = ValueType::choice,
              .default_text = "info",
              .help = "How much to log to stderr",
              .choices = {"trace", "debug", "info", "warn", "error", "off"}});
  schema.add({.name = "device",
              .type = ValueType::choice,
              .default_text = "auto",
              .help = "Where to compute: cuda (a GPU), cpu (the CPU backend), or auto (a GPU when one is visible)",
              .choices = {"auto", "cpu", "cuda"}});
  schema.add({.name = "gpu_index",
              .type = ValueType::integer,
              .default_text = "0",
              .help = "Which GPU to use (as numbered by nvidia-smi / CUDA_VISIBLE_DEVICES); across ranks "
                      "(mpirun) the default is each rank's local rank: one GPU a rank",
              .min = 0,
              .max = 63});
  schema.add({.name = "gpu_mem",
              .type = ValueType::size,
              .default_text = "auto",
              .help = "Device memory budget, e.g. 20GiB (auto: the free memory of the device, less a reserve)",
              .min = 16 * kMiB,
              .allow_auto = true});
  schema.add({.name = "peak_tflops",
              .type = ValueType::real,
              .default_text = "0",
              .help = "Dense peak TFLOP/s of the GPU at the training precision, for MFU (0: from the table of known "
                      "GPUs; set it for a GPU the table lacks, or a clock-limited one)",
              .min = 0,
              .max = 1e6});
  schema.add({.name = "comm_timeout",
              .type = ValueType::real,
              .default_text = "20",
              .help = "Across ranks (mpirun): seconds a collective may wait with no message to or from a peer "
                      "completing before the run stops, naming the peer (dead or stuck); set it above the longest "
                      "step or checkpoint write of the run (left at the default with a checkpoint directory, it is "
                      "raised to twice the checkpoint's write at 100 MB/s); 0 waits forever",
              .min = 0,
              .max = 86400});
  schema.add({.name = "comm",
              .type = ValueType::choice,
              .default_text = "auto",
              .help = "The communicator a run's ranks exchange through: auto (none on one rank; across ranks MPI on "
                      "the cpu backend, NCCL on cuda); local or nccl run one rank through the across-ranks path "
                      "(the gradient exchanged, the optimizer state and, with --zero-stage 3, the weights "
                      "partitioned, N = 1) on the local communicator (any backend) or on NCCL (cuda only): the same "
                      "bits as auto, a check of that path without a second GPU; nccl across ranks is auto's choice",
              .choices = {"auto", "local", "nccl"}});
  schema.add({.name = "rendezvous_dir",
              .type = ValueType::path,
              .help = "Across ranks launched torchrun-style (RANK, WORLD_SIZE; no mpirun) on GPUs: a directory "
                      "every rank sees (shared across machines) where rank 0 leaves NCCL's unique id"});
  schema.add({.name = "cpu_mem",
              .type = ValueType::size,
              .default_text = "auto",
              .help = "Pinned host memory budget, e.g. 64GiB (auto: a share of the machine's RAM)",
              .allow_auto = true});
  schema.add({.name = "threads",
              .type = ValueType::integer,
              .default_text = "0",
              .help = "CPU threads for the optimizer and CPU kernels (0: all cores)",
              .min = 0,
              .max = 4096});
  schema.add({.name = "simd",
              .type = ValueType::choice,
              .default_text = "auto",
              .help = "CPU vector instructions for the kernels (auto: the best this CPU supports)",
              .choices = {"auto", "scalar", "avx2", "avx512"}});
  schema.add({.name = "seed",
              .type = ValueType::integer,
              .default_text = "1234",
              .help = "Random seed for weight initialisation and data order"});
}

}  // namespace strata
