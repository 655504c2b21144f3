// NcclCommunicator: the Communicator (runtime/communicator.h) of the CUDA backend, over NCCL. The
// gathers, the all-to-all and broadcast are NCCL's (ncclAllGather, grouped ncclSend/ncclRecv,
// ncclBroadcast) on the backend's CUDA stream for the given Stream; the ordered sums are not NCCL's
// reductions (their order is unspecified) but an all-to-all of shards into a scratch buffer, then
// the backend's accumulate_widened on the owner, rank by rank. Not for the CPU backend (MPI is). The
// ranks come from mpirun (the unique id goes over MPI), from torchrun-style variables (the id goes
// through a shared directory: runtime/file_rendezvous.h) or are a world of one.
// Only built with STRATA_HAVE_NCCL.
#pragma once

#include <memory>

#include "runtime/communicator.h"

namespace strata {

// Builds the NCCL communicator of `launch`'s world on `backend` (a CudaBackend: invalid_argument
// otherwise), on the backend's device. Under mpirun, MPI is initialized unless it already is
// (runtime/mpi_communicator.h's init_mpi), rank 0 makes NCCL's unique id and MPI_Bcast carries it to
// every rank; MPI's rank and size must match `launch`'s. Launched torchrun-style (RANK, WORLD_SIZE),
// rank 0 leaves the id in options.rendezvous_dir, every rank waits there for the others (the larger
// of the timeout and 60 s), and rank 0 removes the files once the communicator has formed. A world
// of one from no launcher needs no MPI (a real NCCL communicator of one rank). The communicator is non-blocking (NCCL's blocking = 0), so
// no call can hang inside NCCL: its setup and every collective's queueing are polled against
// options.timeout_seconds, and ncclCommAbort ends a stuck one.
// Errors: invalid_argument for another backend or a launch MPI disagrees with; unavailable when MPI
// or NCCL cannot form the communicator (their message and this rank named), io_error when the peers
// do not join within the timeout (NCCL aborted).
// Ownership: the caller owns the communicator; `backend` must outlive it. Destroying it waits for
// its collectives (within the timeout), releases its scratch, finalizes and destroys the NCCL
// communicator (aborts it when broken) and finalizes MPI when it initialized MPI and nothing failed.
// Thread-safety: as Communicator (one thread drives it at a time); its state is under one mutex.
StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(Backend& backend, const LaunchInfo& launch,
                                                               const CommOptions& options);

}  // namespace strata
