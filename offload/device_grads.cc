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
  auto allocate = [&](uint64_t bytes, const std::string& tag) -> StatusOr<std::byte*> {
    STRATA_ASSIGN_OR_RETURN(void* block, backend.allocate(bytes, tag));
    g->blocks_.push_back(block);
    return static_cast<std::byte*>(block);
  };
  g->partial_at_ = {0};
  for (size_t c = 0; c < chunk_bytes.size(); ++c) {
    if (chunk_bytes[c] == 0 || chunk_bytes[c] % dtype_size(dtype) != 0)
      return error(Code::invalid_argument, "device gradients '{}': chunk {} has {} bytes, not a positive multiple of {}",
                   name, c, chunk_bytes[c], dtype_size(dtype));
    STRATA_ASSIGN_OR_RETURN(std::byte* work, allocate(chunk_bytes[c], fmt::format("{} gradients ({})", name, chunk_names[c])));
    g->work_.push_back(work);
    STRATA_ASSIGN_OR_RETURN(std::byte* acc, allocate(g->elements(c) * sizeof(float),
                                                     fmt::format("{} fp32 gradient sums ({})", name, chunk_names[c])));
    g->acc_.push_back(reinterpret_cast<float*>(acc));
    const uint64_t blocks = (g->elements(c) + kernels::kSumSquaresBlock - 1) / kernels::kSumSquaresBlock;
    g->partial_at_.push_back(g->partial_at_.back() + blocks);
  }
  STRATA_ASSIGN_OR_RETURN(std::byte* partials,
                          allocate(g->partial_at_.back() * sizeof(double), fmt::format("{} norm partials", name)));
  g->partials_ = reinterpret_cast<double*>(partials);
  g->host_partials_.resize(g->partial_at_.back());
  g->held_.assign(chunk_bytes.size(), Held::none);
  return g;
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
  held_.assign(work_.size(), Held::none);
  released_.assign(work_.size(), 0);
  return Status::ok();
}

Status DeviceGrads::spread_over_ranks(Communicator& comm, const std::vector<uint32_t>& releases) {
  if (comm_ != nullptr) return error(Code::failed_precondition, "device gradients: already spread over ranks");
  if (comm.size() < 2)
    return error(Code::invalid_argument, "device gradients: spreading over a world of {} rank(s)", comm.size());
  if (releases.size() != work_.size())
    return error(Code::invalid_argument, "device gradients: {} release counts for {} chunks", releases.size(),
                 work_.size());
  uint64_t largest = 0;  // floats of the largest stack
  stacks_.assign(work_.size(), nullptr);
  for (size_t c = 0; c < work_.size(); ++c) {
    if (releases[c] == 0)
      return error(Code::invalid_argument, "device gradients: chunk {} gets no release per step", c);
    if (releases[c] == 1) continue;
    const uint64_t floats = uint64_t(releases[c]) * elements(c);
    STRATA_ASSIGN_OR_RETURN(void* stack, backend_.allocate(floats * sizeof(float),
                                                           fmt::format("device gradients: chunk {}'s {} releases", c,
                                                                       releases[c])));
    blocks_.push_back(stack);
    stacks_[c] = static_cast<float*>(stack);
    largest = std::max(largest, floats);
  }
  if (largest > 0) {
    STRATA_ASSIGN_OR_RETURN(void* gathered, backend_.allocate(largest * sizeof(float) * uint64_t(comm.size()),
                                                              "device gradients: the ranks' gathered releases"));
    blocks_.push_back(gathered);
    gathered_ = static_cast<float*>(gathered);
  }
  releases_ = releases;
  released_.assign(work_.size(), 0);
  comm_ = &comm;
  return Status::ok();
}

