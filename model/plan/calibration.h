// The calibration cache: rates measured on a machine -- PCIe H2D/D2H, NVMe read/write per path,
// CPU AdamW parameters/s, device FLOP/s per precision -- kept in a small versioned JSON file so the
// planner (planner.h) predicts with this machine's figures instead of assumed defaults. Each rate
// says when and by which command it was measured; a machine's rates sit under its fingerprint (CPU
// model, logical CPUs, RAM, GPUs), and an NVMe rate names the disk and filesystem of its path, so
// the rates of another machine or of another disk are never taken for this one. The file, its
// checks and the choice of rates for a run; not the measuring (bench/, tools/strata/calibration_record.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/status.h"

namespace strata::model {

// The file's "format" and "version". A file of another version is failed_precondition (read it
// again after measuring: recording replaces it); anything else unreadable is corruption.
inline constexpr std::string_view kCalibrationFormat = "strata calibration";
inline constexpr int kCalibrationVersion = 1;

struct GpuFingerprint {
  std::string name;           // "NVIDIA H100 80GB HBM3"
  uint64_t memory_bytes = 0;  // total device memory
};

// What makes rates of one machine wrong for another. RAM and GPU memory compare within 2% (the
// kernel's reservations move MemTotal by a few MB between boots).
struct MachineFingerprint {
  std::string cpu;        // "AMD EPYC 9654 96-Core Processor"
  int logical_cpus = 0;   // the CPUs this process may run on
  uint64_t ram_bytes = 0; // MemTotal
  std::vector<GpuFingerprint> gpus;  // every visible CUDA device, in order; empty: none
};

// This machine's (hwloc's topology, the visible CUDA devices). internal when hwloc cannot load.
StatusOr<MachineFingerprint> this_machine();
// "AMD EPYC 9654 96-Core Processor, 2 CPUs, 23.4 GiB RAM, no GPU".
std::string describe_fingerprint(const MachineFingerprint& machine);
// The first difference, in words ("the CPU is X here but Y in the file"); "" when they match.
std::string fingerprint_difference(const MachineFingerprint& here, const MachineFingerprint& file);

// One measured rate. `rate` is one of kRateNames; the qualifiers that apply to it say what it was
// measured on, and a later measurement with the same rate and qualifiers replaces it (same_slot).
struct CalibrationRate {
  std::string rate;             // "pcie_h2d", "pcie_d2h", "nvme_read", "nvme_write", "adam", "flops"
  double value = 0;             // bytes/s (pcie, nvme), parameters/s (adam), FLOP/s (flops)
  std::string backend, device;  // pcie, flops: "cuda" or "cpu", and the device's name
  std::string precision;        // flops: fp32, tf32, bf16 or fp16
  std::string states;           // adam: fp32 or 8bit (the moments)
  int threads = 0;              // adam: the threads it ran on
  std::string path, disk, filesystem;  // nvme: the directory, its block device ("" when none), its filesystem
  std::string measured_at;      // UTC, "2025-06-01T12:00:00Z"
  std::string by;               // the command that measured it: "strata bench io", "strata plan --calibrate"
  std::string how;              // what was measured, in words ("best of 2 points: 8 MiB blocks, QD 16, ...")
};
inline constexpr std::array<std::string_view, 6> kRateNames = {"pcie_h2d", "pcie_d2h", "nvme_read",
                                                                "nvme_write", "adam",     "flops"};
bool same_slot(const CalibrationRate& a, const CalibrationRate& b);

struct MachineRates {
  MachineFingerprint machine;
  std::vector<CalibrationRate> rates;
};

// The file: the rates of every machine that recorded into it (a home directory shared by several
// machines holds one entry each).
struct CalibrationCache {
  std::vector<MachineRates> machines;
};

// corruption naming `path` and what is wrong (not JSON, not a calibration file, a rate without its
// value, date or qualifiers, an unknown rate); failed_precondition for another version.
StatusOr<CalibrationCache> parse_calibration(std::string_view text, const std::string& path);
std::string calibration_json(const CalibrationCache& cache);  // version kCalibrationVersion, indented
// The file at `path`; nullopt when there is none. Errors: parse_calibration's, and the errno of a
// file that cannot be read.
StatusOr<std::optional<CalibrationCache>> read_calibration(const std::string& path);
// Writes atomically (a temporary file beside it renamed over the old one: a reader never sees half
// a file), making the directory when missing.
Status write_calibration(const std::string& path, const CalibrationCache& cache);

// Adds `rates` to the entry of `machine` (made when none matches; each replaces the rate of its slot).
void record_rates(CalibrationCache& cache, const MachineFingerprint& machine, const std::vector<CalibrationRate>& rates);
// The entry that matches `machine`, or null.
const MachineRates* rates_of(const CalibrationCache& cache, const MachineFingerprint& machine);

// $XDG_CACHE_HOME/strata/calibration.json, else $HOME/.cache/strata/calibration.json; "" when
// neither variable is set (either may be null or empty).
std::string default_calibration_path(const char* xdg_cache_home, const char* home);
// The time now as measured_at has it.
std::string utc_timestamp();

// The planner's rates (PlanRates), in the order of the `rate_*` keys.
enum class PlanRateKind : uint8_t { flops, pcie, nvme_read, nvme_write, adam };
inline constexpr size_t kPlanRateKinds = 5;
std::string_view plan_rate_key(PlanRateKind kind);  // "rate_flops", "rate_pcie", ...

// "fp32", "tf32" (fp32 with TF32 GEMMs), "bf16", "fp16": the flops precision of a run.
std::string_view flops_precision(DType dtype, bool tf32);

// A run's directory for swap files as it is now (runtime/fs_probe.h's block device and filesystem).
struct NvmeDisk {
  std::string path, disk, filesystem;
};

// What a run needs rates for.
struct RateQuery {
  std::string backend;        // "cuda" or "cpu": the backend the run uses
  std::string device;         // cuda: the GPU's name (a CPU backend's figures are the machine's)
  std::string precision;      // flops_precision
  std::string states;         // "fp32" or "8bit"
  std::vector<NvmeDisk> nvme; // the run's --nvme-path directories
};

struct CachedRate {
  double value = 0;    // in PlanRates's unit
  std::string source;  // "measured 2025-06-01 by strata bench io"
};
struct CachedRates {
  std::array<std::optional<CachedRate>, kPlanRateKinds> rates;  // nullopt: nothing measured applies
  std::vector<std::string> notes;  // measurements passed over, and why (another disk now, a path never measured)
};

// The rates of `rates` (one machine's) that apply to `query`: flops of its backend, device and
// precision; pcie the slower of H2D and D2H of its backend and device; adam of its moments; NVMe
// read and write summed over the query's disks (paths on one disk count once), each disk's from a
// measurement of that path, or of another path on the same disk, and only when every path has
// one. A path measured on another disk or filesystem than it is on now is passed over with a note.
CachedRates cached_rates(const std::vector<CalibrationRate>& rates, const RateQuery& query);

}  // namespace strata::model
