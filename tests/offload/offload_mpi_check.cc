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
//   sharded: ShardedWeights (ZeRO-3's weights) over resident shards, gathering ahead on a duplicate
//     communicator: every acquire sees the whole chunk's current bytes through a first pass
//     (recording the order), a replay (gathers ahead used), an update announced and committed while
//     the next chunk was gathered ahead (dropped, the new bytes seen), and a pass that departs from
//     the order with a group's slots short (the gather ahead dropped); read() the whole chunk.
//     Also runs without mpirun (a world of one: the local communicator and its duplicate).
//   sharded-paged: the same over shards paged from pinned memory (a TierManager of one slot a
//     group, a gathered slot more than the layers need): the departure's on-demand gather finds the
//     tier's slot held by the shard of the gather ahead, which is dropped for it.
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
#include "offload/resident_weights.h"
#include "offload/shard_gather.h"
#include "offload/sharded_weights.h"
#include "offload/tier_manager.h"
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

// ---- sharded ------------------------------------------------------------------------------------
// Chunk c's element i (bf16 bits) at weights version v.
uint16_t weight(int v, size_t c, uint64_t i) { return uint16_t((v * 40503u + c * 7919u + i * 2654435761u) >> 3); }

// Writes version v of chunk c through the source (every rank the whole chunk; it keeps its shard).
Status write_chunk(WeightSource& w, size_t c, int v) {
  STRATA_ASSIGN_OR_RETURN(std::byte* out, w.update_buffer(c));
  auto* e = reinterpret_cast<uint16_t*>(out);
  for (uint64_t i = 0; i < kElements[c]; ++i) e[i] = weight(v, c, i);
  return w.commit_update(c);
}

// Acquires c, checks its whole bytes are version v once the compute stream has reached them (the
// CPU backend's device memory is host memory), and leaves it held.
Status acquire_checked(Backend& backend, WeightSource& w, size_t c, int v) {
  STRATA_ASSIGN_OR_RETURN(std::byte* slot, w.acquire(c));
  STRATA_RETURN_IF_ERROR(backend.synchronize(Stream::compute));
  const auto* e = reinterpret_cast<const uint16_t*>(slot);
  for (uint64_t i = 0; i < kElements[c]; ++i)
    if (e[i] != weight(v, c, i))
      return error(Code::internal, "chunk {} element {}: {} where version {} has {}", c, i, e[i], v, weight(v, c, i));
  return Status::ok();
}

// A forward and a backward as the model runs them: each chunk acquired, used, released (the tied
// table, chunk 0, again by the head while the last layer is held), then the layers in reverse.
Status pass(Backend& backend, WeightSource& w, const std::vector<int>& version) {
  STRATA_RETURN_IF_ERROR(w.begin_sequence("train"));
  for (size_t c = 0; c < 4; ++c) {
    STRATA_RETURN_IF_ERROR(acquire_checked(backend, w, c, version[c]));
    if (c == 3) {
      STRATA_RETURN_IF_ERROR(acquire_checked(backend, w, 0, version[0]));
      STRATA_RETURN_IF_ERROR(w.release(0));
    }
    STRATA_RETURN_IF_ERROR(w.release(c));
  }
  for (size_t c = 4; c-- > 0;) {
    STRATA_RETURN_IF_ERROR(acquire_checked(backend, w, c, version[c]));
    STRATA_RETURN_IF_ERROR(w.release(c));
  }
  return w.end_sequence();
}

