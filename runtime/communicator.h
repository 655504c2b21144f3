// Communicator: the collectives between the ranks of a scale-out run (all-gather, reduce-scatter,
// all-to-all, all-reduce, broadcast, barrier) on a Backend's device buffers, queued on one of its
// streams like the copies. Three implementations: LocalCommunicator (world size 1, any backend:
// moves nothing between processes), MpiCommunicator (runtime/mpi_communicator.h, the CPU backend's
// host memory over Open MPI) and NcclCommunicator (runtime/cuda/nccl_communicator.h, the CUDA
// backend's device memory over NCCL, when built in).
// Also how a process finds its rank (detect_launch). Not a partitioner: it moves the bytes it is
// given; which rank homes which shard is the caller's plan.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/backend.h"
#include "runtime/status.h"

namespace strata {

// ---- launch ------------------------------------------------------------------------------------
enum class Launcher : uint8_t { single, mpirun, torchrun };
std::string_view launcher_name(Launcher l);

struct LaunchInfo {
  Launcher launcher = Launcher::single;
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // rank among the ranks of this node (picks the GPU)
  int local_size = 1;  // ranks on this node; 0 when the launcher does not say (MPICH without
                       // MPI_LOCALNRANKS): then no rank knows its share of the node
};

// Reads the launcher's environment: OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE
// (Open MPI's mpirun) or PMI_RANK / PMI_SIZE / MPI_LOCALRANKID / MPI_LOCALNRANKS (MPICH, Hydra),
// else RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE (torchrun), else a world of one. A variable that is set but not a valid rank or size is invalid_argument
// naming it.
StatusOr<LaunchInfo> detect_launch();

// ---- the communicator --------------------------------------------------------------------------
// Which communicator make_communicator builds.
enum class CommKind : uint8_t {
  automatic,  // make_communicator's choice: local for a world of one, else MPI (CPU) or NCCL (CUDA)
  local,      // the local communicator, asked for by name: a world of one only (`strata train --comm local`)
  nccl,       // NCCL even for a world of one (its tests, `strata bench comm --comm nccl`): CUDA only
};
std::string_view comm_kind_name(CommKind k);  // "auto", "local", "nccl"
// The kind a name gives ("auto", "local", "nccl"); invalid_argument naming the choices otherwise.
StatusOr<CommKind> parse_comm_kind(std::string_view name);

struct CommOptions {
  // A collective in which no message to or from a peer completes for this many seconds fails
  // (naming the ranks it still waits for) instead of hanging; the communicator is then broken
  // (every later call returns that error) and the process should exit non-zero. Counted from the
  // last completed message, not the collective's start, so a large collective that is moving is
  // never cut off (NCCL shows no messages: there, from the last completed collective once the
  // stream has reached the next, so one collective longer than this is cut off). The default keeps
  // a dead rank's peers under 30 s to their error. 0 waits forever.
  double timeout_seconds = 20.0;
  CommKind kind = CommKind::automatic;
  // A world launched torchrun-style (RANK / WORLD_SIZE without mpirun) on the CUDA backend: the
  // directory its ranks find each other through (runtime/file_rendezvous.h), where rank 0 leaves
  // NCCL's unique id. Empty: such a world is refused, naming --rendezvous-dir.
  std::string rendezvous_dir;
};

// Contract, every implementation:
// * Buffers are `backend`'s device memory (the CPU backend's is host memory). The call checks its
//   arguments, queues the collective on `stream` after the work already queued there, and returns;
//   its completion is a point on `stream` (record an event after it, as after a copy). Buffers must
//   stay valid and untouched until then.
// * Every rank issues the same collectives in the same order with the same sizes (the MPI rule).
//   One stream drives a communicator at a time.
// * An error found before queueing is returned; one found while running (a peer's MPI error, a
//   timeout) is sticky: synchronize() and every later call return it. Messages name the collective,
//   this rank and the peer where the library shows it (MPI: "reduce_scatter #12 on rank 0 of 4: no
//   data from rank 3 for 5.0 s"; NCCL: "all_gather #3 on rank 0 of 2: no progress for 20.0 s ...").
// * Exactness: reduce_scatter and all_reduce add the ranks' fp32 contributions in rank order,
//   acc = x_0; acc += x_1; ...; acc += x_{N-1} (kernels/cpu/grad_accumulate.h's
//   accumulate_widened: the first contribution is taken as is, so a -0.0 stays -0.0, as one rank's
//   gradient accumulation over N micro-batches). Never the library's own reduction (whose order is
//   unspecified): the shards are exchanged all-to-all, then summed on their owner. So N ranks give
//   the bits of one rank accumulating N micro-batches.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view name() const = 0;  // "local", "mpi", "nccl"

