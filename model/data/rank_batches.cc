// RankBatches (rank_batches.h): a rank's micro-batches of each step's group of loader batches.
#include "model/data/rank_batches.h"

namespace strata::model {

StatusOr<RankBatches> RankBatches::create(BatchLoader& loader, int rank, int ranks, uint64_t per_rank) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    return error(Code::invalid_argument, "rank batches: rank {} of {}", rank, ranks);
  if (per_rank == 0) return error(Code::invalid_argument, "rank batches: 0 micro-batches per rank");
  return RankBatches(loader, uint64_t(rank), uint64_t(ranks), per_rank);
}

Status RankBatches::pass_over(uint64_t batches) {
  for (uint64_t i = 0; i < batches; ++i) STRATA_RETURN_IF_ERROR(loader_->next().status());
  read_ += batches;
  return Status::ok();
}

StatusOr<BatchView> RankBatches::next() {
  if (taken_ == per_rank_) {  // the last step's group: pass over the rest of it
    STRATA_RETURN_IF_ERROR(pass_over(group_ - read_));
    read_ = taken_ = 0;
  }
  STRATA_RETURN_IF_ERROR(pass_over(first_ + taken_ * ranks_ - read_));
  STRATA_ASSIGN_OR_RETURN(BatchView batch, loader_->next());
  ++read_;
  ++taken_;
  return batch;
}

StatusOr<LoaderPosition> RankBatches::step_position() {
  if (taken_ == per_rank_) {
    STRATA_RETURN_IF_ERROR(pass_over(group_ - read_));
    read_ = taken_ = 0;
  }
  if (taken_ != 0 || read_ != 0)
    return error(Code::failed_precondition, "rank batches: the position asked in the middle of a step");
  return loader_->position();
}

}  // namespace strata::model
