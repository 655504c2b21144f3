// `strata bench comm` (see comm_bench.h): per (op, size), a check on every rank with values whose
// sums are exact in any order, untimed warmups, then timed runs each started from a barrier; the
// ranks' times are gathered so every rank reports the slowest rank's.
#include "bench/comm_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "runtime/align.h"
#include "runtime/units.h"

namespace strata::bench {
namespace {

constexpr Stream kCommStream = Stream::compute;  // the collectives and the check's copies, in order
constexpr uint64_t kSliceFloats = uint64_t{1} << 20;  // the check's host bounce buffer (4 MiB)

// The check's values, exact in fp32 (below 2^24; sums of at most 2^20 ranks of values below 16).
float gathered_value(int rank, uint64_t i) { return static_cast<float>((rank * 1031ull + i) % 65521); }
float block_value(int from, int to, uint64_t i) { return static_cast<float>((from * 131ull + to * 17ull + i) % 65521); }
float summand(int rank, int shard, uint64_t i) { return static_cast<float>((rank + 3ull * shard + i) % 16); }
float sum_over_ranks(int ranks, int shard, uint64_t i) {
  float acc = 0;
  for (int r = 0; r < ranks; ++r) acc += summand(r, shard, i);
  return acc;
}

// The bench's buffers on `backend`: two of the largest point's size, and the small one the ranks'
// flags and times are gathered through (n + 1 slots of `slot_words` 64-bit words).
struct Buffers {
  char* send = nullptr;
  char* recv = nullptr;
  uint64_t* ctl = nullptr;
  uint64_t slot_words = 0;
};

uint64_t ctl_words(int repeat) { return static_cast<uint64_t>(std::max(repeat, 1)); }

class CommBench {
 public:
  CommBench(Backend& backend, Communicator& comm, const CommBenchOptions& options)
      : backend_(backend), comm_(comm), options_(options), n_(comm.size()), me_(comm.rank()) {}

  ~CommBench() {
    (void)backend_.synchronize(kCommStream);
    for (void* p : {static_cast<void*>(buf_.send), static_cast<void*>(buf_.recv), static_cast<void*>(buf_.ctl)})
      if (p != nullptr) (void)backend_.release(p);
  }

  StatusOr<CommBenchReport> run() {
    STRATA_RETURN_IF_ERROR(check_options());
    CommBenchReport report;
    report.rank = me_;
    report.ranks = n_;
    report.communicator = std::string(comm_.name());
    report.backend = std::string(backend_kind_name(backend_.kind()));
    report.repeat = options_.repeat;
    if (n_ == 1 && comm_.name() == "local")
      report.notes.push_back(
          "a world of one (not started by mpirun, or -np 1): the local communicator's collectives are copies "
          "within this process and cross no link, so bus bandwidth is 0 by definition; run `mpirun -np N strata "
          "bench comm` for the collectives between ranks");
    else if (n_ == 1)
      report.notes.push_back(fmt::format(
          "a world of one: {}'s collectives run on this one device and cross no link, so bus bandwidth is 0 by "
          "definition; algbw is what one rank's calls cost (the device copy, and for reduce-scatter and all-reduce "
          "the ordered sum's kernel)", comm_.name()));
    uint64_t largest = 0;
    for (uint64_t size : options_.sizes) {
      const uint64_t bytes = comm_point_bytes(size, n_);
      if (bytes != size)
        report.notes.push_back(fmt::format("size {} B rounded down to {} B (a multiple of 4 x {} ranks)", size, bytes, n_));
      largest = std::max(largest, bytes);
    }
    STRATA_RETURN_IF_ERROR(allocate(largest));
    STRATA_RETURN_IF_ERROR(check_same_flags());

    const size_t total = options_.ops.size() * options_.sizes.size();
    for (CommOp op : options_.ops) {
      for (uint64_t size : options_.sizes) {
        const uint64_t bytes = comm_point_bytes(size, n_);
        if (me_ == 0 && options_.progress)
          options_.progress(report.points.size(), total, fmt::format("{} of {}", comm_op_name(op), format_size(bytes)));
        STRATA_ASSIGN_OR_RETURN(CommPoint point, measure(op, bytes));
        report.points.push_back(point);
      }
    }
    if (me_ == 0 && options_.progress) options_.progress(total, total, "done");
    return report;
  }

