// ResidentWeights (resident_weights.h): every chunk on the device, updates through pinned staging.
#include "offload/resident_weights.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace strata {

uint64_t resident_weights_pinned_bytes(const std::vector<uint64_t>& chunk_bytes, uint32_t staging) {
  constexpr uint64_t kBlock = 4096;  // PinnedPool rounds every block up to 4 KiB
  const uint64_t largest = chunk_bytes.empty() ? 0 : *std::max_element(chunk_bytes.begin(), chunk_bytes.end());
  return uint64_t(staging) * ((largest + kBlock - 1) / kBlock * kBlock);
}

StatusOr<std::unique_ptr<ResidentWeights>> ResidentWeights::create(Backend& backend, PinnedPool& pinned,
                                                                   const std::vector<uint64_t>& chunk_bytes,
                                                                   const std::vector<std::string>& chunk_names,
                                                                   const std::string& name, uint32_t staging) {
  if (chunk_bytes.empty() || chunk_names.size() != chunk_bytes.size() || staging == 0)
    return error(Code::invalid_argument, "resident weights '{}': {} chunks, {} names, {} staging buffers", name,
                 chunk_bytes.size(), chunk_names.size(), staging);
  std::unique_ptr<ResidentWeights> w(new ResidentWeights(backend, chunk_bytes));
  for (size_t c = 0; c < chunk_bytes.size(); ++c) {
    STRATA_ASSIGN_OR_RETURN(void* block,
                            backend.allocate(chunk_bytes[c], fmt::format("{} weights ({})", name, chunk_names[c])));
    w->chunks_.push_back(static_cast<std::byte*>(block));
  }
  const uint64_t largest = *std::max_element(chunk_bytes.begin(), chunk_bytes.end());
  for (uint32_t i = 0; i < staging; ++i) {
    STRATA_ASSIGN_OR_RETURN(PinnedBuffer buffer, pinned.acquire(largest));
    w->staging_.push_back(std::move(buffer));
    w->uploaded_.push_back(backend.create_event());
  }
  w->computed_ = backend.create_event();
  return w;
}

ResidentWeights::~ResidentWeights() {
  Status s = backend_.synchronize_all();
  if (!s.is_ok()) spdlog::warn("resident weights: releasing memory after a failed stream: {}", s);
  for (std::byte* block : chunks_) {
    s = backend_.release(block);
    if (!s.is_ok()) spdlog::warn("resident weights: {}", s);
  }
}

Status ResidentWeights::check_chunk(size_t c, const char* what) const {
  if (c >= chunks_.size())
    return error(Code::out_of_range, "resident weights: {} of chunk {} but there are {} chunks", what, c,
                 chunks_.size());
  return Status::ok();
}

StatusOr<std::byte*> ResidentWeights::acquire(size_t c) {
  STRATA_RETURN_IF_ERROR(check_chunk(c, "acquire"));
  return chunks_[c];
}

StatusOr<std::byte*> ResidentWeights::acquire_for(size_t c, Stream reader) {
  STRATA_RETURN_IF_ERROR(check_chunk(c, "acquire"));
  if (reader != Stream::compute)
    for (const auto& e : uploaded_) STRATA_RETURN_IF_ERROR(backend_.wait(reader, *e));
  return chunks_[c];
}

Status ResidentWeights::release(size_t c) { return check_chunk(c, "release"); }

StatusOr<std::byte*> ResidentWeights::update_buffer(size_t c) {
  STRATA_RETURN_IF_ERROR(check_chunk(c, "update_buffer"));
  if (pending_chunk_ >= 0)
    return error(Code::failed_precondition, "resident weights: update_buffer({}) while chunk {}'s is not committed",
                 c, pending_chunk_);
  // The buffer's previous upload must have finished reading it.
  STRATA_RETURN_IF_ERROR(backend_.synchronize(*uploaded_[next_staging_]));
  pending_chunk_ = int64_t(c);
  return staging_[next_staging_].data();
}

// The upload starts after the compute work queued so far (which may still read the old values);
// the compute work queued next starts after the upload.
Status ResidentWeights::commit_update(size_t c) {
  STRATA_RETURN_IF_ERROR(check_chunk(c, "commit_update"));
  if (pending_chunk_ != int64_t(c))
    return error(Code::failed_precondition, "resident weights: commit_update({}) without its update_buffer", c);
  pending_chunk_ = -1;
  Event& uploaded = *uploaded_[next_staging_];
  STRATA_RETURN_IF_ERROR(backend_.record(*computed_, Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.wait(Stream::h2d, *computed_));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_device(chunks_[c], staging_[next_staging_].data(), bytes_[c], Stream::h2d));
  STRATA_RETURN_IF_ERROR(backend_.record(uploaded, Stream::h2d));
  STRATA_RETURN_IF_ERROR(backend_.wait(Stream::compute, uploaded));
  next_staging_ = (next_staging_ + 1) % staging_.size();
  return Status::ok();
}

Status ResidentWeights::flush() {
  for (const auto& e : uploaded_) STRATA_RETURN_IF_ERROR(backend_.synchronize(*e));
  return Status::ok();
}

Status ResidentWeights::read(size_t c, std::byte* host) {
  STRATA_RETURN_IF_ERROR(check_chunk(c, "read"));
  STRATA_RETURN_IF_ERROR(backend_.record(*computed_, Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_.wait(Stream::d2h, *computed_));
  for (const auto& e : uploaded_) STRATA_RETURN_IF_ERROR(backend_.wait(Stream::d2h, *e));
  STRATA_RETURN_IF_ERROR(backend_.copy_to_host(host, chunks_[c], bytes_[c], Stream::d2h));
  return backend_.synchronize(Stream::d2h);
}

}  // namespace strata
