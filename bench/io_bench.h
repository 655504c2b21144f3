// `strata bench io`: sequential O_DIRECT read and write throughput of strata's I/O engine over a
// sweep of block sizes and queue depths, with fio run on the same file with the same block size,
// queue depth, direct I/O and io_uring engine, interleaved point by point, and -- given several
// paths -- the NVMe store striped over all of them against the first path alone. Reports GB/s,
// IOPS and completion-latency percentiles as a table, CSV, JSON and (gnuplot) a PNG.
// Not a random-I/O or mixed-workload benchmark. Runs one point at a time; not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "offload/io_engine.h"
#include "offload/io_engine_factory.h"
#include "runtime/status.h"

namespace strata::bench {

struct IoBenchOptions {
  std::vector<std::string> paths;                           // directories; the first holds the file
  uint64_t size = 1ull << 30;                               // bytes of the test file
  std::vector<uint64_t> blocks = {128 << 10, 1 << 20, 8 << 20};
  std::vector<uint32_t> queue_depths = {1, 8, 32};
  std::vector<IoOp> modes = {IoOp::read, IoOp::write};
  IoEngineKind engine = IoEngineKind::auto_select;
  bool fio = true;                // run fio where it is installed
  std::string fio_binary = "fio";
  int repeat = 1;                 // runs per point and tool; the median is kept
  bool huge_pages = true;         // strata's buffers on transparent huge pages (its default); false:
                                  // 4 KiB pages, the same memory fio's default malloc gets
  // Called with (points done, points in all, what runs now).
  std::function<void(size_t done, size_t total, const std::string& what)> progress;
};

struct IoSample {
  double gbps = 0;    // 1e9 bytes per second
  double iops = 0;
  double p50_us = 0;  // completion latency of one block
  double p99_us = 0;
};

struct IoBenchPoint {
  IoOp mode = IoOp::read;
  uint64_t block_bytes = 0;
  uint32_t queue_depth = 0;
  IoSample strata;
  std::optional<IoSample> fio;
};

struct StripePoint {
  IoOp mode = IoOp::read;
  uint64_t block_bytes = 0;
  uint32_t queue_depth = 0;
  uint32_t paths = 0;
  double one_path_gbps = 0;
  double striped_gbps = 0;
};

struct IoBenchReport {
  std::string engine;           // the engine strata used
  bool huge_pages = true;       // strata's buffers were on transparent huge pages
  std::string fallback_reason;  // why not io_uring, when auto fell back
  // The test file, in a run directory of its own under paths[0] (offload/run_dir.h); both are
  // removed when the bench returns, and `strata clean` removes those of a killed bench.
  std::string file;
  uint64_t size = 0;
  std::string fio_version;      // empty: fio did not run
  std::string fio_missing;      // why fio did not run
  std::string fio_iomem;        // fio's --iomem: "mmaphuge:<hugetlbfs>/..." or "malloc"
  std::string fio_iomem_note;   // when fio's memory differs from strata's: why, and how to match
  std::vector<IoBenchPoint> points;
  std::vector<StripePoint> striping;
};

// Sequential bandwidth of the NVMe store (offload/nvme_store.h) striped over `paths`, as a run's
// swap files see it: `size` bytes (rounded down to whole extents) of 64 MiB extents (one extent
// when `size` is smaller), four in flight, written, then (`read_back`) read back, O_DIRECT, through
// an engine built from `ec`. The store's swap files are removed before it returns. Used by the
// striping points below and by `strata train --bench`.
struct StoreBandwidth {
  double write_gbps = 0;  // 1e9 bytes per second
  double read_gbps = 0;   // 0 without read_back
  uint64_t bytes = 0;     // bytes moved each way
  std::string engine;     // the engine the store used
  std::string fallback_reason;  // why auto did not take io_uring
};
StatusOr<StoreBandwidth> measure_store_bandwidth(const IoEngineConfig& ec, const std::vector<std::string>& paths,
                                                 uint64_t size, uint64_t stripe_unit, bool read_back = true);

StatusOr<IoBenchReport> run_io_bench(const IoBenchOptions& options);

std::string io_bench_table(const IoBenchReport& report);
std::string io_bench_csv(const IoBenchReport& report);
// {"engine": ..., "points": [{"mode", "block_bytes", "queue_depth", "strata_gbps", "strata_iops",
//  "strata_p50_us", "strata_p99_us", "fio_gbps", ...}], "striping": [...]}
std::string io_bench_json(const IoBenchReport& report);
// Runs gnuplot on `csv_path` to draw GB/s against block size; unavailable when gnuplot is missing.
Status io_bench_plot(const std::string& csv_path, const std::string& png_path);

}  // namespace strata::bench
