// ShardGather: an all-gather of host bytes across ranks, through one bounded device buffer (the
// Communicator moves backend memory only). Each rank gives up to `block` bytes; every rank gets all
// ranks' blocks laid out rank after rank (block r at r x block), in rounds of at most `round`
// bytes a rank, so a block of any size needs ranks x round device bytes. The CPU optimizer of a
// partitioned run gathers each chunk's updated working weights with it (every rank homes a shard,
// offload/chunk_shard.h, and every rank computes with the whole chunk), and a checkpoint gathers
// the state's shards to the rank that writes it.
// Thread-safety: one driving thread. Lifetime: the backend and the communicator outlive it. A
// collective: every rank calls gather with the same block and round sizes, in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/backend.h"
#include "runtime/communicator.h"

namespace strata {

class ShardGather {
 public:
  // Allocates ranks x round device bytes (tag "<name> gather"). Errors: invalid_argument for a
  // round of 0 bytes; the arena's out_of_memory.
  static StatusOr<std::unique_ptr<ShardGather>> create(Backend& backend, Communicator& comm, uint64_t round,
                                                       const std::string& name);
  ~ShardGather();
  ShardGather(const ShardGather&) = delete;
  ShardGather& operator=(const ShardGather&) = delete;

  // `mine` (mine_bytes <= block bytes of this rank; the rest of its block is sent as zeros) into
  // `all`: all[r x block + i] = rank r's byte i, written only below all_bytes (a caller whose
  // layout ends early passes its end). `mine` may lie inside `all` at rank() x block. Queued on
  // Stream::compute and waited for: on return `all` holds every rank's bytes. The communicator's
  // error (a dead rank, a timeout) is returned.
  Status gather(const std::byte* mine, uint64_t mine_bytes, uint64_t block, std::byte* all, uint64_t all_bytes);

  uint64_t round() const { return round_; }

 private:
  ShardGather(Backend& backend, Communicator& comm, uint64_t round) : backend_(backend), comm_(comm), round_(round) {}

  Backend& backend_;
  Communicator& comm_;
  const uint64_t round_;
  std::byte* buffer_ = nullptr;  // ranks x round_
};

}  // namespace strata