int run_sharded(Backend& backend, Communicator& comm, bool paged) {
  PinnedPoolOptions po;
  po.allow_cuda = false;
  po.slab_bytes = 4u << 20;
  auto pool = PinnedPool::create(po);
  if (!pool.is_ok()) return fail(comm, pool.status().to_string());
  std::vector<uint64_t> whole;
  for (uint64_t n : kElements) whole.push_back(n * 2);
  const std::vector<uint64_t> shards = weight_shard_bytes(whole, 2, comm.size());
  std::unique_ptr<WeightSource> inner;
  if (paged) {
    TierManagerOptions to;
    to.chunk_bytes = shards;
    to.home = Tier::cpu;
    to.chunk_group = {0, 1, 1, 1};
    to.group_slots = {1, 1};
    to.name = "check shards";
    auto tiers = TierManager::create(backend, **pool, nullptr, nullptr, to);
    if (!tiers.is_ok()) return fail(comm, tiers.status().to_string());
    inner = std::move(*tiers);
  } else {
    auto resident = ResidentWeights::create(backend, **pool, shards, {"a", "b", "c", "d"}, "check");
    if (!resident.is_ok()) return fail(comm, resident.status().to_string());
    inner = std::move(*resident);
  }
  auto gather = ShardGather::create(backend, comm, /*round=*/4096, "check");
  if (!gather.is_ok()) return fail(comm, gather.status().to_string());
  auto ahead = comm.duplicate();
  if (!ahead.is_ok()) return fail(comm, ahead.status().to_string());
  // Group 0 (the table) and group 1 (the layers), two slots each: one held, one gathered ahead
  // (paged: a third for the layers, so the departure below finds a gathered slot free and the
  // tier's one slot held).
  const std::vector<size_t> slots = {2, paged ? size_t{3} : size_t{2}};
  auto sharded = ShardedWeights::create(backend, comm, *inner, **gather, **pool,
                                        {.chunk_bytes = whole, .element_bytes = 2, .chunk_group = {0, 1, 1, 1},
                                         .group_slots = slots, .group_names = {"table", "layers"}, .name = "check"},
                                        ahead->get());
  if (!sharded.is_ok()) return fail(comm, sharded.status().to_string());
  ShardedWeights& w = **sharded;
  std::vector<int> version = {1, 1, 1, 1};
  for (size_t c = 0; c < 4; ++c)
    if (Status s = write_chunk(w, c, version[c]); !s.is_ok()) return fail(comm, s.to_string());
  // Pass 1 records the order; pass 2 replays it: of its 9 gathers (0 1 2 3 0 3 2 1 0), all ahead
  // but the first and the backward's 3 (held when it was next: the head's 0 came while 3 was).
  for (int p = 0; p < 2; ++p)
    if (Status s = pass(backend, w, version); !s.is_ok()) return fail(comm, fmt::format("pass {}: {}", p + 1, s));
  const ShardedWeightsStats replayed = w.stats();
  if (replayed.gathers != 2 * 9 || replayed.ahead != 7 || replayed.dropped != 0)
    return fail(comm, fmt::format("after a recording pass and a replay: {} gathers, {} ahead, {} dropped (want 18, "
                                  "7, 0)", replayed.gathers, replayed.ahead, replayed.dropped));
  // Chunk 1 is gathered ahead while 0 computes; then its update is announced and lands: the gather
  // ahead is dropped and the acquire sees the new bytes.
  Status s = w.begin_sequence("train");
  if (s.is_ok()) s = acquire_checked(backend, w, 0, version[0]);
  if (s.is_ok()) w.expect_update(1, true);
  if (s.is_ok()) s = write_chunk(w, 1, version[1] = 2);
  if (s.is_ok()) s = w.release(0);
  // Departs from the order with the group's slots short: 1 held (2 gathered ahead into the group's
  // other slot), 3 where 2 was: 2's gather ahead is dropped for 3's slot (paged: for the tier's one
  // slot, which 2's shard holds), and 2 gathers on demand.
  if (s.is_ok()) s = acquire_checked(backend, w, 1, version[1]);
  if (s.is_ok()) s = acquire_checked(backend, w, 3, version[3]);
  if (s.is_ok()) s = w.release(3);
  if (s.is_ok()) s = acquire_checked(backend, w, 2, version[2]);
  if (s.is_ok()) s = w.release(2);
  if (s.is_ok()) s = w.release(1);
  if (s.is_ok()) s = w.end_sequence();
  if (!s.is_ok()) return fail(comm, fmt::format("an update during a replay, then a departure: {}", s));
  const ShardedWeightsStats after = w.stats();
  if (after.dropped < 2)
    return fail(comm, fmt::format("{} gathers ahead dropped (want at least 2: the updated chunk's, and one for a slot)",
                                  after.dropped));
  // The order recorded afresh replays, and read() gathers the whole chunk to the host.
  for (int p = 0; p < 2; ++p)
    if (Status r = pass(backend, w, version); !r.is_ok()) return fail(comm, fmt::format("pass {}: {}", p + 4, r));
  std::vector<uint16_t> host(kElements[1]);
  if (Status r = w.read(1, reinterpret_cast<std::byte*>(host.data())); !r.is_ok()) return fail(comm, r.to_string());
  for (uint64_t i = 0; i < kElements[1]; ++i)
    if (host[i] != weight(version[1], 1, i)) return fail(comm, fmt::format("read of chunk 1: element {} wrong", i));
  const ShardedWeightsStats last = w.stats();
  std::printf("PASS rank %d of %d: every acquire saw its chunk's current bytes; %llu gathers, %llu ahead, %llu "
              "dropped\n", comm.rank(), comm.size(), (unsigned long long)last.gathers,
              (unsigned long long)last.ahead, (unsigned long long)last.dropped);
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
  if (mode == "sharded") return run_sharded(**backend, **comm, /*paged=*/false);  // any world size
  if (mode == "sharded-paged") return run_sharded(**backend, **comm, /*paged=*/true);
  if ((*comm)->size() < 2) {
    std::fprintf(stderr, "run under mpirun with at least 2 ranks\n");
    return 2;
  }
  if (mode == "exchange") return run_exchange(**backend, **comm);
  if (mode == "gather") return run_gather(**backend, **comm);
  std::fprintf(stderr, "usage: offload_mpi_check exchange|gather|sharded|sharded-paged (under mpirun; sharded* also without)\n");
  return 2;
}