StatusOr<std::byte*> DeviceGrads::acquire(size_t c) {
  STRATA_RETURN_IF_ERROR(check(c, "acquire"));
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
  if (comm_ != nullptr) {  // each release into its own fp32 buffer; finish_step sums them over ranks
    const uint32_t j = released_[c]++;
    if (j >= releases_[c])
      return error(Code::failed_precondition, "device gradients: release {} of chunk {} in one step, but across ranks "
                   "each rank runs one micro-batch per step ({} release(s) of this chunk)", j + 1, c, releases_[c]);
    float* into = stacks_[c] != nullptr ? stacks_[c] + uint64_t(j) * elements(c) : acc_[c];
    STRATA_RETURN_IF_ERROR(backend_.ops().accumulate_widened(into, work_[c], dtype_, int64_t(elements(c)), true));
    held_[c] = Held::in_acc;
    return Status::ok();
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
  if (held_[c] == Held::in_work) {
    STRATA_RETURN_IF_ERROR(
        backend_.ops().accumulate_widened(acc_[c], work_[c], dtype_, int64_t(elements(c)), /*first=*/true));
    held_[c] = Held::in_work_also;
  }
  return acc_[c];
}

// Across ranks, chunk by chunk in chunk order on the compute stream (every rank issues the same
// collectives in the same order): the ranks' releases summed rank-major into acc(c).
Status DeviceGrads::sum_over_ranks() {
  for (size_t c = 0; c < work_.size(); ++c) {
    const uint64_t n = elements(c);
    if (released_[c] != 0 && released_[c] != releases_[c])
      return error(Code::failed_precondition, "device gradients: chunk {} got {} of its {} releases this step", c,
                   released_[c], releases_[c]);
    if (released_[c] == 0) {  // no contribution on this rank: it adds zeros
      STRATA_RETURN_IF_ERROR(backend_.fill_zero(stacks_[c] != nullptr ? stacks_[c] : acc_[c],
                                                uint64_t(releases_[c]) * n * sizeof(float)));
      held_[c] = Held::in_acc;
    }
    if (stacks_[c] == nullptr) {
      STRATA_RETURN_IF_ERROR(comm_->all_reduce(acc_[c], acc_[c], n, Stream::compute));
      continue;
    }
    const uint64_t per_rank = uint64_t(releases_[c]) * n;
    STRATA_RETURN_IF_ERROR(comm_->all_gather(stacks_[c], gathered_, per_rank * sizeof(float), Stream::compute));
    for (int r = 0; r < comm_->size(); ++r)
      for (uint32_t j = 0; j < releases_[c]; ++j)
        STRATA_RETURN_IF_ERROR(backend_.ops().accumulate_widened(acc_[c], gathered_ + uint64_t(r) * per_rank + j * n,
                                                                 DType::f32, int64_t(n), r == 0 && j == 0));
  }
  return Status::ok();
}

StatusOr<double> DeviceGrads::finish_step() {
  if (comm_ != nullptr) STRATA_RETURN_IF_ERROR(sum_over_ranks());
  for (size_t c = 0; c < work_.size(); ++c) {
    if (held_[c] == Held::none) {  // no contribution this step: the sum is zero
      STRATA_RETURN_IF_ERROR(backend_.fill_zero(acc_[c], elements(c) * sizeof(float)));
      held_[c] = Held::in_acc;
    }
    const Sum sum = gradient(c);
    STRATA_RETURN_IF_ERROR(
        backend_.ops().sum_squares_blocks(partials_ + partial_at_[c], sum.data, sum.format, int64_t(elements(c))));
  }
  STRATA_RETURN_IF_ERROR(comm_ != nullptr ? comm_->synchronize(Stream::compute) : backend_.synchronize(Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_host(host_partials_.data(), partials_,
                                               host_partials_.size() * sizeof(double), Stream::d2h));
  STRATA_RETURN_IF_ERROR(backend_.synchronize(Stream::d2h));
  double total = 0.0;
  for (size_t c = 0; c < work_.size(); ++c) {
    double chunk = 0.0;  // kernels::sum_squares's order: blocks in order from +0.0
    for (uint64_t k = partial_at_[c]; k < partial_at_[c + 1]; ++k) chunk += host_partials_[k];
    total += chunk;
  }
  return total;
}

}  // namespace strata
