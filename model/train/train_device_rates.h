// TrainDeviceRates: what `strata train` adds to each step's metrics on a GPU -- achieved TFLOP/s
// and MFU (model FLOPs of the step, model/net/flops.h, over the step time and the device's dense peak,
// runtime/device_peak.h) and the device memory NVML reports (runtime/device_memory_probe.h).
// Whatever cannot be known (no peak for this GPU, no NVML) is said once at start and then left
// out of the metrics; never an error. Not used on the CPU backend (no peak, no NVML).
#pragma once

#include <memory>
#include <optional>

#include "model/train/metrics_log.h"
#include "model/net/model_config.h"
#include "model/train/train_options.h"
#include "runtime/backend.h"
#include "runtime/device_memory_probe.h"
#include "runtime/device_peak.h"

namespace strata::model {

// Thread-safety: one thread (the training loop). Lifetime: independent of the backend it read.
class TrainDeviceRates {
 public:
  // `peak_tflops_override` > 0 replaces the table's peak (--peak-tflops). Logs at info what the
  // MFU is measured against, or at warn why there is none.
  TrainDeviceRates(const Backend& backend, const model::ModelConfig& config, const model::TrainOptions& options,
                   double peak_tflops_override);

  // Fills metrics.tflops / mfu / device_used_bytes for one optimizer step that took `step_s`
  // seconds (CUDA backend only; the CPU backend leaves them unset).
  void fill(model::StepMetrics& metrics, double step_s) const;
  // The run's MFU: `steps` steps' model FLOPs over their seconds and the peak; nullopt without one.
  std::optional<double> run_mfu(uint64_t steps, double seconds) const;

 private:
  bool gpu_ = false;
  double flops_per_step_ = 0;  // model FLOPs of one optimizer step (model/net/flops.h)
  std::optional<DevicePeak> peak_;
  std::unique_ptr<DeviceMemoryProbe> probe_;
};

}  // namespace strata::model