 private:
  Status check_options() const {
    if (options_.ops.empty()) return error(Code::invalid_argument, "bench comm: no collective to time (--op)");
    if (options_.sizes.empty()) return error(Code::invalid_argument, "bench comm: no size to time (--size)");
    if (options_.repeat < 1) return error(Code::invalid_argument, "bench comm: --repeat {}: must be >= 1", options_.repeat);
    if (options_.warmup < 0) return error(Code::invalid_argument, "bench comm: --warmup {}: must be >= 0", options_.warmup);
    for (uint64_t size : options_.sizes)
      if (comm_point_bytes(size, n_) == 0)
        return error(Code::invalid_argument, "bench comm: --size {} B is below 4 x {} ranks = {} B (one fp32 a rank)",
                     size, n_, 4 * n_);
    return Status::ok();
  }

  Status allocate(uint64_t largest) {
    STRATA_ASSIGN_OR_RETURN(void* send, backend_.allocate(largest, "bench comm send"));
    buf_.send = static_cast<char*>(send);
    STRATA_ASSIGN_OR_RETURN(void* recv, backend_.allocate(largest, "bench comm recv"));
    buf_.recv = static_cast<char*>(recv);
    buf_.slot_words = ctl_words(options_.repeat);
    STRATA_ASSIGN_OR_RETURN(void* ctl, backend_.allocate((n_ + 1) * buf_.slot_words * 8, "bench comm gather"));
    buf_.ctl = static_cast<uint64_t*>(ctl);
    return Status::ok();
  }

  // Every rank's `mine` (the same length on every rank, at most slot_words), rank by rank.
  StatusOr<std::vector<uint64_t>> gather(const std::vector<uint64_t>& mine) {
    const uint64_t bytes = mine.size() * 8;
    std::vector<uint64_t> all(mine.size() * n_);
    uint64_t* slot = buf_.ctl + n_ * buf_.slot_words;
    STRATA_RETURN_IF_ERROR(backend_.copy_to_device(slot, mine.data(), bytes, kCommStream));
    STRATA_RETURN_IF_ERROR(comm_.all_gather(slot, buf_.ctl, bytes, kCommStream));
    STRATA_RETURN_IF_ERROR(backend_.copy_to_host(all.data(), buf_.ctl, bytes * n_, kCommStream));
    STRATA_RETURN_IF_ERROR(comm_.synchronize(kCommStream));
    return all;
  }

  // The ranks where `failed` is true, as "1, 3"; empty when none.
  StatusOr<std::string> ranks_where(bool failed) {
    STRATA_ASSIGN_OR_RETURN(std::vector<uint64_t> flags, gather({failed ? 1u : 0u}));
    std::string ranks;
    for (int r = 0; r < n_; ++r)
      if (flags[r] != 0) ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", r);
    return ranks;
  }

  // Different flags on different ranks would mean different collectives: a hang, then a timeout
  // that blames the wrong rank. Compared up front instead (FNV-1a of the options).
  Status check_same_flags() {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) {
      for (int b = 0; b < 8; ++b) h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
    };
    for (CommOp op : options_.ops) mix(static_cast<uint64_t>(op));
    for (uint64_t size : options_.sizes) mix(size);
    mix(static_cast<uint64_t>(options_.repeat));
    mix(static_cast<uint64_t>(options_.warmup));
    STRATA_ASSIGN_OR_RETURN(std::vector<uint64_t> all, gather({h}));
    std::string differ;
    for (int r = 1; r < n_; ++r)
      if (all[r] != all[0]) differ += fmt::format("{}{}", differ.empty() ? "" : ", ", r);
    if (!differ.empty())
      return error(Code::invalid_argument,
                   "bench comm: rank{} {} {} given other --op, --size, --repeat or --warmup than rank 0; every rank "
                   "must run the same collectives", differ.find(',') == std::string::npos ? "" : "s", differ,
                   differ.find(',') == std::string::npos ? "was" : "were");
    return Status::ok();
  }

  Status issue(CommOp op, uint64_t bytes) {
    switch (op) {
      case CommOp::all_gather:
        return comm_.all_gather(buf_.send, buf_.recv, bytes / n_, kCommStream);
      case CommOp::reduce_scatter:
        return comm_.reduce_scatter(reinterpret_cast<const float*>(buf_.send), reinterpret_cast<float*>(buf_.recv),
                                    bytes / 4 / n_, kCommStream);
      case CommOp::all_reduce:
        return comm_.all_reduce(reinterpret_cast<const float*>(buf_.send), reinterpret_cast<float*>(buf_.recv),
                                bytes / 4, kCommStream);
      case CommOp::all_to_all:
        return comm_.all_to_all(buf_.send, buf_.recv, bytes / n_, kCommStream);
    }
    return error(Code::internal, "bench comm: unknown op {}", static_cast<int>(op));
  }

