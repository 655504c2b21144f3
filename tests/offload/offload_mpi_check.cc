// The offload pieces of a partitioned run across processes (label mpi, under mpirun): each rank a
// CPU backend and the MPI communicator.
//   exchange: a GradientExchange on N ranks, rank r giving micro-batch r's releases (a tied chunk of
//     two releases a backward among them, chunks shorter than a rank's shard, a shard past a chunk's
//     end) -- and in steps of two rounds micro-batches r and N + r -- against one GradientOffloader
//     on every rank accumulating all the step's micro-batches in order: each rank's shard of every
//     sum and the global norm the same bits, the shards' padding zero; a chunk released more often
//     in one backward than its count refused.
//   gather: ShardGather with blocks of every rank's own length, in rounds shorter than a block,
//     `mine` inside `all` and a cut `all`: every rank's bytes in place, nothing written past the end.
// Prints PASS or the first mismatch; exit 0 on every rank on success.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/half.h"
#include "offload/gradient_exchange.h"
#include "offload/gradient_offloader.h"
#include "offload/shard_gather.h"
#include "runtime/backend.h"
#include "runtime/communicator.h"
#include "runtime/pinned_pool.h"
#include "runtime/splitmix64.h"

namespace strata {
namespace {

int fail(const Communicator& comm, const std::string& what) {
  std::fprintf(stderr, "FAIL rank %d of %d: %s\n", comm.rank(), comm.size(), what.c_str());
  return 1;
}

// Chunks (bf16 elements) and their releases per backward: a chunk of 2 releases (a tied table) of
// 9000, one of 3 blocks, one shorter than a block (only rank 0 homes any of it) and one of 5 blocks
// less a little (the last rank's shard short or empty).
const std::vector<uint64_t> kElements = {9000, 3 * 4096, 1000, 5 * 4096 - 200};
const std::vector<uint32_t> kReleases = {2, 1, 1, 1};

GradientOffloaderOptions whole_options() {
  GradientOffloaderOptions o;
  for (uint64_t n : kElements) o.chunk_bytes.push_back(n * 2);
  o.format = kernels::FloatFormat::bf16;
  o.chunk_group = {0, 1, 1, 1};
  o.group_slots = {1, 2};
  o.group_names = {"table", "layers"};
  o.name = "check";
  return o;
}

// Micro-batch k's release j of chunk c, element i: bf16 values of both signs and many exponents.
uint16_t contribution(int k, size_t c, uint32_t j, uint64_t i) {
  SplitMix64 rng(uint64_t(k) * 1000003 + c * 7919 + j * 104729 + i * 2654435761ull);
  const double u = double(rng.next() >> 11) / double(1ull << 53);
  const float v = float((u - 0.5) * std::pow(2.0, double(int(rng.next() % 12)) - 6.0));
  return kernels::float_to_bf16(v);
}

// Micro-batch k's backward into `sink`: per chunk (layers in reverse, as a backward goes; the table
// last), each release a zeroed slot filled and released.
Status backward(Backend& backend, GradSink& sink, int k) {
  std::vector<uint16_t> host;
  const std::vector<size_t> order = {3, 2, 1, 0};
  for (size_t c : order) {
    for (uint32_t j = 0; j < kReleases[c]; ++j) {
      STRATA_ASSIGN_OR_RETURN(std::byte* slot, sink.acquire(c));
      host.resize(kElements[c]);
      for (uint64_t i = 0; i < kElements[c]; ++i) host[i] = contribution(k, c, j, i);
      STRATA_RETURN_IF_ERROR(backend.copy_to_device(slot, host.data(), host.size() * 2, Stream::compute));
      STRATA_RETURN_IF_ERROR(backend.synchronize(Stream::compute));
      STRATA_RETURN_IF_ERROR(sink.release(c, /*last=*/j + 1 == kReleases[c]));
    }
  }
  return Status::ok();
}

int run_exchange(Backend& backend, Communicator& comm) {
  PinnedPoolOptions po;
  po.allow_cuda = false;
  po.slab_bytes = 4u << 20;
  auto pool = PinnedPool::create(po);
  if (!pool.is_ok()) return fail(comm, pool.status().to_string());
  PinnedPool& pinned = **pool;
  const GradientOffloaderOptions whole = whole_options();
  auto reference = GradientOffloader::create(backend, pinned, whole);
  if (!reference.is_ok()) return fail(comm, reference.status().to_string());
  auto inner = GradientOffloader::create(backend, pinned, gradient_shard_options(whole, comm.size()));
  if (!inner.is_ok()) return fail(comm, inner.status().to_string());
  auto exchange = GradientExchange::create(backend, comm, **inner, {.chunks = whole, .releases = kReleases});
  if (!exchange.is_ok()) return fail(comm, exchange.status().to_string());
  // Later steps start from fresh sums; steps 1 and 2 run two micro-batches a rank (two rounds).
  for (int step = 0; step < 3; ++step) {
    const int rounds = step == 0 ? 1 : 2, total = rounds * comm.size();
    if (Status s = (*reference)->begin_step(); !s.is_ok()) return fail(comm, s.to_string());
    for (int k = 0; k < total; ++k) {
      (*reference)->set_last_micro_batch(k + 1 == total);
      if (Status s = backward(backend, **reference, k + step); !s.is_ok()) return fail(comm, s.to_string());
    }
    StatusOr<double> want = (*reference)->finish_step();
    if (!want.is_ok()) return fail(comm, want.status().to_string());
    if (Status s = (*exchange)->begin_step(); !s.is_ok()) return fail(comm, s.to_string());
    for (int j = 0; j < rounds; ++j) {  // round j: micro-batch j x N + r on rank r
      (*exchange)->set_last_micro_batch(j + 1 == rounds);
      if (Status s = backward(backend, **exchange, j * comm.size() + comm.rank() + step); !s.is_ok())
        return fail(comm, s.to_string());
    }
    StatusOr<double> have = (*exchange)->finish_step();
    if (!have.is_ok()) return fail(comm, have.status().to_string());
    if (std::memcmp(&*want, &*have, sizeof(double)) != 0)
      return fail(comm, fmt::format("step {}: norm {:.17g} across ranks, {:.17g} on one", step, *have, *want));
    for (size_t c = 0; c < kElements.size(); ++c) {
      const ChunkShard& shard = (*exchange)->shard(c);
      const float* one = (*reference)->accumulated(c);
      const float* mine = (*inner)->accumulated(c);
      if (std::memcmp(one + shard.begin, mine, shard.elements() * sizeof(float)) != 0)
        return fail(comm, fmt::format("step {} chunk {}: the shard [{}, {}) differs from one rank's sum", step, c,
                                      shard.begin, shard.end));
      for (uint64_t i = shard.elements(); i < shard.stride; ++i)
        if (mine[i] != 0.0f) return fail(comm, fmt::format("chunk {}: padding element {} is {}", c, i, mine[i]));
    }
  }
  // A chunk released more often in one backward than its count is refused, naming it: the tied
  // chunk's third release before its last.
  if (Status s = (*exchange)->begin_step(); !s.is_ok()) return fail(comm, s.to_string());
  Status third;
  for (int j = 0; j < 3 && third.is_ok(); ++j) {
    StatusOr<std::byte*> slot = (*exchange)->acquire(0);
    if (!slot.is_ok()) return fail(comm, slot.status().to_string());
    third = (*exchange)->release(0, /*last=*/false);
    if (j < 2 && !third.is_ok()) return fail(comm, third.to_string());
  }
  if (third.is_ok() || third.message().find("release 3 of chunk 0") == std::string::npos)
    return fail(comm, "a third release of a two-release chunk in one backward: " + third.to_string());
  std::printf("PASS rank %d of %d: the exchanged shards and norm equal one rank's accumulation\n", comm.rank(),
              comm.size());
  return 0;
}

int run_gather(Backend& backend, Communicator& comm) {
  const uint64_t n = uint64_t(comm.size()), me = uint64_t(comm.rank());
  auto gather = ShardGather::create(backend, comm, /*round=*/96, "check");
  if (!gather.is_ok()) return fail(comm, gather.status().to_string());
  const uint64_t block = 250;  // three rounds, the last short
  const auto byte_of = [](uint64_t r, uint64_t i) { return std::byte((r * 31 + i * 7 + 1) & 0xff); };
  const auto length = [&](uint64_t r) { return block - 40 * r; };  // every rank its own length
  // `mine` inside `all`, `all` cut inside the last rank's block.
  const uint64_t all_bytes = n * block - 17;
  std::vector<std::byte> all(n * block + 64, std::byte{0xee});
  for (uint64_t i = 0; i < length(me); ++i) all[me * block + i] = byte_of(me, i);
  if (Status s = (*gather)->gather(all.data() + me * block, length(me), block, all.data(), all_bytes); !s.is_ok())
    return fail(comm, s.to_string());
  for (uint64_t r = 0; r < n; ++r)
    for (uint64_t i = 0; i < block && r * block + i < all_bytes; ++i) {
      const std::byte want = i < length(r) ? byte_of(r, i) : std::byte{0};
      if (all[r * block + i] != want) return fail(comm, fmt::format("rank {}'s byte {} wrong", r, i));
    }
  for (uint64_t i = all_bytes; i < all.size(); ++i)
    if (all[i] != std::byte{0xee}) return fail(comm, fmt::format("byte {} past the end written", i));
  std::printf("PASS rank %d of %d: gathered blocks in place\n", comm.rank(), comm.size());
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  using namespace strata;
  const std::string mode = argc > 1 ? argv[1] : "";
  auto launch = detect_launch();
  if (!launch.is_ok()) {
    std::fprintf(stderr, "%s\n", launch.status().to_string().c_str());
    return 2;
  }
  BackendOptions options;
  options.memory_budget = uint64_t{64} << 20;
  auto backend = make_backend(options);
  if (!backend.is_ok()) {
    std::fprintf(stderr, "%s\n", backend.status().to_string().c_str());
    return 2;
  }
  CommOptions comm_options;
  comm_options.timeout_seconds = 30.0;
  auto comm = make_communicator(**backend, *launch, comm_options);
  if (!comm.is_ok()) {
    std::fprintf(stderr, "%s\n", comm.status().to_string().c_str());
    return 2;
  }
  if ((*comm)->size() < 2) {
    std::fprintf(stderr, "run under mpirun with at least 2 ranks\n");
    return 2;
  }
  if (mode == "exchange") return run_exchange(**backend, **comm);
  if (mode == "gather") return run_gather(**backend, **comm);
  std::fprintf(stderr, "usage: offload_mpi_check exchange|gather (under mpirun)\n");
  return 2;
}
