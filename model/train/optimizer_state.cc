// OptimizerState: the pieces of the optimizer state, their images and their tensors (see
// optimizer_state.h).
#include "model/train/optimizer_state.h"

#include <algorithm>

#include "kernels/cpu/adam8bit.h"

namespace strata::model {

StatusOr<std::unique_ptr<OptimizerState>> OptimizerState::create(const ParamLayout& layout, const ParamLayout& masters,
                                                                 const TrainOptions& options, PinnedPool& pinned,
                                                                 NvmeStore* store, TraceRecorder* trace, int ranks,
                                                                 int rank) {
  if (ranks > 1 && options.adam_states == AdamStates::q8)
    if (const std::optional<std::string> split = q8_block_split(layout, ranks))
      return error(Code::failed_precondition, "8-bit Adam moments across {} ranks: a rank's shard would cut an 8-bit "
                   "block of {}; pass --optimizer-type adamw, or run on one rank", ranks, *split);
  std::vector<StatePiece> pieces = rank_state_pieces(layout, masters, options.sub_group_size, ranks, rank);
  if (pieces.empty())
    return error(Code::failed_precondition, "across {} ranks rank {} homes none of the model's optimizer state (its "
                 "chunks have too few 4096-element blocks); run on fewer ranks", ranks, rank);
  const OptimizerPipelineOptions po = optimizer_state_options(pieces, options);
  if (po.home == Tier::nvme && store == nullptr)
    return error(Code::invalid_argument, "the optimizer state is homed on NVMe but the trainer got no NVMe store; "
                 "pass --nvme-path DIR");
  std::unique_ptr<OptimizerState> s(new OptimizerState());
  STRATA_ASSIGN_OR_RETURN(s->pipeline_, OptimizerPipeline::create(pinned, po.home == Tier::nvme ? store : nullptr,
                                                                  trace, po));
  s->ranks_ = ranks;
  s->rank_ = rank;
  s->pieces_ = std::move(pieces);
  s->order_.resize(s->pieces_.size());
  for (size_t i = 0; i < s->pieces_.size(); ++i) s->order_[i] = i;
  const size_t chunks = masters.chunks.size();
  s->first_piece_.assign(chunks + 1, s->pieces_.size());
  for (size_t i = s->pieces_.size(); i-- > 0;) s->first_piece_[s->pieces_[i].chunk] = i;
  for (size_t c = chunks; c-- > 0;)  // a chunk without pieces starts where the next one does
    s->first_piece_[c] = std::min(s->first_piece_[c], s->first_piece_[c + 1]);
  std::vector<uint64_t> scales(chunks, 0);  // per chunk: its tensors' 8-bit block scales
  for (const ParamSpec& p : masters.params) scales[size_t(p.chunk)] += kernels::adam8bit_blocks(p.elements);
  for (size_t c = 0; c < chunks; ++c) {
    s->chunk_layouts_.push_back(optimizer_state_layout(options.adam_states, masters.chunks[c].bytes / sizeof(float),
                                                       options.adam_states == AdamStates::q8 ? scales[c] : 0));
    s->shards_.push_back(chunk_shard(layout.chunks[c].bytes / layout.element_bytes, ranks, rank));
    s->master_ranges_.push_back(ranks > 1 ? master_shard(layout, masters, c, ranks, rank)
                                          : ElementRange{0, masters.chunks[c].bytes / sizeof(float)});
  }
  s->build_tensors(layout, masters);
  return s;
}

std::span<const size_t> OptimizerState::pieces_of(size_t chunk) const {
  return std::span(order_).subspan(first_piece_[chunk], first_piece_[chunk + 1] - first_piece_[chunk]);
}

// Each tensor's share of each piece: its place in the piece's state image and in the working
// layout. The images move (NVMe-homed state is visited in whichever staging buffer its read used),
// so the CPU optimizer's tensors are bound per visit from these offsets.
void OptimizerState::build_tensors(const ParamLayout& layout, const ParamLayout& masters) {
  tensors_.assign(pieces_.size(), {});
  std::vector<uint64_t> scales(layout.chunks.size(), 0);  // per chunk: the next tensor's first scale
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const ParamSpec& p = layout.params[i];
    const uint64_t slot = masters.params[i].offset / sizeof(float);
    for (size_t k : pieces_of(p.chunk)) {
      const StatePiece& piece = pieces_[k];
      const uint64_t lo = std::max(slot, piece.element_begin), hi = std::min(slot + p.elements, piece.element_end);
      if (lo >= hi) continue;
      // A cut inside a tensor is a whole number of 8-bit blocks from its start (placement.h).
      tensors_[k].push_back(PieceTensor{.master_element = lo - piece.element_begin,
                                        .scale_at = scales[p.chunk] + (lo - slot) / kernels::kAdam8bitBlock -
                                                    piece.scale_begin,
                                        .work_at = p.offset / layout.element_bytes + (lo - slot),
                                        .grad_at = p.offset / layout.element_bytes + (lo - slot) - shards_[p.chunk].begin,
                                        .n = hi - lo,
                                        .decay = p.weight_decay});
    }
    scales[p.chunk] += kernels::adam8bit_blocks(p.elements);
  }
}

