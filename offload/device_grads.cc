// DeviceGrads (device_grads.h): gradients accumulated in fp32 on the device, the norm by blocks.
#include "offload/device_grads.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/cpu/grad_accumulate.h"

namespace strata {

StatusOr<std::unique_ptr<DeviceGrads>> DeviceGrads::create(Backend& backend, DType dtype,
                                                           const std::vector<uint64_t>& chunk_bytes,
                                                           const std::vector<std::string>& chunk_names,
                                                           const std::string& name) {
  if (chunk_bytes.empty() || chunk_names.size() != chunk_bytes.size())
    return error(Code::invalid_argument, "device gradients '{}': {} chunks and {} names", name, chunk_bytes.size(),
                 chunk_names.size());
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    return error(Code::invalid_argument, "device gradients '{}': {} is not a gradient format", name, dtype_name(dtype));
  std::unique_ptr<DeviceGrads> g(new DeviceGrads(backend, dtype, chunk_bytes));
  g->name_ = name;
  g->chunk_names_ = chunk_names;
  for (size_t c = 0; c < chunk_bytes.size(); ++c) {
    if (chunk_bytes[c] == 0 || chunk_bytes[c] % dtype_size(dtype) != 0)
      return error(Code::invalid_argument, "device gradients '{}': chunk {} has {} bytes, not a positive multiple of {}",
                   name, c, chunk_bytes[c], dtype_size(dtype));
    STRATA_ASSIGN_OR_RETURN(void* work,
                            g->allocate(chunk_bytes[c], fmt::format("{} gradients ({})", name, chunk_names[c])));
    g->work_.push_back(static_cast<std::byte*>(work));
    g->shards_.push_back(chunk_shard(g->elements(c), 1, 0));
  }
  g->held_.assign(chunk_bytes.size(), Held::none);
  return g;
}

StatusOr<void*> DeviceGrads::allocate(uint64_t bytes, const std::string& tag) {
  STRATA_ASSIGN_OR_RETURN(void* block, backend_.allocate(bytes, tag));
  blocks_.push_back(block);
  return block;
}

// The fp32 sums (whole, or this rank's shards), across ranks the exchange buffers, and the
// norm's block partials (every rank's across ranks), at the first step: after spread_over_ranks,
// so the whole sums are never allocated on a rank that keeps shards.
Status DeviceGrads::allocate_sums() {
  if (!acc_.empty()) return Status::ok();
  const int ranks = comm_ != nullptr ? comm_->size() : 1;
  const bool spread = partitioned();  // even a world of one (strata train --comm local|nccl)
  uint64_t exchange = 0;  // floats
  partial_at_ = {0};
  stacks_.assign(work_.size(), nullptr);
  for (size_t c = 0; c < work_.size(); ++c) {
    const uint64_t stride = shards_[c].stride;
    const uint64_t floats = spread ? stride : elements(c);
    STRATA_ASSIGN_OR_RETURN(void* sum, allocate(floats * sizeof(float),
                                                fmt::format("{} fp32 gradient sums ({}{})", name_, chunk_names_[c],
                                                            spread ? ", this rank's shard" : "")));
    acc_.push_back(static_cast<float*>(sum));
    partial_at_.push_back(partial_at_.back() + (floats + kernels::kSumSquaresBlock - 1) / kernels::kSumSquaresBlock);
    if (!spread) continue;
    exchange = std::max(exchange, uint64_t(ranks) * stride);
    if (releases_[c] == 1) continue;
    STRATA_ASSIGN_OR_RETURN(void* stack, allocate(uint64_t(releases_[c]) * uint64_t(ranks) * stride * sizeof(float),
                                                  fmt::format("{} gradients: the ranks' shards of {}'s {} releases",
                                                              name_, chunk_names_[c], releases_[c])));
    stacks_[c] = static_cast<float*>(stack);
  }
  if (spread) {
    STRATA_ASSIGN_OR_RETURN(void* buffer, allocate(exchange * sizeof(float),
                                                   fmt::format("{} gradients: a release by destination rank", name_)));
    exchange_ = static_cast<float*>(buffer);
  }
  if (spread && micro_batches_ > 1) {
    STRATA_ASSIGN_OR_RETURN(void* buffer, allocate(exchange * sizeof(float),
                                                   fmt::format("{} gradients: a later round's shards", name_)));
    received_ = static_cast<float*>(buffer);
  }
  rank_partials_ = partial_at_.back();
  STRATA_ASSIGN_OR_RETURN(void* partials, allocate(uint64_t(ranks) * rank_partials_ * sizeof(double),
                                                   fmt::format("{} norm partials", name_)));
  partials_ = static_cast<double*>(partials);
  host_partials_.assign(uint64_t(ranks) * rank_partials_, 0.0);
  return Status::ok();
}

uint64_t DeviceGrads::device_bytes(DType dtype, const std::vector<uint64_t>& chunk_bytes,
                                   const std::vector<uint32_t>& releases, int ranks, uint64_t align,
                                   uint64_t micro_batches, bool spread) {
  spread = spread || ranks > 1;
  const auto aligned = [align](uint64_t b) { return (b + align - 1) / align * align; };
  constexpr uint64_t kBlock = kernels::kSumSquaresBlock;
  uint64_t bytes = 0, partials = 0, exchange = 0;
  for (size_t c = 0; c < chunk_bytes.size(); ++c) {
    const uint64_t elements = chunk_bytes[c] / dtype_size(dtype);
    bytes += aligned(chunk_bytes[c]);
    if (!spread) {
      bytes += aligned(elements * sizeof(float));
      partials += (elements + kBlock - 1) / kBlock;
      continue;
    }
    const uint64_t stride = chunk_shard(elements, ranks, 0).stride;
    bytes += aligned(stride * sizeof(float));
    partials += stride / kBlock;
    exchange = std::max(exchange, uint64_t(ranks) * stride);
    if (releases.at(c) > 1) bytes += aligned(uint64_t(releases[c]) * uint64_t(ranks) * stride * sizeof(float));
  }
  if (spread) bytes += (micro_batches > 1 ? 2 : 1) * aligned(exchange * sizeof(float));
  return bytes + aligned(uint64_t(ranks) * partials * sizeof(double));
}

DeviceGrads::~DeviceGrads() {
  Status s = backend_.synchronize_all();
  if (!s.is_ok()) spdlog::warn("device gradients: releasing memory after a failed stream: {}", s);
  for (void* block : blocks_) {
    s = backend_.release(block);
    if (!s.is_ok()) spdlog::warn("device gradients: {}", s);
  }
}

Status DeviceGrads::check(size_t c, const char* what) const {
  if (c >= work_.size())
    return error(Code::out_of_range, "device gradients: {} of chunk {} but there are {} chunks", what, c, work_.size());
  return Status::ok();
}

Status DeviceGrads::begin_step() {
  STRATA_RETURN_IF_ERROR(allocate_sums());
  held_.assign(work_.size(), Held::none);
  released_.assign(work_.size(), 0);
  rounds_.assign(work_.size(), 0);
  return Status::ok();
}

Status DeviceGrads::spread_over_ranks(Communicator& comm, const std::vector<uint32_t>& releases,
                                      uint64_t micro_batches) {
  if (comm_ != nullptr) return error(Code::failed_precondition, "device gradients: already spread over ranks");
  if (!acc_.empty())
    return error(Code::failed_precondition, "device gradients: spread over ranks after a step (before the first)");
  if (releases.size() != work_.size())
    return error(Code::invalid_argument, "device gradients: {} release counts for {} chunks", releases.size(),
                 work_.size());
  for (size_t c = 0; c < work_.size(); ++c)
    if (releases[c] == 0)
      return error(Code::invalid_argument, "device gradients: chunk {} gets no release per backward", c);
  if (micro_batches == 0)
    return error(Code::invalid_argument, "device gradients: 0 micro-batches a rank per step");
  for (size_t c = 0; c < work_.size(); ++c) shards_[c] = chunk_shard(elements(c), comm.size(), comm.rank());
  releases_ = releases;
  released_.assign(work_.size(), 0);
  rounds_.assign(work_.size(), 0);
  micro_batches_ = micro_batches;
  comm_ = &comm;
  return Status::ok();
}

StatusOr<std::byte*> DeviceGrads::acquire(size_t c) {
  STRATA_RETURN_IF_ERROR(check(c, "acquire"));
  STRATA_RETURN_IF_ERROR(allocate_sums());
  if (held_[c] == Held::in_work) {  // a second contribution: the first is widened before the buffer is reused
    STRATA_RETURN_IF_ERROR(
        backend_.ops().accumulate_widened(acc_[c], work_[c], dtype_, int64_t(elements(c)), /*first=*/true));
  }
  if (held_[c] != Held::none) held_[c] = Held::in_acc;
  STRATA_RETURN_IF_ERROR(backend_.fill_zero(work_[c], bytes_[c]));
  return work_[c];
}

Status DeviceGrads::release(size_t c, bool /*last*/) {
  STRATA_RETURN_IF_ERROR(check(c, "release"));
  if (comm_ != nullptr) {  // widened into the exchange buffer; the last release sends the shards
    const uint32_t j = released_[c]++;
    if (j >= releases_[c])
      return error(Code::failed_precondition, "device gradients: release {} of chunk {} in one backward, which "
                   "releases it {} time(s)", j + 1, c, releases_[c]);
    STRATA_RETURN_IF_ERROR(widen_for_ranks(c));
    held_[c] = Held::in_acc;
    return exchange(c, j);
  }
  if (held_[c] == Held::none) {
    held_[c] = Held::in_work;
    return Status::ok();
  }
  return backend_.ops().accumulate_widened(acc_[c], work_[c], dtype_, int64_t(elements(c)), /*first=*/false);
}

DeviceGrads::Sum DeviceGrads::gradient(size_t c) const {
  if (held_.at(c) == Held::in_work || held_[c] == Held::in_work_also) return {work_[c], dtype_};
  return {acc_[c], DType::f32};
}

StatusOr<const float*> DeviceGrads::widened(size_t c) {
  STRATA_RETURN_IF_ERROR(check(c, "widened"));
  STRATA_RETURN_IF_ERROR(allocate_sums());
  if (comm_ != nullptr)
    return error(Code::failed_precondition, "device gradients: chunk {}'s whole sum is read, but the gradient is "
                 "partitioned over {} ranks (this rank holds elements [{}, {}))", c, comm_->size(), shards_[c].begin,
                 shards_[c].end);
  if (held_[c] == Held::in_work) {
    STRATA_RETURN_IF_ERROR(
        backend_.ops().accumulate_widened(acc_[c], work_[c], dtype_, int64_t(elements(c)), /*first=*/true));
    held_[c] = Held::in_work_also;
  }
  return acc_[c];
}

// A release of chunk c widened into the exchange buffer laid out by destination: block d holds the
// elements rank d homes, zeros past the chunk's end.
Status DeviceGrads::widen_for_ranks(size_t c) {
  const uint64_t n = elements(c), stride = shards_[c].stride;
  for (int d = 0; d < comm_->size(); ++d) {
    const ChunkShard to = chunk_shard(n, comm_->size(), d);
    float* block = exchange_ + uint64_t(d) * stride;
    if (to.elements() > 0)
      STRATA_RETURN_IF_ERROR(backend_.ops().accumulate_widened(block, work_[c] + to.begin * dtype_size(dtype_), dtype_,
                                                               int64_t(to.elements()), /*first=*/true));
    if (to.elements() < stride)
      STRATA_RETURN_IF_ERROR(backend_.fill_zero(block + to.elements(), (stride - to.elements()) * sizeof(float)));
  }
  return Status::ok();
}

// Release j of chunk c (in the exchange buffer) to the shards' owners, queued on the compute stream:
// one release of the step's first round is reduce-scattered into acc(c) (the ranks' sum in rank
// order, from the first); of a later round, sent all-to-all into the receive buffer and added to
// acc(c) rank by rank; of several releases, each is sent all-to-all into the chunk's stack
// ([release][rank][stride]) and the last adds them, rank-major, release-minor, into acc(c). The
// backward's last release ends the chunk's round.
Status DeviceGrads::exchange(size_t c, uint32_t j) {
  const uint64_t stride = shards_[c].stride, ranks = uint64_t(comm_->size()), R = releases_[c];
  const bool first_round = rounds_[c] == 0;
  if (j + 1 == R) {
    released_[c] = 0;
    ++rounds_[c];
  }
  if (stacks_[c] == nullptr && first_round) return comm_->reduce_scatter(exchange_, acc_[c], stride, Stream::compute);
  float* to = stacks_[c] != nullptr ? stacks_[c] + j * ranks * stride : received_;
  if (to == nullptr)
    return error(Code::failed_precondition, "device gradients: chunk {} released in backward {} of a step, but "
                 "spread_over_ranks was told of {} micro-batch(es) a rank", c, rounds_[c], micro_batches_);
  STRATA_RETURN_IF_ERROR(comm_->all_to_all(exchange_, to, stride * sizeof(float), Stream::compute));
  if (j + 1 < R) return Status::ok();
  const float* from = stacks_[c] != nullptr ? stacks_[c] : received_;
  for (uint64_t r = 0; r < ranks; ++r)
    for (uint64_t k = 0; k < R; ++k)
      STRATA_RETURN_IF_ERROR(backend_.ops().accumulate_widened(acc_[c], from + (k * ranks + r) * stride, DType::f32,
                                                               int64_t(stride),
                                                               /*first=*/first_round && r == 0 && k == 0));
  return Status::ok();
}

// Each rank's blocks of its shards, all-gathered, summed per chunk in block order (rank-major,
// which is block order: rank r's shard holds blocks [r x stride / block, ...)).
StatusOr<double> DeviceGrads::norm_over_ranks() {
  const int ranks = comm_->size();
  double* mine = partials_ + uint64_t(comm_->rank()) * rank_partials_;
  for (size_t c = 0; c < work_.size(); ++c) {
    if (released_[c] != 0)
      return error(Code::failed_precondition, "device gradients: chunk {} got {} of its {} releases in the last "
                   "backward", c, released_[c], releases_[c]);
    if (rounds_[c] == 0) {  // no contribution on this rank (nor, the same model, on any): zeros exchanged
      STRATA_RETURN_IF_ERROR(backend_.fill_zero(exchange_, uint64_t(ranks) * shards_[c].stride * sizeof(float)));
      for (uint32_t j = 0; j < releases_[c]; ++j) STRATA_RETURN_IF_ERROR(exchange(c, j));
      held_[c] = Held::in_acc;
    }
    if (shards_[c].elements() > 0)
      STRATA_RETURN_IF_ERROR(backend_.ops().sum_squares_blocks(mine + partial_at_[c], acc_[c], DType::f32,
                                                               int64_t(shards_[c].elements())));
  }
  STRATA_RETURN_IF_ERROR(comm_->all_gather(mine, partials_, rank_partials_ * sizeof(double), Stream::compute));
  STRATA_RETURN_IF_ERROR(comm_->synchronize(Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_host(host_partials_.data(), partials_,
                                               host_partials_.size() * sizeof(double), Stream::d2h));
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::d2h));
  double total = 0.0;
  for (size_t c = 0; c < work_.size(); ++c) {
    const uint64_t blocks = (elements(c) + kernels::kSumSquaresBlock - 1) / kernels::kSumSquaresBlock;
    const uint64_t per_rank = partial_at_[c + 1] - partial_at_[c];
    double chunk = 0.0;  // kernels::sum_squares's order: blocks in order from +0.0
    for (uint64_t b = 0; b < blocks; ++b)
      chunk += host_partials_[(b / per_rank) * rank_partials_ + partial_at_[c] + b % per_rank];
    total += chunk;
  }
  return total;
}

