// What a training run reports: the per-step record (StepMetrics), the --metrics file that keeps
// one JSON object per step (MetricsLog), the human progress line and the end-of-run summary.
// Not the measuring itself (the trainer times steps and reads the tier peaks and NVML) and not
// logging: the caller prints the strings (spdlog::info).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/status.h"

namespace strata::model {

// Bytes in each memory tier. "gpu" is the device arena (host memory under the CPU backend).
struct TierBytes {
  uint64_t gpu = 0;
  uint64_t cpu = 0;   // pinned host memory
  uint64_t nvme = 0;  // swap space in use on the NVMe paths
};

// The traffic of one step between the tiers (offload/tier_manager.h, gradient_offloader.h), as
// rates over the step's wall time, and the time the compute stood waiting for weights that had
// not arrived when it needed them.
struct TransferMetrics {
  double h2d_gbps = 0;         // weights fetched into device slots (GB/s = 1e9 bytes/s)
  double d2h_gbps = 0;         // gradients streamed to the host
  double nvme_read_gbps = 0;   // weights read from NVMe
  double nvme_write_gbps = 0;  // updated weights written to NVMe
  double wait_s = 0;           // compute waiting for transfers, seconds of the step
  double wait_fraction = 0;    // wait_s / step_s
};

struct StepMetrics {
  uint64_t step = 0;          // 1-based: the number of optimizer steps done, this one included
  double loss = 0;            // mean training loss over the step's micro-batches
  double lr = 0;              // learning rate the step used
  double tokens_per_s = 0;    // training tokens of this step / step_s
  double step_s = 0;          // wall seconds of the step
  TierBytes bytes;            // in use at the end of the step
  TierBytes peak_bytes;       // peak since the start of the run
  std::optional<double> val_loss;       // on evaluation steps
  std::optional<double> grad_norm;      // global L2 norm before clipping
  std::optional<double> loss_scale;     // fp16: the scale the step used
  bool skipped = false;                 // fp16: the update was skipped (non-finite gradients)
  std::optional<double> tflops;         // GPU: achieved TFLOP/s of the step
  std::optional<double> mfu;            // GPU: model FLOPs utilisation, a fraction in [0, 1]
  std::optional<uint64_t> device_used_bytes;  // GPU: device memory in use as NVML reports it
  std::optional<TransferMetrics> transfers;   // weights paged (--offload-param) or gradients streamed
};

// The --metrics file: one JSON object per line, written and flushed per step, so a crash loses
// at most the line being written. Fields: step, loss, lr, tokens_per_s, step_s, peak_bytes
// {"gpu", "cpu", "nvme"} always; val_loss, grad_norm, loss_scale, tflops, mfu, device_used_bytes,
// transfers {"h2d_gbps", "d2h_gbps", "nvme_read_gbps", "nvme_write_gbps", "wait_s",
// "wait_fraction"} when set; skipped when true. Non-finite numbers (a diverged loss) are written as null.
// Movable, not copyable; not thread-safe (one trainer thread writes).
class MetricsLog {
 public:
  enum class Mode : uint8_t { truncate, append };  // append: continue a resumed run's file

  // Opens (creates) `path`. Errors name the path (errno_status: not_found for a missing
  // directory, permission_denied, ...).
  static StatusOr<MetricsLog> open(const std::string& path, Mode mode = Mode::truncate);

  MetricsLog(MetricsLog&& other) noexcept;
  MetricsLog& operator=(MetricsLog&& other) noexcept;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  ~MetricsLog();

  // Appends one line and flushes it to the kernel. io_error / no_space naming the path.
  Status write(const StepMetrics& metrics);
  const std::string& path() const { return path_; }

