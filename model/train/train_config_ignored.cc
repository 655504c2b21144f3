// The DeepSpeed config settings `strata train` accepts without acting on them (zero_optimization.stage
// is a key, zero_stage: what a run across ranks partitions) (see
// train_config_keys.h): each group with the reason a single-GPU strata run has no use for it,
// which is what the warning says. Everything not listed here or as a key stays an unknown-key
// error. Not the keys that do map onto strata settings (train_config_keys.cc, offload/config_keys.cc).
#include "model/train/train_config_keys.h"

namespace strata::model {

void add_ignored_deepspeed_paths(ConfigSchema& schema) {
  schema.ignore_file_paths({"zero_optimization.overlap_comm", "zero_optimization.reduce_bucket_size",
                            "zero_optimization.allgather_bucket_size", "zero_optimization.allgather_partitions",
                            "zero_optimization.reduce_scatter"},
                           "tuning of the gradient and weight collectives between GPUs, and a single-GPU run has none");
  schema.ignore_file_paths({"zero_optimization.contiguous_gradients",
                            "zero_optimization.stage3_prefetch_bucket_size",
                            "zero_optimization.stage3_param_persistence_threshold",
                            "zero_optimization.stage3_max_live_parameters",
                            "zero_optimization.stage3_max_reuse_distance"},
                           "strata moves whole contiguous chunks (a layer or a tile) and sizes prefetching, residency "
                           "and optimizer work from its memory budgets (--gpu-mem, --cpu-mem), not per parameter");
  schema.ignore_file_paths({"zero_optimization.stage3_gather_16bit_weights_on_model_save"},
                           "strata's checkpoints always hold the whole model in one safetensors file");
  // offload_optimizer.device, .nvme_path and .buffer_count are keys (offload_optimizer, nvme_path,
  // optimizer_staging); these are not.
  schema.ignore_file_paths({"zero_optimization.offload_optimizer.pin_memory",
                            "zero_optimization.offload_optimizer.fast_init"},
                           "strata always pins its host buffers for the optimizer state and initialises it as it "
                           "writes each chunk's image once");
  schema.ignore_file_paths({"zero_optimization.offload_optimizer.ratio"},
                           "strata splits the update by the device budget, not by a ratio: --optimizer-device split "
                           "updates the layers that stay resident (--resident-layers) on the GPU and the other "
                           "chunks on the CPU; without it the whole update runs where --offload-optimizer says");
  // offload_param.device and .buffer_count are keys (offload_param, nvme_staging); these are not.
  schema.ignore_file_paths({"zero_optimization.offload_param.buffer_size"},
                           "strata sizes each staging buffer to the largest weight chunk (a layer), not to a byte "
                           "count");
  schema.ignore_file_paths({"zero_optimization.offload_param.max_in_cpu"},
                           "strata sizes its pinned cache of NVMe-homed weights in bytes, not parameters: "
                           "--param-cache SIZE (key param_cache; auto fills what --cpu-mem leaves)");
  schema.ignore_file_paths({"zero_optimization.offload_param.pin_memory"},
                           "strata always pins its host buffers for the weights; false does not turn that off");
  schema.ignore_file_paths({"aio.thread_count", "aio.single_submit", "aio.overlap_events"},
                           "tuning of DeepSpeed's libaio threads; strata's I/O engine (io_uring or posix) takes only "
                           "aio.block_size and aio.queue_depth");
  schema.ignore_file_paths({"wall_clock_breakdown"},
                           "DeepSpeed's per-phase timing printout; strata reports the step time in its progress line "
                           "and in --metrics");
  schema.ignore_file_paths({"zero_allow_untested_optimizer"},
                           "a licence for ZeRO to wrap an optimizer DeepSpeed has not tested; strata runs only its "
                           "own Adam family (--optimizer-type)");
}

}  // namespace strata::model
