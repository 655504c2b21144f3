// ShardGather: host blocks all-gathered across ranks in rounds through a device buffer (see
// shard_gather.h).
#include "offload/shard_gather.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace strata {

StatusOr<std::unique_ptr<ShardGather>> ShardGather::create(Backend& backend, Communicator& comm, uint64_t round,
                                                           const std::string& name) {
  if (round == 0) return error(Code::invalid_argument, "{} gather: a round of 0 bytes", name);
  std::unique_ptr<ShardGather> g(new ShardGather(backend, comm, round));
  STRATA_ASSIGN_OR_RETURN(void* buffer,
                          backend.allocate(uint64_t(comm.size()) * round, fmt::format("{} gather", name)));
  g->buffer_ = static_cast<std::byte*>(buffer);
  return g;
}

ShardGather::~ShardGather() {
  Status s = backend_.synchronize(Stream::compute);
  if (s.is_ok()) s = backend_.release(buffer_);
  if (!s.is_ok()) spdlog::warn("shard gather: releasing its buffer: {}", s);
}

Status ShardGather::gather(const std::byte* mine, uint64_t mine_bytes, uint64_t block, std::byte* all,
                           uint64_t all_bytes) {
  if (mine_bytes > block)
    return error(Code::invalid_argument, "shard gather: {} bytes given for a block of {}", mine_bytes, block);
  const uint64_t ranks = uint64_t(comm_.size());
  // `mine` may lie in `all`, where another rank's bytes land: every round reads its part of `mine`
  // before any bytes come back to `all` (stream order), so rank() x block + at is overwritten only
  // with this rank's own bytes.
  for (uint64_t at = 0; at < block; at += round_) {
    const uint64_t n = std::min(round_, block - at);
    const uint64_t have = mine_bytes > at ? std::min(n, mine_bytes - at) : 0;
    std::byte* own = buffer_ + uint64_t(comm_.rank()) * n;  // the in-place all-gather's blocks are n long
    if (have > 0) STRATA_RETURN_IF_ERROR(backend_.copy_to_device(own, mine + at, have, Stream::compute));
    if (have < n) STRATA_RETURN_IF_ERROR(backend_.fill_zero(own + have, n - have, Stream::compute));
    STRATA_RETURN_IF_ERROR(comm_.all_gather(own, buffer_, n, Stream::compute));
    for (uint64_t r = 0; r < ranks; ++r) {
      const uint64_t to = r * block + at;
      if (to >= all_bytes) break;
      STRATA_RETURN_IF_ERROR(backend_.copy_to_host(all + to, buffer_ + r * n, std::min(n, all_bytes - to),
                                                   Stream::compute));
    }
  }
  STRATA_RETURN_IF_ERROR(comm_.synchronize(Stream::compute));
  return backend_.synchronize(Stream::compute);
}

}  // namespace strata
