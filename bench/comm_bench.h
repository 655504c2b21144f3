// `strata bench comm`: the collectives a scale-out run moves its chunks with (runtime/communicator.h)
// -- all-gather, reduce-scatter, all-reduce, all-to-all -- timed across the ranks mpirun started
// (MPI on the CPU backend, NCCL on CUDA; NCCL also at a world of one when asked for),
// over message sizes, in NCCL-tests' terms: time, algorithm bandwidth (size / time) and bus
// bandwidth (algbw x the op's factor, what each rank's link carries; comparable across world sizes
// and with the link's rate). Each (op, size) is checked on every rank first, then timed. Every rank
// runs the same calls; rank 0 prints. Not a point-to-point or latency test, and not the training
// step's traffic (that is the partitioned chunk source's, once built).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/bench_util.h"
#include "runtime/backend.h"
#include "runtime/communicator.h"
#include "runtime/status.h"

namespace strata::bench {

enum class CommOp : uint8_t { all_gather, reduce_scatter, all_reduce, all_to_all };
std::string_view comm_op_name(CommOp op);  // "all-gather", "reduce-scatter", "all-reduce", "all-to-all"
// The op `name` spells (comm_op_name's spellings); invalid_argument naming it and the choices.
StatusOr<CommOp> parse_comm_op(std::string_view name);

// NCCL-tests' bus bandwidth factor at `ranks` ranks (doc/PERFORMANCE.md there): (n-1)/n for
// all-gather, reduce-scatter and all-to-all, 2(n-1)/n for all-reduce (a reduce-scatter then an
// all-gather). 0 at one rank: nothing crosses a link.
double comm_bus_factor(CommOp op, int ranks);

// A point's size is the whole buffer of the collective, as NCCL-tests counts it: the gathered
// output of all-gather, the scattered input of reduce-scatter, the vector of all-reduce, the n
// blocks each rank sends in all-to-all. It is rounded down to a multiple of 4 x ranks bytes (fp32
// shards of equal size); 0 after rounding is invalid_argument.
uint64_t comm_point_bytes(uint64_t size, int ranks);

struct CommBenchOptions {
  std::vector<CommOp> ops = {CommOp::all_gather, CommOp::reduce_scatter, CommOp::all_reduce, CommOp::all_to_all};
  std::vector<uint64_t> sizes = {64ull << 10, 1ull << 20, 16ull << 20, 256ull << 20};
  int repeat = 5;  // timed runs per point (median, min, max of the slowest rank's time)
  int warmup = 1;  // untimed runs per point, after the check
  std::function<void(size_t done, size_t total, const std::string& what)> progress;  // rank 0's calls only
};

// Bytes of `backend` memory run_comm_bench allocates for `options` at `ranks` ranks (the memory
// budget a caller gives the backend it makes for the bench). On the CUDA backend, also the NCCL
// communicator's: its ordered sums' scratch (one point's size at most) and its barrier words.
uint64_t comm_bench_memory(const CommBenchOptions& options, int ranks, BackendKind kind = BackendKind::cpu);

struct CommPoint {
  CommOp op = CommOp::all_gather;
  uint64_t bytes = 0;    // the collective's size (comm_point_bytes)
  Spread seconds;        // per run, the slowest rank's time from its barrier exit to its completion
  double algbw_gbps = 0;  // bytes / median seconds / 1e9
  double busbw_gbps = 0;  // algbw x comm_bus_factor
};

struct CommBenchReport {
  int rank = 0, ranks = 1;
  std::string communicator;  // Communicator::name(): "local", "mpi", "nccl"
  std::string backend;       // "cpu", "cuda"
  std::vector<std::string> notes;  // the world of one, rounded sizes
  int repeat = 0;
  std::vector<CommPoint> points;  // every rank holds the same figures
};

// Runs on every rank of `comm` with the same options (checked: a rank given other flags is
// invalid_argument naming it, on every rank). Buffers come from `backend`, which must be the one
// `comm` queues on. A check that fails on any rank is `internal` naming the op, size and ranks, on
// every rank; a failing collective (a dead peer) is the communicator's error, which leaves `comm`
// broken (Communicator::synchronize returns it): exit the world then (abort_mpi_world).
// invalid_argument for bad options (no ops or sizes, repeat < 1, warmup < 0, a size too small).
StatusOr<CommBenchReport> run_comm_bench(Backend& backend, Communicator& comm, const CommBenchOptions& options);

// The report as rank 0 prints it: a header (ranks, communicator, backend, notes), then one row per
// point: "op size time_us min_us max_us algbw_GB/s busbw_GB/s" (GB = 1e9 B).
std::string comm_bench_table(const CommBenchReport& report);

}  // namespace strata::bench
