// TensorBoardWriter: a run's scalars as a TensorBoard event file, what DeepSpeed's `tensorboard`
// config block gives (enabled, output_path, job_name): `tensorboard --logdir OUTPUT_PATH` shows
// the run as JOB_NAME. Each record is an Event protocol buffer (model/train/tensorboard_event.proto,
// serialized by libprotobuf) in TFRecord framing -- little-endian length, masked CRC-32C of the
// length, the bytes, masked CRC-32C of the bytes (kernels/cpu/crc32c) -- the first holding the
// file version, each later one a step's scalars. Written and flushed per step, so a crash loses at
// most the record being written. Not thread-safe (the training loop's thread writes); movable.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/train/metrics_log.h"
#include "runtime/status.h"

namespace strata::model {

// TFRecord's masked CRC-32C of `n` bytes: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t tfrecord_masked_crc(const void* data, size_t n);

// One TFRecord record around `payload`: 8-byte little-endian length, its masked CRC, the payload,
// the payload's masked CRC.
std::string tfrecord_frame(std::string_view payload);

class TensorBoardWriter {
 public:
  // Creates OUTPUT_PATH/JOB_NAME (parents included; `output_path` "" is the working directory)
  // and in it "events.out.tfevents.<unix seconds>.<host>.<pid>", TensorBoard's naming, with the
  // file-version record. Errors name the directory or file (errno_status).
  static StatusOr<TensorBoardWriter> open(const std::string& output_path, const std::string& job_name);

  TensorBoardWriter(TensorBoardWriter&& other) noexcept;
  TensorBoardWriter& operator=(TensorBoardWriter&& other) noexcept;
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  ~TensorBoardWriter();

  // One Event at `step` holding each (tag, value) as a simple_value, written and flushed.
  // io_error / no_space naming the file.
  Status write_scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values);

  // A training step's scalars, as DeepSpeed names them and at its x axis, the samples trained so
  // far (step x `samples_per_step`): "Train/Samples/train_loss", "Train/Samples/lr",
  // "Train/Samples/loss_scale" (fp16), and strata's own beside them: "Train/Samples/val_loss",
  // "Train/Samples/tokens_per_s", "Train/Samples/grad_norm", "Train/Samples/device_peak_mib",
  // "Train/Samples/pinned_peak_mib", "Train/Samples/nvme_peak_mib" (each when the step has it;
  // non-finite values are left out, as TensorBoard cannot draw them).
  Status write_step(const StepMetrics& metrics, uint64_t samples_per_step);

  const std::string& path() const { return path_; }  // the event file
  const std::string& log_dir() const { return log_dir_; }  // OUTPUT_PATH/JOB_NAME

 private:
  TensorBoardWriter(std::FILE* file, std::string path, std::string log_dir)
      : file_(file), path_(std::move(path)), log_dir_(std::move(log_dir)) {}
  Status write_record(const std::string& serialized_event);

  std::FILE* file_ = nullptr;
  std::string path_;
  std::string log_dir_;
};

}  // namespace strata::model