  // What this rank sends as element i of its send buffer, and expects as element i of its recv
  // buffer, for `op` at `count` fp32 elements in all.
  float sent(CommOp op, uint64_t count, uint64_t i) const {
    const uint64_t block = count / n_;
    switch (op) {
      case CommOp::all_gather: return gathered_value(me_, i);
      case CommOp::reduce_scatter: return summand(me_, static_cast<int>(i / block), i % block);
      case CommOp::all_reduce: return summand(me_, 0, i);
      case CommOp::all_to_all: return block_value(me_, static_cast<int>(i / block), i % block);
    }
    return 0;
  }
  float expected(CommOp op, uint64_t count, uint64_t i) const {
    const uint64_t block = count / n_;
    switch (op) {
      case CommOp::all_gather: return gathered_value(static_cast<int>(i / block), i % block);
      case CommOp::reduce_scatter: return sum_over_ranks(n_, me_, i);
      case CommOp::all_reduce: return sum_over_ranks(n_, 0, i);
      case CommOp::all_to_all: return block_value(static_cast<int>(i / block), me_, i % block);
    }
    return 0;
  }

  // Fills the send buffer, runs `op` once and compares the recv buffer on every rank, through a
  // host buffer of kSliceFloats; the ranks then agree on the outcome.
  Status check(CommOp op, uint64_t bytes) {
    const uint64_t count = bytes / 4;
    const uint64_t send_count = op == CommOp::all_gather ? count / n_ : count;
    const uint64_t recv_count = op == CommOp::reduce_scatter ? count / n_ : count;
    std::vector<float> host(std::min(kSliceFloats, count));
    for (uint64_t at = 0; at < send_count; at += host.size()) {
      const uint64_t k = std::min<uint64_t>(host.size(), send_count - at);
      for (uint64_t i = 0; i < k; ++i) host[i] = sent(op, count, at + i);
      STRATA_RETURN_IF_ERROR(backend_.copy_to_device(buf_.send + at * 4, host.data(), k * 4, kCommStream));
      STRATA_RETURN_IF_ERROR(backend_.synchronize(kCommStream));  // `host` is refilled next
    }
    STRATA_RETURN_IF_ERROR(issue(op, bytes));
    std::string wrong;
    for (uint64_t at = 0; at < recv_count && wrong.empty(); at += host.size()) {
      const uint64_t k = std::min<uint64_t>(host.size(), recv_count - at);
      STRATA_RETURN_IF_ERROR(backend_.copy_to_host(host.data(), buf_.recv + at * 4, k * 4, kCommStream));
      STRATA_RETURN_IF_ERROR(comm_.synchronize(kCommStream));
      for (uint64_t i = 0; i < k; ++i) {
        const float want = expected(op, count, at + i);
        if (host[i] != want) {
          wrong = fmt::format("element {} is {} instead of {}", at + i, host[i], want);
          break;
        }
      }
    }
    STRATA_ASSIGN_OR_RETURN(std::string failed, ranks_where(!wrong.empty()));
    if (!failed.empty())
      return error(Code::internal, "bench comm: {} of {} B gave wrong data on rank(s) {}{}", comm_op_name(op), bytes,
                   failed, wrong.empty() ? "" : fmt::format(" (here, rank {}: {})", me_, wrong));
    return Status::ok();
  }

  StatusOr<CommPoint> measure(CommOp op, uint64_t bytes) {
    STRATA_RETURN_IF_ERROR(check(op, bytes));
    for (int w = 0; w < options_.warmup; ++w) STRATA_RETURN_IF_ERROR(issue(op, bytes));
    std::vector<uint64_t> mine;  // this rank's seconds per run, as bits
    for (int run = 0; run < options_.repeat; ++run) {
      STRATA_RETURN_IF_ERROR(comm_.barrier(kCommStream));
      STRATA_RETURN_IF_ERROR(comm_.synchronize(kCommStream));
      const auto t0 = std::chrono::steady_clock::now();
      STRATA_RETURN_IF_ERROR(issue(op, bytes));
      STRATA_RETURN_IF_ERROR(comm_.synchronize(kCommStream));
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      uint64_t b;
      std::memcpy(&b, &seconds, 8);
      mine.push_back(b);
    }
    STRATA_ASSIGN_OR_RETURN(std::vector<uint64_t> all, gather(mine));
    std::vector<double> slowest(options_.repeat, 0.0);
    for (int r = 0; r < n_; ++r)
      for (int run = 0; run < options_.repeat; ++run) {
        double s;
        std::memcpy(&s, &all[static_cast<size_t>(r) * options_.repeat + run], 8);
        slowest[run] = std::max(slowest[run], s);
      }
    CommPoint p;
    p.op = op;
    p.bytes = bytes;
    p.seconds = spread(slowest);
    p.algbw_gbps = p.seconds.median > 0 ? static_cast<double>(bytes) / p.seconds.median / 1e9 : 0;
    p.busbw_gbps = p.algbw_gbps * comm_bus_factor(op, n_);
    return p;
  }

