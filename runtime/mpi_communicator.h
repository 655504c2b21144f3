// MpiCommunicator: the Communicator (runtime/communicator.h) of a CPU-backend run launched by
// mpirun, over Open MPI. Each collective runs on the stream's worker (Backend::host_callback) as
// point-to-point messages (MPI_Isend / MPI_Irecv) polled against a deadline, so a dead or stuck peer
// is an error naming it, not a hang; the ordered sums are computed here, never by MPI_Reduce*.
// Not for device memory a CPU cannot read (the CUDA backend uses NCCL).
#pragma once

#include <memory>

#include "runtime/communicator.h"

namespace strata {

// Initializes MPI (MPI_THREAD_MULTIPLE requested, MPI_THREAD_SERIALIZED at least: one collective at
// a time holds the communicator's lock) unless already initialized, and builds a communicator on a
// duplicate of MPI_COMM_WORLD whose errors return (MPI_ERRORS_RETURN) instead of aborting.
// `backend` must be a CPU backend (invalid_argument otherwise) and outlive the communicator.
// A duplicate (Communicator::duplicate) shares its first failure: a collective of either that
// fails (a dead peer) ends the other's collectives at their next poll, with that error.
// Destroying the communicator finalizes MPI when it initialized it, unless a collective failed (a
// dead peer would make MPI_Finalize hang): then the process should exit non-zero promptly
// (abort_mpi_world does, taking the other ranks down with it).
StatusOr<std::unique_ptr<Communicator>> make_mpi_communicator(Backend& backend, const CommOptions& options);

// ---- for other communicators' bootstrap (NCCL's unique id); no MPI types leave this file -----------
// MPI for this process: initialized here (MPI_Init_thread, asking MPI_THREAD_MULTIPLE) unless it
// already is. Call on the thread that will finalize it.
struct MpiWorld {
  int rank = 0;            // in MPI_COMM_WORLD
  int size = 1;
  bool owns_init = false;  // this call initialized MPI: finalize_mpi() once nothing uses it
  bool serialized = false; // the thread level allows calls from any one thread at a time
};
StatusOr<MpiWorld> init_mpi();
// Every rank's `bytes` at `data` = rank `root`'s: MPI_Bcast over MPI_COMM_WORLD (errors returned,
// not fatal). Collective and blocking: every rank calls it with the same bytes and root. For a
// bootstrap's few bytes, not for data (a dead rank is mpirun's to notice here, not a timeout's).
Status broadcast_world(void* data, uint64_t bytes, int root);
// MPI_Finalize unless MPI is finalized already or was never initialized. Only by the owner of
// init_mpi's initialization, once nothing uses MPI; never after a peer died (it would hang): exit
// through abort_mpi_world then.
void finalize_mpi();

// MPI_Abort(MPI_COMM_WORLD, code) when MPI is initialized, else std::_Exit(code). Never returns.
[[noreturn]] void abort_mpi_world(int code);

}  // namespace strata
