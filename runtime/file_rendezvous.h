// FileRendezvous: how the ranks of a torchrun-style launch (RANK, WORLD_SIZE, LOCAL_RANK set by
// torchrun, a scheduler or a script; no mpirun) find each other -- through a directory every rank
// can see (a shared filesystem across machines, any local directory on one), named by
// --rendezvous-dir / STRATA_RENDEZVOUS_DIR. It carries one small blob from rank 0 to every rank: NCCL's
// unique id, from which the NCCL communicator forms (NCCL's own bootstrap then carries the rest).
// Not a communicator: nothing else goes through files.
//
// The protocol tolerates the files of an earlier run left in the directory (a crash, a kill):
//   1. Rank 0 removes an earlier run's id file, then writes `<prefix>.session`: a fresh random
//      session number.
//   2. Rank r > 0 waits for a session file, then writes `<prefix>.arrive.<r>`: that session and a
//      fresh random token of its own. While it waits for step 3 it rereads the session and writes
//      its arrival again when the session changes (it may have read an earlier run's first).
//   3. Rank 0 waits until every rank has arrived in its session, then writes `<prefix>.id`: the
//      session, every rank's token and the blob.
//   4. Rank r takes the blob from an id file that holds its own token at its place; an earlier
//      run's id never does.
//   5. Once the communicator has formed (every rank has read the id) rank 0 removes the files.
// Every file is written whole (a temporary file, then rename), so a reader sees all of it or none.
// `<prefix>` is "strata-rendezvous-<run id>", the run id torchrun's TORCHELASTIC_RUN_ID (its
// --rdzv-id) or "default": two jobs sharing a directory at once need different run ids.
// Each wait polls every 10-100 ms until `timeout_seconds` (0: forever) and then fails naming what it
// waited for (which ranks never arrived). Thread-safety: one call at a time per process; the files
// are the only shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace strata {

struct RendezvousOptions {
  std::string dir;               // the shared directory; must exist and be writable by every rank
  std::string run_id;            // empty: TORCHELASTIC_RUN_ID, else "default"
  double timeout_seconds = 300;  // how long a rank waits for the others to arrive
};

// Rank `rank` of `size` (size >= 2): rank 0 passes `blob` and gets it back; every other rank gets
// rank 0's. Errors: invalid_argument (bad rank or size, no directory, a blob over 4 KiB),
// permission_denied / no_space / io_error from the filesystem naming the file, and io_error when
// the wait times out ("rank 0 waited 300.0 s for ranks 2, 3 to arrive in /shared/rdzv ...").
StatusOr<std::vector<uint8_t>> rendezvous_share(const RendezvousOptions& options, int rank, int size,
                                                const std::vector<uint8_t>& blob);

// Step 5: rank 0 removes the session, arrival and id files of `options`' run (absent ones are
// fine). Call it once every rank holds the blob.
void rendezvous_cleanup(const RendezvousOptions& options, int size);

}  // namespace strata
