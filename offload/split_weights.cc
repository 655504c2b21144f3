// SplitWeights (split_weights.h): each chunk's calls to the source that holds it.
#include "offload/split_weights.h"

#include <memory>
#include <utility>

namespace strata {

StatusOr<std::unique_ptr<SplitWeights>> SplitWeights::create(std::vector<bool> resident, WeightSource& resident_source,
                                                             WeightSource& paged_source) {
  ChunkRoute route(resident);
  if (route.count(true) != resident_source.chunk_count() || route.count(false) != paged_source.chunk_count())
    return error(Code::invalid_argument,
                 "split weights: {} chunks routed to the resident source and {} to the paged one, but they hold {} "
                 "and {}",
                 route.count(true), route.count(false), resident_source.chunk_count(), paged_source.chunk_count());
  return std::unique_ptr<SplitWeights>(new SplitWeights(std::move(route), resident_source, paged_source));
}

StatusOr<std::pair<WeightSource*, size_t>> SplitWeights::find(size_t c, const char* what) const {
  if (c >= route_.size())
    return error(Code::out_of_range, "split weights: {} of chunk {} but there are {} chunks", what, c, route_.size());
  return std::pair<WeightSource*, size_t>(route_.marked(c) ? &resident_ : &paged_, route_.index(c));
}

uint64_t SplitWeights::chunk_bytes(size_t c) const {
  if (c >= route_.size()) return 0;
  return (route_.marked(c) ? resident_ : paged_).chunk_bytes(route_.index(c));
}

Status SplitWeights::begin_sequence(std::string_view name) {
  STRATA_RETURN_IF_ERROR(resident_.begin_sequence(name));
  return paged_.begin_sequence(name);
}

Status SplitWeights::end_sequence() {
  const Status resident = resident_.end_sequence();
  const Status paged = paged_.end_sequence();
  return resident.is_ok() ? paged : resident;
}

StatusOr<std::byte*> SplitWeights::acquire(size_t c) {
  STRATA_ASSIGN_OR_RETURN(auto at, find(c, "acquire"));
  return at.first->acquire(at.second);
}

StatusOr<std::byte*> SplitWeights::acquire_for(size_t c, Stream reader) {
  STRATA_ASSIGN_OR_RETURN(auto at, find(c, "acquire"));
  return at.first->acquire_for(at.second, reader);
}

Status SplitWeights::release(size_t c) {
  STRATA_ASSIGN_OR_RETURN(auto at, find(c, "release"));
  return at.first->release(at.second);
}

StatusOr<std::byte*> SplitWeights::update_buffer(size_t c) {
  STRATA_ASSIGN_OR_RETURN(auto at, find(c, "update buffer"));
  return at.first->update_buffer(at.second);
}

Status SplitWeights::commit_update(size_t c) {
  STRATA_ASSIGN_OR_RETURN(auto at, find(c, "commit"));
  return at.first->commit_update(at.second);
}

Status SplitWeights::flush() {
  const Status resident = resident_.flush();
  const Status paged = paged_.flush();
  return resident.is_ok() ? paged : resident;
}

void SplitWeights::expect_update(size_t c, bool expected) {
  if (c < route_.size()) (route_.marked(c) ? resident_ : paged_).expect_update(route_.index(c), expected);
}

Status SplitWeights::read(size_t c, std::byte* host) {
  STRATA_ASSIGN_OR_RETURN(auto at, find(c, "read"));
  return at.first->read(at.second, host);
}

}  // namespace strata
