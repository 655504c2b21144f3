// TrainDeviceRates (train_device_rates.h).
#include "model/train/train_device_rates.h"

#include <spdlog/spdlog.h>

#include "model/net/flops.h"

namespace strata::model {

TrainDeviceRates::TrainDeviceRates(const Backend& backend, const model::ModelConfig& config,
                                   const model::TrainOptions& options, double peak_tflops_override) {
  gpu_ = backend.kind() == BackendKind::cuda;
  if (!gpu_) return;
  const DeviceDescription device = backend.device();
  flops_per_step_ = model::training_flops_per_step(config, options);
  std::string why;
  const StatusOr<PeakPrecision> precision = peak_precision_for(options.dtype, options.tf32);
  if (precision.is_ok()) peak_ = device_peak(device, *precision, peak_tflops_override, &why);
  if (peak_) {
    spdlog::info("MFU against {:.1f} TFLOP/s dense {} ({}, {})", peak_->tflops, peak_precision_name(*precision),
                 peak_->gpu.empty() ? device.name : peak_->gpu, peak_->source);
  } else {
    spdlog::warn("no MFU: {}", precision.is_ok() ? why : precision.status().message());
  }
  StatusOr<std::unique_ptr<DeviceMemoryProbe>> probe = DeviceMemoryProbe::open(device.pci_bus_id);
  if (probe.is_ok()) {
    probe_ = std::move(*probe);
  } else {
    spdlog::warn("device memory from NVML is not shown: {}", probe.status().message());
  }
}

void TrainDeviceRates::fill(model::StepMetrics& metrics, double step_s) const {
  if (!gpu_) return;
  const model::ComputeRates rates =
      model::step_compute_rates(flops_per_step_, step_s, peak_ ? std::optional(peak_->tflops) : std::nullopt);
  metrics.tflops = rates.tflops;
  metrics.mfu = rates.mfu;
  if (probe_) {
    StatusOr<DeviceMemory> memory = probe_->read();
    if (memory.is_ok()) metrics.device_used_bytes = memory->used;
  }
}

std::optional<double> TrainDeviceRates::run_mfu(uint64_t steps, double seconds) const {
  if (!gpu_ || !peak_) return std::nullopt;
  return model::step_compute_rates(flops_per_step_ * double(steps), seconds, peak_->tflops).mfu;
}

}  // namespace strata::model
