// The run's step schedule (step_schedule.h): the conditions of auto, in the order they are checked.
#include "model/train/step_schedule.h"

#include <fmt/format.h>

#include "model/plan/placement.h"
#include "runtime/units.h"

namespace strata::model {

StatusOr<ScheduleChoice> choose_step_schedule(const ModelConfig& config, const TrainOptions& options, int world_size,
                                              uint64_t device_budget) {
  // This rank's micro-batches: the step's over all ranks (each runs as many: check_world_batch).
  const bool across = world_size > 1;
  const uint64_t K = across ? options.grad_accum / uint64_t(world_size) : options.grad_accum;
  const StepSchedule asked = options.step_schedule;
  const auto mbm = [](std::string why) { return ScheduleChoice{StepSchedule::micro_batch_major, std::move(why)}; };
  if (K < 2)
    return mbm(across ? fmt::format("one micro-batch per rank per step ({} ranks): nothing to group", world_size)
                      : "one micro-batch per step (--grad-accum 1): both schedules are the same work");
  if (asked == StepSchedule::micro_batch_major) return mbm("as asked (--step-schedule micro-batch-major)");
  TrainOptions layer_major = options;
  layer_major.step_schedule = StepSchedule::layer_major;
  const DeviceBytes d = estimate_device_bytes(config, layer_major);
  if (asked == StepSchedule::layer_major) {
    if (d.total() > device_budget) {
      TrainOptions micro_batch_major = options;
      micro_batch_major.step_schedule = StepSchedule::micro_batch_major;
      return error(Code::out_of_memory, "--step-schedule layer-major needs {} of device memory ({} micro-batches' "
                   "layer inputs: activations {}) but the budget is {}; pass --step-schedule auto or micro-batch-major "
                   "({}), a smaller --grad-accum or --micro-batch, or raise --gpu-mem", format_size(d.total()), K,
                   format_size(d.activations), format_size(device_budget),
                   format_size(estimate_device_bytes(config, micro_batch_major).total()));
    }
    return ScheduleChoice{StepSchedule::layer_major,
                          fmt::format("as asked (--step-schedule layer-major): each chunk acquired once per pass for "
                                      "{} {} micro-batches", across ? "this rank's" : "the step's", K)};
  }
  // ZeRO-3 gathers every chunk from the ranks' shards as paging fetches it: layer-major saves gathers.
  const bool gathered = across && options.zero_stage == 3;
  if (!options.paged_weights() && !gathered)
    return mbm(across ? "the whole weights are resident on every rank's device (ZeRO-2): layer-major would save no "
                        "transfer (it pays with --offload-param cpu or nvme, or --zero-stage 3)"
                      : "the weights are resident on the device: layer-major would save no transfer (it pays with "
                        "--offload-param cpu or nvme)");
  if (!options.activation_checkpointing)
    return mbm(fmt::format("layer-major keeps {} micro-batches' activations, which needs activation checkpointing "
                           "(pass --activation-checkpointing for it)", K));
  if (d.total() > device_budget)
    return mbm(fmt::format("layer-major would need {} of device memory ({} micro-batches' layer inputs: activations "
                           "{}), over the budget of {}", format_size(d.total()), K, format_size(d.activations),
                           format_size(device_budget)));
  const std::string crossing =
      gathered && !options.paged_weights()
          ? fmt::format("each chunk is gathered from the {} ranks' shards about twice a step instead of {} times",
                        world_size, 2 * K)
          : fmt::format("weights homed on {} cross to the device about twice a step instead of {} times",
                        offload_value(options.weight_home), 2 * K);
  return ScheduleChoice{StepSchedule::layer_major,
                        fmt::format("{} ({} micro-batches{}; {} of device memory)", crossing, K,
                                    across ? " a rank" : "", format_size(d.total()))};
}

}  // namespace strata::model
