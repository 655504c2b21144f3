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
// Destroying the communicator finalizes MPI when it initialized it, unless a collective failed (a
// dead peer would make MPI_Finalize hang): then the process should exit non-zero promptly
// (abort_mpi_world does, taking the other ranks down with it).
StatusOr<std::unique_ptr<Communicator>> make_mpi_communicator(Backend& backend, const CommOptions& options);

// MPI_Abort(MPI_COMM_WORLD, code) when MPI is initialized, else std::_Exit(code). Never returns.
[[noreturn]] void abort_mpi_world(int code);

}  // namespace strata
