// detect_launch, LocalCommunicator (the world of one) and make_communicator's choice between the
// local, MPI and NCCL communicators (their collectives live in runtime/mpi_communicator.cc and
// runtime/cuda/nccl_communicator.cc).
#include "runtime/communicator.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "runtime/mpi_communicator.h"
#if STRATA_HAVE_NCCL
#include "runtime/cuda/nccl_communicator.h"
#endif

namespace strata {

std::string_view comm_kind_name(CommKind k) {
  switch (k) {
    case CommKind::automatic: return "auto";
    case CommKind::local: return "local";
    case CommKind::nccl: return "nccl";
  }
  return "?";
}

StatusOr<CommKind> parse_comm_kind(std::string_view name) {
  for (CommKind k : {CommKind::automatic, CommKind::local, CommKind::nccl})
    if (comm_kind_name(k) == name) return k;
  return error(Code::invalid_argument, "communicator \"{}\": expected auto, local or nccl", name);
}

std::string_view launcher_name(Launcher l) {
  switch (l) {
    case Launcher::single: return "single";
    case Launcher::mpirun: return "mpirun";
    case Launcher::torchrun: return "torchrun";
  }
  return "?";
}

namespace {

// The integer in environment variable `name`; nullopt when unset. Set but not an integer in
// [min_value, 1 << 24): invalid_argument naming it.
StatusOr<std::optional<int>> env_int(const char* name, int min_value) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::optional<int>();
  errno = 0;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || errno != 0 || x < min_value || x >= (1L << 24))
    return error(Code::invalid_argument, "environment variable {}='{}' is not a valid {}", name, v,
                 min_value == 0 ? "rank" : "world size");
  return std::optional<int>(static_cast<int>(x));
}

// One launcher's four variables (the local ones optional) -> LaunchInfo, or nullopt when its rank
// variable is unset. Without a local size a world of one rank is a node of one, a larger one says 0
// (unknown); without a local rank the rank stands in for it (one node).
StatusOr<std::optional<LaunchInfo>> read_launch(Launcher launcher, const char* rank_var, const char* size_var,
                                                const char* local_var, const char* local_size_var) {
  STRATA_ASSIGN_OR_RETURN(std::optional<int> rank, env_int(rank_var, 0));
  if (!rank) return std::optional<LaunchInfo>();
  STRATA_ASSIGN_OR_RETURN(std::optional<int> size, env_int(size_var, 1));
  if (!size) return error(Code::invalid_argument, "{} is set but {} is not", rank_var, size_var);
  if (*rank >= *size)
    return error(Code::invalid_argument, "{}={} is not below {}={}", rank_var, *rank, size_var, *size);
  STRATA_ASSIGN_OR_RETURN(std::optional<int> local, env_int(local_var, 0));
  STRATA_ASSIGN_OR_RETURN(std::optional<int> local_size, env_int(local_size_var, 1));
  LaunchInfo info;
  info.launcher = launcher;
  info.rank = *rank;
  info.size = *size;
  info.local_rank = local ? *local : *rank;
  info.local_size = local_size ? *local_size : (*size == 1 ? 1 : 0);
  if (local_size && info.local_rank >= info.local_size)
    return error(Code::invalid_argument, "{}={} is not below {}={}", local ? local_var : rank_var, info.local_rank,
                 local_size_var, info.local_size);
  return std::optional<LaunchInfo>(info);
}

// The world of one: rank 0 of 1 on any backend.
class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(Backend& backend) : backend_(backend) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view name() const override { return "local"; }

  Status all_gather(const void* send, void* recv, uint64_t bytes, Stream s) override {
    return copy("all_gather", recv, send, bytes, s);
  }
  Status all_to_all(const void* send, void* recv, uint64_t bytes, Stream s) override {
    return copy("all_to_all", recv, send, bytes, s);
  }
  Status reduce_scatter(const float* send, float* recv, uint64_t count, Stream s) override {
    return copy("reduce_scatter", recv, send, count * sizeof(float), s);  // a sum of one: x_0
  }
  Status all_reduce(const float* send, float* recv, uint64_t count, Stream s) override {
    return copy("all_reduce", recv, send, count * sizeof(float), s);
  }
  Status broadcast(void*, uint64_t, int root, Stream) override {
    if (root != 0) return error(Code::invalid_argument, "broadcast on rank 0 of 1: root {} is not a rank", root);
    return Status::ok();
  }
  Status barrier(Stream) override { return Status::ok(); }
  Status synchronize(Stream s) override { return backend_.synchronize(s); }
  StatusOr<std::unique_ptr<Communicator>> duplicate() override { return make_local_communicator(backend_); }

 private:
  Status copy(std::string_view op, void* dst, const void* src, uint64_t bytes, Stream s) {
    if (dst == src || bytes == 0) return Status::ok();
    return backend_.copy_on_device(dst, src, bytes, s).with_context(fmt::format("{} on rank 0 of 1", op));
  }

  Backend& backend_;
};

}  // namespace

StatusOr<LaunchInfo> detect_launch() {
  STRATA_ASSIGN_OR_RETURN(std::optional<LaunchInfo> info,
                          read_launch(Launcher::mpirun, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                      "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"));
  if (info) return *info;
  STRATA_ASSIGN_OR_RETURN(info, read_launch(Launcher::mpirun, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"));
  if (info) return *info;
  STRATA_ASSIGN_OR_RETURN(info, read_launch(Launcher::torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"));
  if (info) return *info;
  return LaunchInfo{};
}

std::unique_ptr<Communicator> make_local_communicator(Backend& backend) {
  return std::make_unique<LocalCommunicator>(backend);
}

StatusOr<std::unique_ptr<Communicator>> make_communicator(Backend& backend, const LaunchInfo& launch,
                                                          const CommOptions& options) {
  const bool nccl_asked = options.kind == CommKind::nccl;
  if (nccl_asked && backend.kind() != BackendKind::cuda)
    return error(Code::invalid_argument, "the NCCL communicator needs the CUDA backend (this run has the {} backend)",
                 backend_kind_name(backend.kind()));
  if (options.kind == CommKind::local) {
    if (launch.size > 1)
      return error(Code::invalid_argument, "the local communicator is a world of one, but {} started {} ranks; "
                   "across ranks leave the communicator at auto (MPI on the cpu backend, NCCL on cuda)",
                   launcher_name(launch.launcher), launch.size);
    return make_local_communicator(backend);
  }
  if (launch.size == 1 && !nccl_asked) return make_local_communicator(backend);
  if (launch.size > 1 && launch.launcher != Launcher::mpirun && backend.kind() == BackendKind::cpu)
    return error(Code::unavailable,
                 "a world of {} ranks from {}-style variables on the CPU backend: its collectives are MPI's, whose "
                 "ranks come from mpirun; launch with mpirun -np {} (torchrun-style launches work on the CUDA "
                 "backend, over NCCL with --rendezvous-dir)", launch.size, launcher_name(launch.launcher), launch.size);
  if (backend.kind() == BackendKind::cpu) return make_mpi_communicator(backend, options);
#if STRATA_HAVE_NCCL
  return make_nccl_communicator(backend, launch, options);
#else
  if (nccl_asked)
    return error(Code::unavailable, "this strata was built without NCCL (install libnccl-dev or set NCCL_ROOT, then "
                 "reconfigure): no NCCL communicator");
  return error(Code::unavailable,
               "{} ranks on the CUDA backend need the NCCL communicator, which this strata was built without "
               "(install libnccl-dev or set NCCL_ROOT, then reconfigure)", launch.size);
#endif
}

}  // namespace strata