StatusOr<double> DeviceGrads::finish_step() {
  STRATA_RETURN_IF_ERROR(allocate_sums());
  if (comm_ != nullptr) return norm_over_ranks();
  for (size_t c = 0; c < work_.size(); ++c) {
    if (held_[c] == Held::none) {  // no contribution this step: the sum is zero
      STRATA_RETURN_IF_ERROR(backend_.fill_zero(acc_[c], elements(c) * sizeof(float)));
      held_[c] = Held::in_acc;
    }
    const Sum sum = gradient(c);
    STRATA_RETURN_IF_ERROR(
        backend_.ops().sum_squares_blocks(partials_ + partial_at_[c], sum.data, sum.format, int64_t(elements(c))));
  }
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_host(host_partials_.data(), partials_,
                                               host_partials_.size() * sizeof(double), Stream::d2h));
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::d2h));
  chunk_partials_.assign(work_.size(), 0.0);
  double total = 0.0;
  for (size_t c = 0; c < work_.size(); ++c) {
    double& chunk = chunk_partials_[c];  // kernels::sum_squares's order: blocks in order from +0.0
    for (uint64_t k = partial_at_[c]; k < partial_at_[c + 1]; ++k) chunk += host_partials_[k];
    total += chunk;
  }
  return total;
}

}  // namespace strata
