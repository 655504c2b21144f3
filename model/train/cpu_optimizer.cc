// CpuOptimizer: AdamW on the CPU, walked chunk by chunk (see cpu_optimizer.h).
#include "model/train/cpu_optimizer.h"

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "offload/cpu_adam.h"

namespace strata::model {

namespace {

std::vector<bool> every_chunk_or(const std::vector<bool>& updates, size_t chunks) {
  return updates.empty() ? std::vector<bool>(chunks, true) : updates;
}

}  // namespace

CpuOptimizer::CpuOptimizer(OptimizerState& state, GradientOffloader& grads, WeightSource& weights, ThreadPool* pool,
                           const TrainOptions& options, uint64_t element_bytes, TraceRecorder* trace,
                           ShardGather* gather, const std::vector<bool>& updates)
    : state_(state), grads_(grads), weights_(weights), pool_(pool), options_(options), element_bytes_(element_bytes),
      trace_(trace), gather_(gather), route_(every_chunk_or(updates, state.chunk_count())),
      walk_(state.pieces_where(every_chunk_or(updates, state.chunk_count()))) {}

size_t CpuOptimizer::next_mine(size_t c) const {
  for (size_t n = c + 1; n < state_.chunk_count(); ++n)
    if (mine(n)) return n;
  return state_.chunk_count();
}

// AdamW over the tensors of one piece on the CPU: decaying tensors (>= 2 dims) and the others
// (norms, biases) in two calls. Gradients: the offloader's fp32 sums of the piece's chunk; for
// 16-bit training the rounded weights go straight into `copy_out` (the chunk's update buffer,
// working layout).
Status CpuOptimizer::adam(size_t p, const ChunkState& state, const float* grads, std::byte* copy_out) {
  CpuAdamOptions o;
  o.hyper = options_.adam_hyper;
  o.hyper.lr = float(pending_->lr);
  o.hyper.step = pending_->step;  // bias correction counts applied updates only
  o.hyper.grad_scale = float(pending_->grad_multiplier);
  o.formats = kernels::AdamFormats{.grad = kernels::FloatFormat::f32, .copy = adam_copy_out(options_.dtype)};
  o.states = options_.adam_states;
  const bool q8 = options_.adam_states == AdamStates::q8;
  std::vector<CpuAdamTensor> group;
  for (const bool decayed : {true, false}) {
    group.clear();
    for (const PieceTensor& r : state_.tensors(p)) {
      if (r.decay != decayed) continue;
      CpuAdamTensor t;
      t.param = state.master + r.master_element;
      if (q8) {
        t.m_code = state.m_code + r.master_element;
        t.v_code = state.v_code + r.master_element;
        t.m_scale = state.m_scale + r.scale_at;
        t.v_scale = state.v_scale + r.scale_at;
      } else {
        t.m = state.m + r.master_element;
        t.v = state.v + r.master_element;
      }
      t.n = r.n;
      t.grad = grads + r.grad_at;
      t.copy_out = o.formats.copy == kernels::CopyOut::none ? nullptr : copy_out + r.work_at * element_bytes_;
      group.push_back(t);
    }
    if (!decayed) o.hyper.weight_decay = 0.0f;
    STRATA_RETURN_IF_ERROR(cpu_adam_step(pool_, group, o).status());
  }
  return Status::ok();
}

// The update of one piece, its state visited by the walk. At a chunk's first piece chunk c + 1's
// spilled gradient read begins (it proceeds while chunk c is updated) and c's is waited for; Adam
// over each piece writes its new working weights into the weight source's update buffer of the
// chunk, and after the chunk's last piece the commit sends them home. fp32 training updates the
// masters in place and copies them out. The same arithmetic per element as one pass over
// everything, whenever it runs: the order, the pieces and the timing change no bit.
Status CpuOptimizer::update_piece(size_t p, ChunkState& state) {
  const StatePiece& piece = state_.pieces()[p];
  const size_t c = piece.chunk;
  if (updating_.chunk != c) {
    // The read ahead is best effort: with no spill buffer for c + 1 free of reads (c holds the
    // only one large enough), wait_read(c + 1) begins it after end_read(c).
    if (const size_t next = next_mine(c); next < state_.chunk_count()) {
      const Status ahead = grads_.begin_read(local(next));
      if (!ahead.is_ok() && ahead.code() != Code::failed_precondition) return ahead;
    }
    STRATA_ASSIGN_OR_RETURN(const float* grads, grads_.wait_read(local(c)));
    updating_ = {.chunk = c, .grads = grads};
    STRATA_ASSIGN_OR_RETURN(updating_.out, weights_.update_buffer(c));
  }
  const double t0 = trace_ ? trace_->now_us() : 0;
  STRATA_RETURN_IF_ERROR(adam(p, state, updating_.grads, updating_.out));
  if (options_.dtype == DType::f32)
    std::memcpy(updating_.out + piece.element_begin * sizeof(float), state.master, piece.elements() * sizeof(float));
  if (trace_) trace_->span("cpu adam", fmt::format("chunk {}", c), t0, trace_->now_us());
  if (!state_.last_of_chunk(p)) return Status::ok();
  grads_.end_read(local(c));
  std::byte* out = updating_.out;
  updating_ = {};
  return land(c, out);
}

Status CpuOptimizer::land(size_t c, std::byte* out) {
  if (gather_ != nullptr) {
    const ChunkShard& shard = state_.shard(c);
    const uint64_t eb = element_bytes_;
    const double t0 = trace_ ? trace_->now_us() : 0;
    STRATA_RETURN_IF_ERROR(gather_->gather(out + shard.begin * eb, shard.elements() * eb, shard.stride * eb, out,
                                           weights_.chunk_bytes(c)));
    if (trace_) trace_->span("weight gather", fmt::format("chunk {}", c), t0, trace_->now_us());
  }
  next_chunk_ = c + 1;
  return weights_.commit_update(c);
}

void CpuOptimizer::abandon() {
  pending_.reset();
  if (updating_.chunk != SIZE_MAX) grads_.end_read(local(updating_.chunk));
  updating_ = {};
  for (size_t c = 0; c < state_.chunk_count(); ++c)
    if (mine(c)) weights_.expect_update(c, false);  // no more commits
}

Status CpuOptimizer::begin_update(const UpdateStep& update) {
  if (pending_) return error(Code::failed_precondition, "an optimizer update begun while the last one is pending");
  if (walk_.empty()) return Status::ok();  // a split whose every chunk updates on the device
  STRATA_RETURN_IF_ERROR(grads_.begin_read(local(state_.pieces()[walk_.front()].chunk)));
  STRATA_RETURN_IF_ERROR(state_.pipeline().begin_walk(walk_, /*write_back=*/true));
  pending_ = update;
  next_chunk_ = 0;
  // Every chunk's weights are about to change: a weight source that reads ahead leaves them be.
  for (size_t c = 0; c < state_.chunk_count(); ++c)
    if (mine(c)) weights_.expect_update(c, true);
  return Status::ok();
}

// The chunks land in order: a chunk with pieces when the walk has visited its last piece, one
// without (across ranks, a chunk this rank homes none of) with an update buffer left as the
// gather fills it.
Status CpuOptimizer::apply(size_t through) {
  if (!pending_) return Status::ok();
  OptimizerPipeline& walk = state_.pipeline();
  const auto visit = [this](size_t p, ChunkState& state) { return update_piece(p, state); };
  while (next_chunk_ < state_.chunk_count() && next_chunk_ <= through) {
    if (!mine(next_chunk_)) {  // a split update's device part
      ++next_chunk_;
      continue;
    }
    Status s;
    if (state_.pieces_of(next_chunk_).empty()) {
      grads_.end_read(local(next_chunk_));  // the read ahead of the chunk before may have begun it
      StatusOr<std::byte*> out = weights_.update_buffer(next_chunk_);
      s = out.is_ok() ? land(next_chunk_, *out) : out.status();
      if (!s.is_ok() && walk.walking()) (void)walk.end_walk();  // the visited pieces' writes finish
    } else {
      s = walk.visit_next(visit);
    }
    if (!s.is_ok()) {
      // The walk has ended; the chunks before the failing one are updated.
      abandon();
      return s;
    }
  }
  if (next_chunk_ < state_.chunk_count()) return Status::ok();
  pending_.reset();
  return walk.end_walk();
}

}  // namespace strata::model
