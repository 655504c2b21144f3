// Placement (placement.h): slot groups of the model's chunks and the device bytes of a run.
#include "model/plan/placement.h"

#include <algorithm>
#include <list>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "model/net/transformer.h"
#include "model/train/device_optimizer.h"
#include "model/train/optimizer_factory.h"
#include "model/train/step_schedule.h"
#include "offload/chunk_shard.h"
#include "offload/device_grads.h"
#include "offload/gradient_exchange.h"
#include "offload/sharded_weights.h"
#include "runtime/mutex.h"

namespace strata::model {
namespace {

constexpr uint64_t kArenaAlign = 256;  // the arena's block alignment
uint64_t aligned(uint64_t bytes) { return (bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

// Slots of the embedding's or head's group: one whole, two tiled (the first tile, holding GPT-2's
// positions or the final norm, stays while the others pass through the second).
uint32_t table_slots(size_t chunks) { return chunks > 1 ? 2 : 1; }

bool has_mlp_tiles(const ParamLayout& layout) { return layout.layer_chunks() > 1; }

// Slot counts and names per group: layers, embedding, head, and (MLP tiles) the tiles' group:
// two slots, one in use while the next arrives.
template <typename Count>
void set_groups(const ParamLayout& layout, uint32_t layer_slots, std::vector<Count>& slots,
                std::vector<std::string>& names) {
  slots = {layer_slots, table_slots(layout.embedding_chunks()), table_slots(layout.head_chunks())};
  names = {"layers", "embedding", "head"};
  if (has_mlp_tiles(layout)) {
    slots.push_back(2);
    names.push_back("mlp tiles");
  }
}

}  // namespace

std::vector<uint32_t> chunk_groups(const ParamLayout& layout) {
  std::vector<uint32_t> groups;
  for (const ChunkSpec& c : layout.chunks)
    groups.push_back(c.kind == ChunkKind::embedding ? kEmbeddingGroup
                     : c.kind == ChunkKind::head    ? kHeadGroup
                     : c.kind == ChunkKind::layer   ? kLayerGroup
                                                    : kMlpTileGroup);
  return groups;
}

TierManagerOptions paged_weight_options(const ParamLayout& layout, Tier home, uint32_t layer_slots,
                                        uint64_t prefetch_bytes, uint32_t nvme_staging, const std::string& name,
                                        const std::vector<bool>& resident) {
  TierManagerOptions o;
  std::vector<uint32_t> slots;
  std::vector<std::string> names;
  set_groups(layout, layer_slots, slots, names);
  const std::vector<uint32_t> groups = chunk_groups(layout);
  std::vector<uint32_t> paged(slots.size(), 0);  // per group: its paged chunks
  const bool some_resident = std::find(resident.begin(), resident.end(), true) != resident.end();
  for (size_t c = 0; c < layout.chunks.size(); ++c)
    if (!some_resident || !resident[c]) {
      o.chunk_bytes.push_back(layout.chunks[c].bytes);
      o.chunk_group.push_back(groups[c]);
      paged[groups[c]]++;
    }
  // Groups with a paged chunk, renumbered in order.
  std::vector<uint32_t> renumber(slots.size(), 0);
  for (size_t g = 0; g < slots.size(); ++g) {
    if (paged[g] == 0) continue;
    renumber[g] = uint32_t(o.group_slots.size());
    o.group_slots.push_back(g == kLayerGroup && some_resident ? std::min(slots[g], paged[g]) : slots[g]);
    o.group_names.push_back(names[g]);
  }
  for (uint32_t& g : o.chunk_group) g = renumber[g];
  o.home = home;
  o.prefetch_bytes = prefetch_bytes;
  o.nvme_staging = nvme_staging;
  o.name = name + " weights";
  return o;
}

TierManagerOptions run_weight_options(const ParamLayout& layout, const TrainOptions& options, const std::string& name) {
  TierManagerOptions o =
      paged_weight_options(layout, options.weight_home == Tier::nvme ? Tier::nvme : Tier::cpu, options.param_slots,
                           options.prefetch_bytes, options.nvme_staging, name,
                           resident_chunk_mask(layout, options.resident_layers));
  if (options.weight_home == Tier::nvme && options.param_cache > 0 && !options.across_ranks())
    o.cache_chunks = tier_cache_chunks(o, uint64_t(options.param_cache));
  return o;
}

std::vector<bool> resident_chunk_mask(const ParamLayout& layout, int64_t resident_layers) {
  std::vector<bool> mask(layout.chunks.size(), false);
  int64_t layers = 0;
  for (const ChunkSpec& c : layout.chunks) layers += c.kind == ChunkKind::layer;
  if (resident_layers <= 0 || has_mlp_tiles(layout) || layers == 0) return mask;
  const int64_t k = std::min(resident_layers, layers);
  for (size_t c = 0; c < layout.chunks.size(); ++c) {
    const ChunkSpec& chunk = layout.chunks[c];
    if (chunk.kind != ChunkKind::layer) continue;
    const int64_t l = chunk.layer;
    mask[c] = (l + 1) * k / layers > l * k / layers;
  }
  return mask;
}

MaskedChunks masked_chunks(const ParamLayout& layout, const std::vector<bool>& mask) {
  MaskedChunks m;
  for (size_t c = 0; c < layout.chunks.size() && c < mask.size(); ++c)
    if (mask[c]) {
      m.bytes.push_back(layout.chunks[c].bytes);
      m.names.push_back(layout.chunks[c].name);
    }
  return m;
}

int64_t resident_layers_for(const ModelConfig& config, const TrainOptions& options, uint64_t gpu_budget) {
  if (options.weight_home == Tier::device || config.mlp_tiles > 1) return 0;
  if (options.resident_layers >= 0) return std::min<int64_t>(options.resident_layers, config.n_layer);
  const uint64_t usable = gpu_budget - gpu_budget / 64;
  TrainOptions o = options;
  // The layers fill what the step schedule leaves: auto's choice with none resident (layer-major,
  // where it fits, saves K times the paged bytes; a layer kept resident saves its own), so the
  // schedule the run then chooses with them resident is the same.
  if (o.step_schedule == StepSchedule::automatic) {
    o.resident_layers = 0;
    const StatusOr<ScheduleChoice> schedule = choose_step_schedule(config, o, 1, usable);
    o.step_schedule = schedule.is_ok() ? schedule->schedule : StepSchedule::micro_batch_major;
  }
  const auto fits = [&](int64_t k) {
    o.resident_layers = k;
    return estimate_device_bytes(config, o).total() <= usable;
  };
  if (fits(config.n_layer)) return config.n_layer;
  o.resident_layers = 0;
  const uint64_t base = estimate_device_bytes(config, o).total();
  if (base >= usable) return 0;
  // Each resident layer adds its chunk while the layer slots stay (below n_layer - param_slots):
  // the estimate grows by one aligned layer chunk per layer, so this is at most a step or two off.
  const std::shared_ptr<const ParamLayout> layout = shared_param_layout(config, dtype_size(options.dtype)).value();
  uint64_t layer_bytes = 0;
  for (const ChunkSpec& c : layout->chunks)
    if (c.kind == ChunkKind::layer) layer_bytes = std::max(layer_bytes, aligned(c.bytes));
  if (o.split_update) {  // a resident layer also holds its gradient sums and optimizer state
    o.resident_layers = 1;
    const uint64_t one = estimate_device_bytes(config, o).total();
    layer_bytes = std::max(layer_bytes, one > base ? one - base : 0);
  }
  int64_t k = std::min<int64_t>(config.n_layer, int64_t((usable - base) / std::max<uint64_t>(layer_bytes, 1)));
  while (k > 0 && !fits(k)) --k;
  while (k + 1 < config.n_layer && fits(k + 1)) ++k;
  return k;
}

GradientOffloaderOptions gradient_slot_options(const ParamLayout& layout, DType dtype, const std::string& name) {
  GradientOffloaderOptions o;
  o.format = float_format_of(dtype, "gradients").value();
  for (const ChunkSpec& c : layout.chunks) o.chunk_bytes.push_back(c.bytes);
  for (uint32_t g : chunk_groups(layout)) o.chunk_group.push_back(g);
  set_groups(layout, 2, o.group_slots, o.group_names);
  o.name = name + " gradients";
  return o;
}

std::vector<bool> device_update_mask(const ParamLayout& layout, const TrainOptions& options) {
  if (!options.split_update || !options.paged_weights() || options.across_ranks())
    return std::vector<bool>(layout.chunks.size(), false);
  return resident_chunk_mask(layout, options.resident_layers);
}

GradientOffloaderOptions without_chunks(const GradientOffloaderOptions& options, const std::vector<bool>& drop) {
  GradientOffloaderOptions o = options;
  o.chunk_bytes.clear();
  o.chunk_group.clear();
  o.group_slots.clear();
  o.group_names.clear();
  std::vector<size_t> group(options.group_slots.size(), SIZE_MAX);  // old group -> new
  for (size_t c = 0; c < options.chunk_bytes.size(); ++c) {
    if (c < drop.size() && drop[c]) continue;
    const size_t g = options.chunk_group[c];
    if (group[g] == SIZE_MAX) {
      group[g] = o.group_slots.size();
      o.group_slots.push_back(options.group_slots[g]);
      if (g < options.group_names.size()) o.group_names.push_back(options.group_names[g]);
    }
    o.chunk_bytes.push_back(options.chunk_bytes[c]);
    o.chunk_group.push_back(group[g]);
  }
  if (o.group_names.size() != o.group_slots.size()) o.group_names.clear();
  return o;
}

GradientOffloaderOptions gradient_options(const ParamLayout& layout, const TrainOptions& options,
                                          const std::string& name) {
  GradientOffloaderOptions o = without_chunks(gradient_slot_options(layout, options.dtype, name),
                                              device_update_mask(layout, options));
  o.home = options.grad_home == Tier::nvme ? Tier::nvme : Tier::cpu;
  // A tied table's gradient takes the head's contribution first and the embedding's last, so each
  // of its tiles holds a spill buffer through the whole backward: one each, and two more for the
  // layers to pass through (3 when the table is one chunk: a chunk's write overlaps the next's
  // accumulation). An untied table's tiles are each done in turn.
  const bool tied = layout.head_chunks() == 0 || layout.chunks.back().rows == 0;  // no head rows of its own
  const size_t held = tied ? layout.embedding_chunks() : 1;
  o.spill_buffers = uint32_t(std::max<size_t>(3, held + 2));
  return o;
}

namespace {

// The pieces of every chunk of `layout` from its specs `spec(0) .. spec(count - 1)`, which must
// come chunk by chunk, each chunk's by offset; nullopt when they do not (nothing is cut then).
template <typename Spec>
std::optional<std::vector<StatePiece>> cut_pieces(const ParamLayout& layout, size_t count, const Spec& spec,
                                                  uint64_t piece_params) {
  constexpr uint64_t kBlock = kernels::kAdam8bitBlock;
  std::vector<StatePiece> pieces;
  size_t at = 0;
  for (size_t c = 0; c < layout.chunks.size(); ++c) {
    StatePiece piece{.chunk = c};
    uint64_t scale_at = 0;  // the first block scale of the tensor below
    for (uint64_t last_offset = 0; at < count && size_t(spec(at).chunk) == c; ++at) {
      const ParamSpec& p = spec(at);
      if (p.offset < last_offset) return std::nullopt;
      last_offset = p.offset;
      const uint64_t slot = p.offset / sizeof(float);
      uint64_t done = 0;  // elements of p in earlier pieces
      while (p.elements - done > piece_params - std::min(piece_params, slot + done - piece.element_begin)) {
        const uint64_t room = piece_params - std::min(piece_params, slot + done - piece.element_begin);
        const uint64_t take = room / kBlock * kBlock;  // 0: cut before this tensor's rest
        piece.element_end = slot + done + take;
        piece.scale_end = scale_at + (done + take) / kBlock;
        if (piece.element_end > piece.element_begin) pieces.push_back(piece);
        piece = StatePiece{.chunk = c, .element_begin = piece.element_end, .scale_begin = piece.scale_end};
        done += take;
      }
      scale_at += kernels::adam8bit_blocks(p.elements);
    }
    piece.element_end = layout.chunks[c].bytes / sizeof(float);
    piece.scale_end = scale_at;
    pieces.push_back(piece);
  }
  if (at != count) return std::nullopt;  // a spec out of chunk order
  return pieces;
}

}  // namespace

std::vector<StatePiece> optimizer_state_pieces(const ParamLayout& master_layout, uint64_t piece_params) {
  piece_params = std::max<uint64_t>(piece_params, kernels::kAdam8bitBlock);  // the precondition
  // build_param_layout appends the specs chunk by chunk, each chunk's by offset: then this is one
  // pass over them (the planner calls it for every candidate placement of models of thousands of
  // layers). Any other order is grouped and sorted first.
  const std::vector<ParamSpec>& specs = master_layout.params;
  if (auto pieces = cut_pieces(master_layout, specs.size(), [&](size_t i) -> const ParamSpec& { return specs[i]; },
                               piece_params))
    return std::move(*pieces);
  std::vector<const ParamSpec*> sorted;
  for (const ParamSpec& p : specs) sorted.push_back(&p);
  std::stable_sort(sorted.begin(), sorted.end(), [](const ParamSpec* a, const ParamSpec* b) {
    return a->chunk != b->chunk ? a->chunk < b->chunk : a->offset < b->offset;
  });
  return cut_pieces(master_layout, sorted.size(), [&](size_t i) -> const ParamSpec& { return *sorted[i]; },
                    piece_params)
      .value();  // sorted: every spec is cut (a chunk index past the layout's chunks throws)
}

ElementRange master_shard(const ParamLayout& layout, const ParamLayout& master_layout, size_t c, int ranks,
                          int rank) {
  const uint64_t eb = layout.element_bytes, n = layout.chunks[c].bytes / eb;
  const uint64_t master_end = master_layout.chunks[c].bytes / sizeof(float);
  const ChunkShard shard = chunk_shard(n, ranks, rank);
  if (shard.elements() == 0) return {master_end, master_end};
  const auto first = std::partition_point(layout.params.begin(), layout.params.end(),
                                          [c](const ParamSpec& p) { return size_t(p.chunk) < c; });
  const size_t from = size_t(first - layout.params.begin());
  // Working element w of the chunk in the master layout: inside a tensor, the same element of it;
  // in the padding before a tensor, its start; past the last tensor, the chunk's end.
  const auto to_master = [&](uint64_t w) {
    for (size_t i = from; i < layout.params.size() && size_t(layout.params[i].chunk) == c; ++i) {
      const uint64_t start = layout.params[i].offset / eb, mstart = master_layout.params[i].offset / sizeof(float);
      if (w <= start) return mstart;
      if (w < start + layout.params[i].elements) return mstart + (w - start);
    }
    return master_end;
  };
  return {shard.begin == 0 ? 0 : to_master(shard.begin), shard.end >= n ? master_end : to_master(shard.end)};
}

std::optional<std::string> q8_block_split(const ParamLayout& layout, int ranks) {
  constexpr uint64_t kBlock = kernels::kAdam8bitBlock;
  const uint64_t eb = layout.element_bytes;
  size_t at = 0;  // the specs come chunk by chunk, each chunk's by offset (build_param_layout)
  for (size_t c = 0; c < layout.chunks.size(); ++c) {
    const size_t first = at;
    while (at < layout.params.size() && size_t(layout.params[at].chunk) == c) ++at;
    const uint64_t n = layout.chunks[c].bytes / eb;
    for (int r = 1; r < ranks; ++r) {
      const uint64_t cut = chunk_shard(n, ranks, r).begin;
      if (cut == 0 || cut >= n) continue;
      for (size_t i = first; i < at; ++i) {
        const ParamSpec& p = layout.params[i];
        const uint64_t start = p.offset / eb;
        if (cut <= start || cut >= start + p.elements || (cut - start) % kBlock == 0) continue;
        return fmt::format("{} ({} elements at element {} of its chunk, the cut {} elements into it)", p.name,
                           p.elements, start, cut - start);
      }
    }
  }
  return std::nullopt;
}

ElementRange range_scales(const ParamLayout& master_layout, size_t c, ElementRange range) {
  const auto first = std::partition_point(master_layout.params.begin(), master_layout.params.end(),
                                          [c](const ParamSpec& p) { return size_t(p.chunk) < c; });
  // The first scale at master element e: the blocks of the tensors before it, and the whole blocks
  // of the one it lies in.
  const auto scale_at = [&](uint64_t e) {
    uint64_t scales = 0;
    for (auto it = first; it != master_layout.params.end() && size_t(it->chunk) == c; ++it) {
      const uint64_t start = it->offset / sizeof(float);
      if (e <= start) break;
      if (e < start + it->elements) return scales + (e - start) / kernels::kAdam8bitBlock;
      scales += kernels::adam8bit_blocks(it->elements);
    }
    return scales;
  };
  return {scale_at(range.begin), scale_at(range.end)};
}

std::vector<StatePiece> rank_state_pieces(const ParamLayout& layout, const ParamLayout& master_layout,
                                          uint64_t piece_params, int ranks, int rank) {
  std::vector<StatePiece> pieces = optimizer_state_pieces(master_layout, piece_params);
  if (ranks == 1) return pieces;
  std::vector<StatePiece> mine;
  std::vector<ElementRange> range(master_layout.chunks.size());
  for (size_t c = 0; c < range.size(); ++c) range[c] = master_shard(layout, master_layout, c, ranks, rank);
  for (StatePiece p : pieces) {
    const ElementRange r = range[p.chunk];
    p.element_begin = std::max(p.element_begin, r.begin);
    p.element_end = std::min(p.element_end, r.end);
    if (p.element_begin >= p.element_end) continue;
    if (p.scale_end > p.scale_begin) {  // the chunk's tensors have 8-bit blocks: cut their scales alike
      const ElementRange scales = range_scales(master_layout, p.chunk, {p.element_begin, p.element_end});
      p.scale_begin = scales.begin;
      p.scale_end = scales.end;
    }
    mine.push_back(p);
  }
  return mine;
}

OptimizerPipelineOptions optimizer_state_options(const ParamLayout& master_layout, const TrainOptions& options) {
  return optimizer_state_options(optimizer_state_pieces(master_layout, options.sub_group_size), options);
}

std::shared_ptr<const std::vector<StatePiece>> shared_state_pieces(const std::shared_ptr<const ParamLayout>& master_layout,
                                                                   uint64_t piece_params) {
  struct Entry {
    std::weak_ptr<const ParamLayout> layout;  // by identity (owner_before): never a reused address
    uint64_t piece_params = 0;
    std::shared_ptr<const std::vector<StatePiece>> pieces;
  };
  constexpr size_t kKept = 8;
  static Mutex mu;
  static std::list<Entry> recent GUARDED_BY(mu);  // newest first
  const auto same = [&](const Entry& e) {
    return e.piece_params == piece_params && !e.layout.owner_before(master_layout) &&
           !master_layout.owner_before(e.layout) && !e.layout.expired();
  };
  {
    MutexLock lock(mu);
    for (auto it = recent.begin(); it != recent.end(); ++it)
      if (same(*it)) {
        recent.splice(recent.begin(), recent, it);
        return recent.front().pieces;
      }
  }
  auto pieces = std::make_shared<const std::vector<StatePiece>>(optimizer_state_pieces(*master_layout, piece_params));
  MutexLock lock(mu);
  recent.push_front({master_layout, piece_params, pieces});
  if (recent.size() > kKept) recent.pop_back();
  return pieces;
}

OptimizerPipelineOptions optimizer_state_options(const std::vector<StatePiece>& pieces, const TrainOptions& options,
                                                 bool labels) {
  OptimizerPipelineOptions o;
  o.states = options.adam_states;
  const bool q8 = o.states == AdamStates::q8;
  const size_t chunks = pieces.empty() ? 0 : pieces.back().chunk + 1;
  std::vector<size_t> per_chunk(chunks, 0);
  for (const StatePiece& p : pieces) per_chunk[p.chunk]++;
  std::vector<size_t> index(chunks, 0);
  for (const StatePiece& p : pieces) {
    o.fp32_elements.push_back(p.elements());
    o.scale_count.push_back(q8 ? p.scales() : 0);
    const size_t k = ++index[p.chunk];
    if (labels)
      o.labels.push_back(per_chunk[p.chunk] == 1 ? fmt::format("chunk {}", p.chunk)
                                               : fmt::format("chunk {} piece {}/{}", p.chunk, k, per_chunk[p.chunk]));
  }
  o.home = options.optimizer_home == Tier::nvme ? Tier::nvme : Tier::cpu;
  o.staging = options.optimizer_staging;
  o.name = "optimizer";
  return o;
}

DeviceBytes estimate_device_bytes(const ModelConfig& config, const TrainOptions& o) {
  DeviceBytes d;
  const std::shared_ptr<const ParamLayout> working = shared_param_layout(config, dtype_size(o.dtype)).value();
  const ParamLayout& layout = *working;
  const bool on_device = o.optimizer_home == Tier::device;
  uint64_t all_chunks = 0;
  for (const ChunkSpec& c : layout.chunks) all_chunks += aligned(c.bytes);
  if (o.partitions_weights()) {
    // ZeRO-3 (offload/sharded_weights.h): this rank's shards, resident or paged through slots of
    // their size, the gathered whole-chunk slots and the gather of the weights' reads.
    const int ranks = int(o.ranks);
    std::vector<uint64_t> whole;
    for (const ChunkSpec& c : layout.chunks) whole.push_back(c.bytes);
    const std::vector<uint64_t> shards = weight_shard_bytes(whole, layout.element_bytes, ranks);
    if (o.weight_home == Tier::device) {
      for (uint64_t b : shards) d.weights += aligned(b);
    } else {
      TierManagerOptions to = run_weight_options(layout, o, config.name);
      to.chunk_bytes = shards;
      d.weights += tier_device_bytes(to);
    }
    const GradientOffloaderOptions groups = gradient_slot_options(layout, o.dtype, config.name);
    d.weights += ShardedWeights::slot_bytes({.chunk_bytes = whole,
                                             .element_bytes = layout.element_bytes,
                                             .chunk_group = groups.chunk_group,
                                             .group_slots = groups.group_slots},
                                            ranks, kArenaAlign) +
                 aligned(uint64_t(ranks) * weight_gather_round(layout, ranks));
  } else if (o.weight_home == Tier::device) {
    d.weights = all_chunks;
  } else {
    const std::vector<bool> resident = resident_chunk_mask(layout, o.resident_layers);
    for (size_t c = 0; c < layout.chunks.size(); ++c)
      if (resident[c]) d.weights += aligned(layout.chunks[c].bytes);
    d.weights += tier_device_bytes(run_weight_options(layout, o, config.name));
  }
  if (on_device) {
    // DeviceGrads: each chunk's buffer, its fp32 sums (across ranks: the shards' and the exchange
    // buffers) and the norm's block partials; the DeviceOptimizer's state (this rank's shards).
    std::vector<uint64_t> chunk_bytes;
    for (const ChunkSpec& c : layout.chunks) chunk_bytes.push_back(c.bytes);
    // (with several micro-batches a rank, a receive buffer for the later rounds).
    d.gradients = DeviceGrads::device_bytes(o.dtype, chunk_bytes,
                                            Transformer::gradient_releases(config, layout.chunks.size()), o.ranks,
                                            kArenaAlign, o.across_ranks() ? o.rank_micro_batches() : 1,
                                            o.across_ranks());
    d.optimizer =
        DeviceOptimizer::device_bytes(layout, o.dtype, o.ranks, kArenaAlign, {}, o.adam_states, o.across_ranks());
    // Across ranks, the gather of a checkpoint's partitioned state (make_optimizer).
    if (o.across_ranks()) d.optimizer += aligned(uint64_t(o.ranks) * weight_gather_round(layout, int(o.ranks)));
  } else if (const std::vector<bool> split = device_update_mask(layout, o);
             std::find(split.begin(), split.end(), true) != split.end()) {
    // A split update: the resident layers' DeviceGrads (one release each) and DeviceOptimizer state,
    // the other chunks' gradient slots.
    const MaskedChunks kept = masked_chunks(layout, split);
    d.gradients = DeviceGrads::device_bytes(o.dtype, kept.bytes, std::vector<uint32_t>(kept.bytes.size(), 1), 1,
                                            kArenaAlign) +
                  gradient_offloader_device_bytes(without_chunks(gradient_slot_options(layout, o.dtype, config.name),
                                                                 split));
    d.optimizer = DeviceOptimizer::device_bytes(layout, o.dtype, 1, kArenaAlign, split, o.adam_states);
  } else if (o.across_ranks()) {
    // Across ranks: the GradientExchange's whole-chunk slots, received blocks and norm partials,
    // the offloader's shard-sized slots, and the updated weights' gather buffer.
    const GradientOffloaderOptions whole = gradient_slot_options(layout, o.dtype, config.name);
    d.gradients = GradientExchange::device_bytes(
                      {.chunks = whole, .releases = Transformer::gradient_releases(config, layout.chunks.size())},
                      int(o.ranks), kArenaAlign) +
                  gradient_offloader_device_bytes(gradient_shard_options(whole, int(o.ranks)));
    d.optimizer = aligned(uint64_t(o.ranks) * weight_gather_round(layout, int(o.ranks)));
  } else {
    d.gradients = gradient_offloader_device_bytes(gradient_slot_options(layout, o.dtype, config.name));
  }
  // Layer-major (o.step_schedule resolved to it, model/train/step_schedule.h): K residual streams,
  // K d residuals, the tied table's K - 1 stashed gradients (Transformer::activation_bytes) and K
  // batch buffers, where micro-batch-major has one of each; K: this rank's micro-batches.
  const int64_t K =
      o.step_schedule == StepSchedule::layer_major ? int64_t(std::max<uint64_t>(o.rank_micro_batches(), 1)) : 1;
  const TransformerOptions t{.batch = int64_t(o.micro_batch), .seq_len = int64_t(o.seq),
                             .checkpoint_layers = o.activation_checkpointing, .dtype = o.dtype, .micro_batches = K};
  d.activations = aligned(Transformer::activation_bytes(config, t));
  d.batch = 2 * uint64_t(K) * aligned(o.micro_batch * o.seq * sizeof(int32_t));
  return d;
}

}  // namespace strata::model