std::vector<size_t> OptimizerState::pieces_where(const std::vector<bool>& chunks) const {
  std::vector<size_t> out;
  for (size_t i : order_)
    if (pieces_[i].chunk < chunks.size() && chunks[pieces_[i].chunk]) out.push_back(i);
  return out;
}

Status OptimizerState::fill_masters(const ChunkValues& produce, bool write_back, const std::vector<size_t>* pieces) {
  std::vector<float> values;  // the chunk being cut into pieces
  if (partitioned() && pieces != nullptr)
    return error(Code::failed_precondition, "the masters of some chunks only are filled on one rank");
  if (partitioned()) {
    // Every chunk is produced on every rank, in chunk order, whether this rank keeps any of it: a
    // producer may be a collective (a partitioned weight source's read gathers the chunk).
    for (size_t c = 0; c < chunk_count(); ++c) {
      values.assign(chunk_layouts_[c].fp32_elements, 0.0f);
      STRATA_RETURN_IF_ERROR(produce(c, values.data()));
      if (pieces_of(c).empty()) continue;
      STRATA_RETURN_IF_ERROR(pipeline_->for_each_chunk(
          pieces_of(c),
          [&](size_t i, ChunkState& state) {
            std::copy_n(values.data() + pieces_[i].element_begin, pieces_[i].elements(), state.master);
            return Status::ok();
          },
          write_back));
    }
    return Status::ok();
  }
  size_t have = SIZE_MAX;
  const auto fill = [&](size_t i, ChunkState& state) -> Status {
    const StatePiece& piece = pieces_[i];
    const size_t c = piece.chunk;
    if (piece.element_begin == 0 && piece.element_end == chunk_layouts_[c].fp32_elements)  // the whole chunk
      return produce(c, state.master);
    if (have != c) {
      values.assign(chunk_layouts_[c].fp32_elements, 0.0f);
      STRATA_RETURN_IF_ERROR(produce(c, values.data()));
      have = c;
    }
    std::copy_n(values.data() + piece.element_begin, piece.elements(), state.master);
    return Status::ok();
  };
  return pipeline_->for_each_chunk(pieces != nullptr ? std::span<const size_t>(*pieces) : order_, fill, write_back);
}

StatusOr<std::vector<float>> OptimizerState::master(const ParamSpec& spec) {
  std::vector<float> out(spec.elements);
  const uint64_t slot = spec.offset / sizeof(float);
  STRATA_RETURN_IF_ERROR(pipeline_->for_each_chunk(
      pieces_of(spec.chunk),
      [&](size_t i, ChunkState& state) {
        const StatePiece& piece = pieces_[i];
        const uint64_t lo = std::max(slot, piece.element_begin), hi = std::min(slot + spec.elements, piece.element_end);
        if (lo < hi) std::copy_n(state.master + (lo - piece.element_begin), hi - lo, out.begin() + (lo - slot));
        return Status::ok();
      },
      /*write_back=*/false));
  return out;
}

}  // namespace strata::model