  Backend& backend_;
  Communicator& comm_;
  const CommBenchOptions& options_;
  const int n_, me_;
  Buffers buf_;
};

}  // namespace

std::string_view comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_gather: return "all-gather";
    case CommOp::reduce_scatter: return "reduce-scatter";
    case CommOp::all_reduce: return "all-reduce";
    case CommOp::all_to_all: return "all-to-all";
  }
  return "?";
}

StatusOr<CommOp> parse_comm_op(std::string_view name) {
  for (CommOp op : {CommOp::all_gather, CommOp::reduce_scatter, CommOp::all_reduce, CommOp::all_to_all})
    if (name == comm_op_name(op)) return op;
  return error(Code::invalid_argument, "--op {}: expected all-gather, reduce-scatter, all-reduce or all-to-all", name);
}

double comm_bus_factor(CommOp op, int ranks) {
  const double share = ranks > 0 ? static_cast<double>(ranks - 1) / ranks : 0.0;
  return op == CommOp::all_reduce ? 2 * share : share;
}

uint64_t comm_point_bytes(uint64_t size, int ranks) {
  const uint64_t unit = 4 * static_cast<uint64_t>(std::max(ranks, 1));
  return size / unit * unit;
}

uint64_t comm_bench_memory(const CommBenchOptions& options, int ranks, BackendKind kind) {
  uint64_t largest = 0;
  for (uint64_t size : options.sizes) largest = std::max(largest, comm_point_bytes(size, ranks));
  const uint64_t ctl = (static_cast<uint64_t>(std::max(ranks, 1)) + 1) * ctl_words(options.repeat) * 8;
  // NCCL's scratch holds every rank's contribution to one shard: the point's size, for the
  // reduce-scatter and the all-reduce alike (the sizes are whole shards); its barrier words fit
  // the slack.
  const uint64_t scratch = kind == BackendKind::cuda ? round_up(largest, kHostPage) : 0;
  return 2 * round_up(largest, kHostPage) + scratch + round_up(ctl, kHostPage) + (uint64_t{1} << 20);  // + slack
}

StatusOr<CommBenchReport> run_comm_bench(Backend& backend, Communicator& comm, const CommBenchOptions& options) {
  CommBench bench(backend, comm, options);
  return bench.run();
}

std::string comm_bench_table(const CommBenchReport& r) {
  std::string out = fmt::format("bench comm: {} rank{}, {} communicator on the {} backend\n", r.ranks,
                                r.ranks == 1 ? "" : "s", r.communicator, r.backend);
  for (const std::string& n : r.notes) out += fmt::format("note: {}\n", n);
  out += fmt::format(
      "time: the slowest rank's, from leaving a barrier to the collective's completion; the median of {} runs "
      "(min, max).\nalgbw = bytes / time; busbw = algbw x (n-1)/n (all-gather, reduce-scatter, all-to-all), "
      "x 2(n-1)/n (all-reduce), as NCCL-tests; GB/s = 1e9 B/s.\n",
      r.repeat);
  out += fmt::format("{:<15} {:>12} {:>12} {:>12} {:>12} {:>11} {:>11}\n", "op", "bytes", "time_us", "min_us", "max_us",
                     "algbw_GB/s", "busbw_GB/s");
  for (const CommPoint& p : r.points)
    out += fmt::format("{:<15} {:>12} {:>12.1f} {:>12.1f} {:>12.1f} {:>11.3f} {:>11.3f}\n", comm_op_name(p.op), p.bytes,
                       p.seconds.median * 1e6, p.seconds.min * 1e6, p.seconds.max * 1e6, p.algbw_gbps, p.busbw_gbps);
  return out;
}

}  // namespace strata::bench