  // recv (size() * bytes_per_rank) = every rank's send (bytes_per_rank), in rank order. send may
  // be recv's own block (in place).
  virtual Status all_gather(const void* send, void* recv, uint64_t bytes_per_rank, Stream stream) = 0;
  // send and recv: size() blocks of bytes_per_rank. Block r of send goes to rank r; block r of recv
  // came from rank r. send and recv must not overlap.
  virtual Status all_to_all(const void* send, void* recv, uint64_t bytes_per_rank, Stream stream) = 0;
  // send: size() * count fp32; recv (count fp32) = the ordered sum over ranks r of block rank() of
  // rank r's send. send and recv must not overlap.
  virtual Status reduce_scatter(const float* send, float* recv, uint64_t count, Stream stream) = 0;
  // recv (count fp32) = the ordered sum over ranks of send (count fp32) on every rank, the same
  // bits on every rank. send may equal recv.
  virtual Status all_reduce(const float* send, float* recv, uint64_t count, Stream stream) = 0;
  // buf (bytes) on every rank = buf on `root`.
  virtual Status broadcast(void* buf, uint64_t bytes, int root, Stream stream) = 0;
  // Completes on `stream` once every rank has reached its barrier.
  virtual Status barrier(Stream stream) = 0;

  // Host blocks until everything queued on `stream` completes; returns the first error of any
  // collective (sticky) or of the stream.
  virtual Status synchronize(Stream stream) = 0;

  // A second communicator over the same ranks, in the same rank order, whose collectives are
  // independent of this one's: the two may be driven from two streams at once (ZeRO-3 gathers the
  // next chunk on Stream::comm while this one reduces gradients on Stream::compute). Each still
  // obeys the contract above on its own: every rank issues its collectives in the same order.
  // A collective: every rank calls it at the same point, with nothing queued on this communicator
  // that has not completed. Local: another local communicator. MPI: MPI_Comm_dup, and only under
  // MPI_THREAD_MULTIPLE (two threads then call MPI at once; unavailable below it, naming the
  // level), and the two share their first failure: a dead peer found by one ends the other's
  // collectives at once, not at a second timeout. NCCL: ncclCommSplit, within the timeout.
  // Lifetime: this communicator and the backend outlive the duplicate.
  virtual StatusOr<std::unique_ptr<Communicator>> duplicate() = 0;
};

// A world of one on any backend: gathers, all-to-all and the sums of one contribution are a copy
// on `stream` when send and recv differ and nothing otherwise; broadcast and barrier queue nothing.
std::unique_ptr<Communicator> make_local_communicator(Backend& backend);

// The communicator `launch` calls for on `backend`: a world of one is local (no MPI, no mpirun
// needed); under mpirun, MPI on the CPU backend and NCCL on CUDA (unavailable when not built in);
// torchrun-style variables with a world above one: NCCL on CUDA, its unique id passed through
// options.rendezvous_dir (invalid_argument without one), and unavailable on the CPU backend (its
// collectives are MPI's: launch with mpirun). options.kind == nccl asks for NCCL at any world size: on the CPU backend
// that is invalid_argument, without NCCL built in unavailable. options.kind == local is the local
// communicator on any backend, and invalid_argument for a world above one. `backend` must outlive
// the communicator.
StatusOr<std::unique_ptr<Communicator>> make_communicator(Backend& backend, const LaunchInfo& launch,
                                                          const CommOptions& options = {});

}  // namespace strata
