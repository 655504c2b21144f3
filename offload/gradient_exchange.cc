// GradientExchange: a partitioned gradient's all-to-all on the device, its ordered sum on the host
// (see gradient_exchange.h).
#include "offload/gradient_exchange.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/cpu/grad_accumulate.h"
#include "offload/slot_group.h"

namespace strata {

namespace {

uint64_t element_size(const GradientOffloaderOptions& o) { return kernels::float_format_size(o.format); }

}  // namespace

GradientOffloaderOptions gradient_shard_options(const GradientOffloaderOptions& whole, int ranks) {
  GradientOffloaderOptions o = whole;
  const uint64_t eb = element_size(whole);
  for (uint64_t& bytes : o.chunk_bytes) bytes = shard_stride_bytes(bytes, eb, ranks);
  o.block_partials = true;
  return o;
}

uint64_t GradientExchange::device_bytes(const GradientExchangeOptions& options, int ranks, uint64_t align) {
  const auto aligned = [align](uint64_t b) { return (b + align - 1) / align * align; };
  const GradientOffloaderOptions& w = options.chunks;
  const uint64_t eb = element_size(w), n = uint64_t(ranks);
  std::vector<uint64_t> group_bytes(w.group_slots.size(), 0);
  uint64_t received = 0, stacks = 0, blocks = 0;
  for (size_t c = 0; c < w.chunk_bytes.size(); ++c) {
    const uint64_t stride_bytes = shard_stride_bytes(w.chunk_bytes[c], eb, ranks);
    const uint64_t padded = n * stride_bytes;
    group_bytes[w.chunk_group[c]] = std::max(group_bytes[w.chunk_group[c]], padded);
    if (options.releases.at(c) > 1) stacks += aligned(uint64_t(options.releases[c]) * padded);
    else received = std::max(received, padded);
    blocks += stride_bytes / eb / kernels::kSumSquaresBlock;
  }
  uint64_t bytes = stacks + (received > 0 ? aligned(received) : 0) + aligned(n * blocks * sizeof(double));
  for (size_t g = 0; g < group_bytes.size(); ++g)
    if (group_bytes[g] > 0) bytes += uint64_t(w.group_slots[g]) * aligned(group_bytes[g]);
  return bytes;
}

GradientExchange::GradientExchange(Backend& backend, Communicator& comm, GradientOffloader& inner,
                                   const GradientExchangeOptions& options)
    : backend_(backend), comm_(comm), inner_(inner), options_(options) {}

GradientExchange::~GradientExchange() {
  Status s = backend_.synchronize_all();
  if (!s.is_ok()) spdlog::warn("{} exchange: releasing memory after a failed stream: {}", options_.chunks.name, s);
  for (void* block : blocks_owned_) {
    s = backend_.release(block);
    if (!s.is_ok()) spdlog::warn("{} exchange: {}", options_.chunks.name, s);
  }
}

StatusOr<std::unique_ptr<GradientExchange>> GradientExchange::create(Backend& backend, Communicator& comm,
                                                                     GradientOffloader& inner,
                                                                     const GradientExchangeOptions& options) {
  const GradientOffloaderOptions& w = options.chunks;
  const std::string& name = w.name;
  const int ranks = comm.size();
  const size_t chunks = w.chunk_bytes.size();
  if (options.releases.size() != chunks || w.chunk_group.size() != chunks)
    return error(Code::invalid_argument, "{} exchange: {} chunks but {} release counts and {} groups", name, chunks,
                 options.releases.size(), w.chunk_group.size());
  const uint64_t eb = element_size(w);
  if (inner.chunk_count() != chunks || inner.format() != w.format)
    return error(Code::invalid_argument, "{} exchange: the inner offloader has {} chunks in another layout; build it "
                 "from gradient_shard_options", name, inner.chunk_count());
  for (size_t c = 0; c < chunks; ++c) {
    if (options.releases[c] == 0)
      return error(Code::invalid_argument, "{} exchange: chunk {} gets no release per backward", name, c);
    if (w.chunk_group[c] >= w.group_slots.size() || w.group_slots[w.chunk_group[c]] == 0)
      return error(Code::invalid_argument, "{} exchange: chunk {} is in group {}, which has no slots", name, c,
                   w.chunk_group[c]);
    const ChunkShard shard = chunk_shard(w.chunk_bytes[c] / eb, ranks, comm.rank());
    if (inner.chunk_bytes(c) != shard.stride * eb)
      return error(Code::invalid_argument, "{} exchange: the inner offloader's chunk {} has {} bytes, not the shard's "
                   "{}; build it from gradient_shard_options", name, c, inner.chunk_bytes(c), shard.stride * eb);
  }

  std::unique_ptr<GradientExchange> x(new GradientExchange(backend, comm, inner, options));
  x->element_bytes_ = eb;
  const auto take = [&](uint64_t bytes, const std::string& tag) -> StatusOr<std::byte*> {
    STRATA_ASSIGN_OR_RETURN(void* p, backend.allocate(bytes, fmt::format("{} exchange {}", name, tag)));
    x->blocks_owned_.push_back(p);
    return static_cast<std::byte*>(p);
  };
  const uint64_t n = uint64_t(ranks);
  std::vector<uint64_t> group_bytes(w.group_slots.size(), 0);
  uint64_t received = 0;
  x->stacks_.assign(chunks, nullptr);
  for (size_t c = 0; c < chunks; ++c) {
    x->shards_.push_back(chunk_shard(w.chunk_bytes[c] / eb, ranks, comm.rank()));
    const uint64_t padded = n * x->shards_[c].stride * eb;
    group_bytes[w.chunk_group[c]] = std::max(group_bytes[w.chunk_group[c]], padded);
    if (options.releases[c] > 1) {
      STRATA_ASSIGN_OR_RETURN(x->stacks_[c], take(uint64_t(options.releases[c]) * padded,
                                                  fmt::format("stack (chunk {})", c)));
    } else {
      received = std::max(received, padded);
    }
    x->blocks_ += x->shards_[c].stride / kernels::kSumSquaresBlock;
  }
  if (received > 0) {
    STRATA_ASSIGN_OR_RETURN(x->received_, take(received, "received"));
  }
  x->slots_ = SlotRing(w.group_slots.size(), w.chunk_group);
  for (size_t g = 0; g < w.group_slots.size(); ++g) {
    if (group_bytes[g] == 0) continue;
    const std::string group_name = slot_group_name(w.group_names, g);
    for (uint32_t s = 0; s < w.group_slots[g]; ++s) {
      STRATA_ASSIGN_OR_RETURN(std::byte* slot, take(group_bytes[g], fmt::format("slot ({}) {}/{}", group_name, s + 1,
                                                                               w.group_slots[g])));
      x->slots_.add_slot(g, slot);
    }
  }
  STRATA_ASSIGN_OR_RETURN(std::byte* partials, take(n * x->blocks_ * sizeof(double), "norm partials"));
  x->partials_ = reinterpret_cast<double*>(partials);
  x->gathered_.resize(n * x->blocks_);
  x->released_.assign(chunks, 0);
  return x;
}

Status GradientExchange::begin_step() {
  STRATA_RETURN_IF_ERROR(inner_.begin_step());
  if (const int64_t c = slots_.first_held(); c >= 0)
    return error(Code::failed_precondition, "{} exchange: begin_step while chunk {} is held", options_.chunks.name, c);
  released_.assign(released_.size(), 0);
  in_step_ = true;
  return Status::ok();
}

StatusOr<std::byte*> GradientExchange::acquire(size_t c) {
  const std::string& name = options_.chunks.name;
  if (c >= shards_.size())
    return error(Code::invalid_argument, "{} exchange: chunk {} out of range ({} chunks)", name, c, shards_.size());
  if (!in_step_) return error(Code::failed_precondition, "{} exchange: acquire of chunk {} outside a step", name, c);
  if (slots_.held(c) != nullptr)
    return error(Code::failed_precondition, "{} exchange: chunk {} is already held", name, c);
  std::byte* slot = slots_.take(c);
  if (slot == nullptr)
    return error(Code::failed_precondition, "{} exchange: every slot of chunk {}'s group is held", name, c);
  // Stream order: the slot's last all-to-all is queued on compute before this fill.
  STRATA_RETURN_IF_ERROR(
      backend_.fill_zero(slot, uint64_t(comm_.size()) * shards_[c].stride * element_bytes_, Stream::compute));
  return slot;
}

Status GradientExchange::release(size_t c, bool last) {
  const std::string& name = options_.chunks.name;
  std::byte* slot = c < shards_.size() ? slots_.held(c) : nullptr;
  if (slot == nullptr)
    return error(Code::failed_precondition, "{} exchange: release of chunk {}, which is not held", name, c);
  slots_.put(c);
  const uint32_t j = released_[c]++;
  if (j >= options_.releases[c])
    return error(Code::failed_precondition, "{} exchange: release {} of chunk {} in one backward, which releases it "
                 "{} time(s)", name, j + 1, c, options_.releases[c]);
  const uint64_t block = shards_[c].stride * element_bytes_;
  std::byte* to = stacks_[c] != nullptr ? stacks_[c] + uint64_t(j) * uint64_t(comm_.size()) * block : received_;
  STRATA_RETURN_IF_ERROR(comm_.all_to_all(slot, to, block, Stream::compute));
  if (!last) {
    if (stacks_[c] == nullptr)
      return error(Code::failed_precondition, "{} exchange: chunk {} released with more to come, but it has one "
                   "release per backward", name, c);
    return Status::ok();
  }
  released_[c] = 0;  // the next backward (round) starts over
  return hand_over(c, j + 1);
}

// The received blocks of chunk c's `releases` releases into the inner offloader, rank-major,
// release-minor, each through one of its slots (a device copy on the compute stream).
Status GradientExchange::hand_over(size_t c, uint32_t releases) {
  const uint64_t n = uint64_t(comm_.size()), block = shards_[c].stride * element_bytes_;
  const std::byte* from = stacks_[c] != nullptr ? stacks_[c] : received_;
  for (uint64_t r = 0; r < n; ++r) {
    for (uint32_t k = 0; k < releases; ++k) {
      STRATA_ASSIGN_OR_RETURN(std::byte* slot, inner_.acquire(c));
      STRATA_RETURN_IF_ERROR(backend_.copy_on_device(slot, from + (uint64_t(k) * n + r) * block, block, Stream::compute));
      STRATA_RETURN_IF_ERROR(inner_.release(c, /*last=*/r + 1 == n && k + 1 == releases));
    }
  }
  return Status::ok();
}

StatusOr<double> GradientExchange::finish_step() {
  const std::string& name = options_.chunks.name;
  if (!in_step_) return error(Code::failed_precondition, "{} exchange: finish_step without begin_step", name);
  if (const int64_t c = slots_.first_held(); c >= 0)
    return error(Code::failed_precondition, "{} exchange: finish_step while chunk {} is held", name, c);
  for (size_t c = 0; c < released_.size(); ++c) {
    if (released_[c] != 0)
      return error(Code::failed_precondition, "{} exchange: chunk {} got {} of its {} releases in the last backward",
                   name, c, released_[c], options_.releases[c]);
  }
  in_step_ = false;
  STRATA_RETURN_IF_ERROR(inner_.finish_step().status());
  // This rank's blocks, every chunk's in chunk order, then every rank's in rank order.
  const uint64_t n = uint64_t(comm_.size()), rank = uint64_t(comm_.rank());
  double* mine_host = gathered_.data() + rank * blocks_;
  uint64_t at = 0;
  for (size_t c = 0; c < shards_.size(); ++c) {
    const std::span<const double> b = inner_.block_partials(c);
    std::copy(b.begin(), b.end(), mine_host + at);
    at += b.size();
  }
  double* mine = partials_ + rank * blocks_;
  STRATA_RETURN_IF_ERROR(backend_.copy_to_device(mine, mine_host, blocks_ * sizeof(double), Stream::compute));
  STRATA_RETURN_IF_ERROR(comm_.all_gather(mine, partials_, blocks_ * sizeof(double), Stream::compute));
  STRATA_RETURN_IF_ERROR(comm_.synchronize(Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_host(gathered_.data(), partials_, gathered_.size() * sizeof(double),
                                               Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::compute));
  // Chunk c's blocks in order: rank r's shard holds its blocks [r x per_rank, (r + 1) x per_rank);
  // the blocks past the chunk's end are zeros (x + 0.0 == x: summing them changes no bit).
  double total = 0.0;
  at = 0;
  for (size_t c = 0; c < shards_.size(); ++c) {
    const uint64_t per_rank = shards_[c].stride / kernels::kSumSquaresBlock;
    double chunk = 0.0;
    for (uint64_t r = 0; r < n; ++r)
      for (uint64_t b = 0; b < per_rank; ++b) chunk += gathered_[r * blocks_ + at + b];
    at += per_rank;
    total += chunk;
  }
  return total;
}

}  // namespace strata