 private:
  MetricsLog(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  std::FILE* file_ = nullptr;
  std::string path_;
};

// Before a resumed run appends to `path`: keeps only the lines of steps <= `step` (what the
// checkpoint it resumes from had done), so steps trained after that checkpoint by the killed run
// are not repeated; a line cut short by the kill, which does not parse, goes too. The file is
// rewritten atomically (temporary file, fsync, rename) when anything is dropped; a missing file
// is left missing. Returns the lines dropped; errno errors name the path.
StatusOr<uint64_t> truncate_metrics_after(const std::string& path, uint64_t step);

// Appends `line` and a newline to `path` (the --metrics file after its last step line: the bench
// and prediction lines). errno errors name the path.
Status append_line(const std::string& path, const std::string& line);

// The JSON object of one line, as a string without the newline.
std::string metrics_json_line(const StepMetrics& metrics);

// The step rows of a --metrics file, in file order: the lines with a "step" and a "loss" (the
// prediction and --bench rows that end a run are skipped). Each gets step, loss, lr, tokens_per_s,
// step_s, peak_bytes and the optional val_loss and grad_norm; a null number (a diverged loss) reads
// as NaN. A last line cut short (a run killed while writing it) is skipped; any other line that is
// not a JSON object, or a step row whose fields have the wrong types, is invalid_argument naming the
// file and line. A missing file is not_found; a file without step rows is invalid_argument saying
// it is not a `strata train --metrics` file.
StatusOr<std::vector<StepMetrics>> read_metrics_file(const std::string& path);

// The device tier's name in the lines below: "gpu" when it is a GPU's memory, "device (cpu
// backend)" when it is the CPU backend's arena, which is host memory standing in for a GPU's.
inline constexpr std::string_view kGpuTierLabel = "gpu";
inline constexpr std::string_view kCpuBackendTierLabel = "device (cpu backend)";

// "step   12/200 | loss 3.4512 | lr 6.00e-04 | 12.3K tok/s | 0.083 s | gpu 41 MiB (peak 52 MiB)",
// then per set field: " | val 3.2100", " | norm 0.912", " | scale 65536", " | skipped",
// " | 45.2 TFLOP/s | MFU 38.1%", " | nvml 10.2 GiB". The cpu and nvme tiers appear when their
// peak is not 0. The step is right-aligned to the width of total_steps. `device_label` names the
// device tier (kGpuTierLabel or kCpuBackendTierLabel).
std::string format_progress_line(const StepMetrics& metrics, uint64_t total_steps,
                                 std::string_view device_label = kGpuTierLabel);

// A terminal's live line (runtime/status_line.h), within 80 columns for runs up to 9999 steps:
// " 120/1000 [#.........]  12%  loss 2.9134  41.2K tok/s  ETA 0:27", then "  val 2.4012" when
// `val_loss` is set (the latest evaluation's). ETA "?" while unknown.
std::string format_live_line(const StepMetrics& metrics, uint64_t total_steps, std::optional<double> eta_s,
                             std::optional<double> val_loss);

// "0:27", "12:05", "1:02:03" (h:mm:ss past an hour); seconds rounded, negative as 0.
std::string format_duration(double seconds);

// What the end-of-run summary is made of; the trainer accumulates it.
struct RunSummary {
  uint64_t steps = 0;            // optimizer steps done in this run
  uint64_t tokens = 0;           // training tokens processed in this run
  double seconds = 0;            // wall time of the training loop
  double first_loss = 0;
  double last_loss = 0;
  std::optional<double> last_val_loss;
  uint64_t last_val_step = 0;    // the step of last_val_loss
  uint64_t skipped_steps = 0;    // updates skipped for non-finite gradients (fp16 overflows)
  TierBytes peak_bytes;
  std::optional<double> mean_mfu;  // GPU only
  std::string_view device_label = kGpuTierLabel;  // the device tier's name (format_progress_line)
};

// Lines without a trailing newline, e.g.
//   "trained 200 steps in 41.3 s: 51.2K tokens at 1.24K tok/s"
//   "loss 5.5452 -> 2.3110, val 2.4012 at step 200"
//   "peak memory: gpu 52 MiB, cpu 310 MiB, nvme 0 B" ("device (cpu backend) 52 MiB" on the CPU backend)
// plus "skipped 3 updates (non-finite gradients)" and "mean MFU 38.1%" when they apply.
std::string format_run_summary(const RunSummary& summary);

}  // namespace strata::model
