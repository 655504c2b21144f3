// `mpirun -np N strata bench comm [--device cpu|cuda|auto] [--comm auto|nccl]
// [--size 64KiB,1MiB,16MiB,256MiB] [--op all-gather,reduce-scatter,all-reduce,all-to-all]
// [--repeat N] [--warmup N] [--timeout S] [--rendezvous-dir DIR]`: the communicator's collectives timed across the ranks,
// time, algbw and busbw per op and size, printed by rank 0. Without mpirun it runs on a world of
// one and says so (`--comm nccl` makes that one NCCL rank on the GPU). Only flag parsing, the launch
// (backend, communicator) and its errors live here; the benchmark is bench/comm_bench.h.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "bench/bench_util.h"
#include "bench/comm_bench.h"
#include "runtime/communicator.h"
#include "runtime/mpi_communicator.h"
#include "runtime/units.h"
#include "tools/strata/command.h"

namespace strata::cli {
namespace {

struct BenchCommFlags {
  std::string device = "cpu";
  std::string comm = "auto";
  std::vector<std::string> sizes = {"64KiB", "1MiB", "16MiB", "256MiB"};
  std::vector<std::string> ops = {"all-gather", "reduce-scatter", "all-reduce", "all-to-all"};
  int repeat = 5;
  int warmup = 1;
  double timeout = 60;
  std::string rendezvous_dir;  // torchrun-style launches on GPUs (else STRATA_RENDEZVOUS_DIR)
};

StatusOr<bench::CommBenchOptions> to_options(const BenchCommFlags& f) {
  bench::CommBenchOptions o;
  o.sizes.clear();
  for (const std::string& s : f.sizes) {
    STRATA_ASSIGN_OR_RETURN(uint64_t bytes, parse_size(s));
    o.sizes.push_back(bytes);
  }
  o.ops.clear();
  for (const std::string& name : f.ops) {
    STRATA_ASSIGN_OR_RETURN(bench::CommOp op, bench::parse_comm_op(name));
    o.ops.push_back(op);
  }
  if (f.repeat < 1) return error(Code::invalid_argument, "--repeat {}: must be >= 1", f.repeat);
  if (f.warmup < 0) return error(Code::invalid_argument, "--warmup {}: must be >= 0", f.warmup);
  if (f.timeout < 0) return error(Code::invalid_argument, "--timeout {}: must be >= 0 (0 waits forever)", f.timeout);
  o.repeat = f.repeat;
  o.warmup = f.warmup;
  return o;
}

int run_bench_comm(const BenchCommFlags& flags) {
  StatusOr<LaunchInfo> launch = detect_launch();
  if (!launch.is_ok()) return report_error(launch.status().message(), kExitUsage);
  // The flags and the launcher are the same on every rank: rank 0 alone says what is wrong with
  // them. What the machine or a peer does differs by rank: each rank says it, naming itself.
  const bool lead = launch->rank == 0;
  auto usage = [&](const Status& s) { return lead ? report_error(s.message(), kExitUsage) : kExitUsage; };
  const std::string me = launch->size > 1 ? fmt::format("rank {} of {}: ", launch->rank, launch->size) : "";

  StatusOr<bench::CommBenchOptions> options = to_options(flags);
  if (!options.is_ok()) return usage(options.status());
  if (flags.comm != "auto" && flags.comm != "nccl")
    return usage(error(Code::invalid_argument, "--comm {}: expected auto or nccl", flags.comm));
  StatusOr<bench::BackendChoice> choice = bench::choose_backend(flags.device);
  if (!choice.is_ok()) return usage(choice.status());
  BackendOptions backend_options;
  backend_options.kind = choice->kind;
  // One GPU a rank: NCCL refuses two ranks on one device.
  if (choice->kind == BackendKind::cuda) backend_options.device_index = launch->local_rank;
  backend_options.memory_budget = bench::comm_bench_memory(*options, launch->size, choice->kind);
  StatusOr<std::unique_ptr<Backend>> backend = make_backend(backend_options);
  if (!backend.is_ok()) return report_error(me + backend.status().message());
  CommOptions comm_options;
  comm_options.timeout_seconds = flags.timeout;
  comm_options.kind = flags.comm == "nccl" ? CommKind::nccl : CommKind::automatic;
  comm_options.rendezvous_dir = flags.rendezvous_dir;
  if (const char* env = std::getenv("STRATA_RENDEZVOUS_DIR"); comm_options.rendezvous_dir.empty() && env != nullptr)
    comm_options.rendezvous_dir = env;
  StatusOr<std::unique_ptr<Communicator>> comm = make_communicator(**backend, *launch, comm_options);
  if (!comm.is_ok()) {  // no MPI for this launcher or backend (the same on every rank), or MPI failed
    const Code code = comm.status().code();
    if (code == Code::unavailable || code == Code::invalid_argument) return usage(comm.status());
    return report_error(me + comm.status().message());
  }

  if (lead)
    options->progress = [](size_t done, size_t total, const std::string& what) {
      bench::print_progress("bench comm", done, total, what);
    };
  StatusOr<bench::CommBenchReport> report = bench::run_comm_bench(**backend, **comm, *options);
  if (!report.is_ok()) {
    const int code = report.status().code() == Code::invalid_argument ? kExitUsage : kExitFailure;
    report_error(me + report.status().message(), code);
    // A collective failed (a peer died or went silent): MPI cannot finalize; take the world down.
    if ((*comm)->size() > 1 && !(*comm)->synchronize(Stream::compute).is_ok()) {
      std::fflush(stderr);
      abort_mpi_world(code);
    }
    return code;
  }
  if (lead) {
    fmt::print("{}", bench::comm_bench_table(*report));
    std::fflush(stdout);
  }
  return kExitOk;
}

}  // namespace

void add_bench_comm_command(CLI::App& bench, CommandRegistry& registry) {
  auto flags = std::make_shared<BenchCommFlags>();
  CLI::App* app = bench.add_subcommand(
      "comm", "The communicator's collectives (all-gather, reduce-scatter, all-reduce, all-to-all) across the "
              "ranks of `mpirun -np N strata bench comm`: time, algorithm and bus bandwidth per op and size, "
              "printed by rank 0 (NCCL-tests' conventions). Without mpirun: a world of one, said so");
  app->add_option("--device", flags->device, "backend: cpu (MPI between the ranks), cuda (NCCL) or auto")
      ->capture_default_str();
  app->add_option("--comm", flags->comm,
                  "communicator: auto (local for a world of one, else MPI on cpu, NCCL on cuda) or nccl (NCCL even "
                  "for a world of one; needs --device cuda)")
      ->capture_default_str();
  app->add_option("--size", flags->sizes,
                  "sizes of the whole collective buffer (comma list; rounded down to a multiple of 4 x ranks bytes)")
      ->delimiter(',')->capture_default_str();
  app->add_option("--op", flags->ops, "all-gather, reduce-scatter, all-reduce, all-to-all (comma list)")
      ->delimiter(',')->capture_default_str();
  app->add_option("--repeat", flags->repeat, "timed runs per op and size (median, min and max reported)")
      ->capture_default_str();
  app->add_option("--warmup", flags->warmup, "untimed runs per op and size, after its check")->capture_default_str();
  app->add_option("--timeout", flags->timeout,
                  "seconds a collective waits for a peer before failing and naming it (0 waits forever)")
      ->capture_default_str();
  app->add_option("--rendezvous-dir", flags->rendezvous_dir,
                  "ranks launched torchrun-style (RANK, WORLD_SIZE; no mpirun) with --device cuda: a directory every "
                  "rank sees, where rank 0 leaves NCCL's unique id (default: STRATA_RENDEZVOUS_DIR)");
  registry.add(app, [flags]() { return run_bench_comm(*flags); });
}

}  // namespace strata::cli
