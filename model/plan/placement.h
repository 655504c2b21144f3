// Placement: how the model's parameter chunks map onto the offload layer's device slots, and the
// device bytes a training run will take before anything is allocated. One place for the slot
// groups (the transformer layers share one group; the embedding and the head chunk have one each,
// so a small chunk never takes a large slot), used by the trainer, `strata train` and the tests.
// Pure arithmetic over a ParamLayout; allocates nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/net/param_layout.h"
#include "model/train/train_options.h"
#include "model/net/transformer.h"
#include "offload/gradient_offloader.h"
#include "offload/optimizer_pipeline.h"
#include "offload/tier_manager.h"

namespace strata::model {

// Slot group of each chunk of `layout`: 0 the layers, 1 the embedding, 2 the head, 3 the MLP
// tiles (ModelConfig::mlp_tiles; the group exists only when the layout has them).
inline constexpr uint32_t kLayerGroup = 0, kEmbeddingGroup = 1, kHeadGroup = 2, kMlpTileGroup = 3;
std::vector<uint32_t> chunk_groups(const ParamLayout& layout);

// Weights homed on `home` (cpu or nvme) paged through `layer_slots` layer slots and one slot each
// for the embedding and the head, two each when their tables are tiled (the first tile is held
// while the others pass), and two for MLP tiles (the layer's own chunk stays in its layer slot
// through the layer's backward); `prefetch_bytes` 0 = the TierManager's default.
// `resident` (empty: none): chunks that stay on the device instead (resident_chunk_mask); the
// options then cover the other chunks alone, in chunk order (the TierManager's chunk i is the
// i-th paged one), a group none of them is in is dropped and the layer group takes at most one slot
// per paged layer.
TierManagerOptions paged_weight_options(const ParamLayout& layout, Tier home, uint32_t layer_slots,
                                        uint64_t prefetch_bytes, uint32_t nvme_staging, const std::string& name,
                                        const std::vector<bool>& resident = {});
// The paged options of a run: paged_weight_options with options' home, slots, prefetch and staging,
// and resident_chunk_mask(layout, options.resident_layers); NVMe-homed weights on one rank also
// take the read cache options.param_cache buys (tier_cache_chunks; none while it is auto).
TierManagerOptions run_weight_options(const ParamLayout& layout, const TrainOptions& options, const std::string& name);

// Paged weights partly resident (--resident-layers): `resident_layers` of the model's layers stay
// on the device for the whole run, spread evenly over the depth -- layer l is resident when
// floor((l + 1) k / L) > floor(l k / L) -- so the compute of the resident layers around a paged one
// hides its fetch; the embedding and the head always page. Per chunk of `layout`: resident or not.
// Every entry is false for 0 layers (or a negative k: auto, unresolved) and for a layout with MLP
// tiles (a layer that had to be tiled is not kept whole).
std::vector<bool> resident_chunk_mask(const ParamLayout& layout, int64_t resident_layers);
// A split update's chunks (options.split_update, model/train/split_optimizer.h): the resident
// chunks of paged weights on one rank (resident_chunk_mask with options.resident_layers), whose
// update runs on the device; every entry false without a split (or a split that keeps no layer).
std::vector<bool> device_update_mask(const ParamLayout& layout, const TrainOptions& options);
// The chunks `mask` marks, in chunk order: their bytes and names (ResidentWeights::create's).
struct MaskedChunks {
  std::vector<uint64_t> bytes;
  std::vector<std::string> names;
};
MaskedChunks masked_chunks(const ParamLayout& layout, const std::vector<bool>& mask);
// The resident layers a run of `config` with `options` keeps: 0 for resident weights (every chunk
// is resident anyway) and MLP tiles; options.resident_layers when given (at most n_layer); auto
// (-1): as many as fit `gpu_budget` beside the working set (estimate_device_bytes with the
// others paged, under the step schedule the run takes: auto's choice with none resident), less a
// reserve of 1/64 of the budget against the arena's fragmentation.
int64_t resident_layers_for(const ModelConfig& config, const TrainOptions& options, uint64_t gpu_budget);
// The trainer's gradient slots: two for the layers (one written by the backward, one copied out),
// one each for the embedding and the head (both held at the tied head's backward), two each when
// tiled, two for MLP tiles.
GradientOffloaderOptions gradient_slot_options(const ParamLayout& layout, DType dtype, const std::string& name);
// The trainer's gradient offloader: gradient_slot_options, its fp32 sums homed where
// options.grad_home says (nvme: three spill buffers). With a split update, the chunks the device
// updates are left out (device_update_mask: the offloader's chunk i is the i-th other chunk).
GradientOffloaderOptions gradient_options(const ParamLayout& layout, const TrainOptions& options,
                                          const std::string& name);
// `options` without the chunks `drop` marks (the others keep their order; a group left without a
// chunk is dropped).
GradientOffloaderOptions without_chunks(const GradientOffloaderOptions& options, const std::vector<bool>& drop);

// One piece of the optimizer state: chunk `chunk`'s fp32 elements [element_begin, element_end) of the
// master layout and (8-bit moments) its block scales [scale_begin, scale_end), in the chunk's
// tensor order. The pieces of a chunk are consecutive and cover it exactly.
struct StatePiece {
  size_t chunk = 0;
  uint64_t element_begin = 0, element_end = 0;
  uint64_t scale_begin = 0, scale_end = 0;
  uint64_t elements() const { return element_end - element_begin; }
  uint64_t scales() const { return scale_end - scale_begin; }
};
// The pieces of every chunk of `master_layout`, chunk after chunk: a chunk of at most
// `piece_params` fp32 elements is one piece; a larger one is cut into pieces of at most piece_params
// elements (padding may add to a piece: the chunk's end padding to its last, and before a field's
// start the field padding, under kFieldAlignment elements), each cut at a tensor's start or
// inside a tensor at a multiple of kernels::kAdam8bitBlock elements from its start, so every 8-bit
// block (and every SIMD vector of the Adam kernels) stays whole: AdamW over the pieces is the same
// bits as over the chunk. Precondition: piece_params >= kernels::kAdam8bitBlock.
std::vector<StatePiece> optimizer_state_pieces(const ParamLayout& master_layout, uint64_t piece_params);

// Across ranks (ZeRO): the fp32 master elements [begin, end) of chunk `c` that rank `rank` of
// `ranks` homes -- its working-layout shard (offload/chunk_shard.h, what its gradient sum holds)
// mapped to the master layout through the tensors' offsets in both. The ranks' ranges tile the
// master chunk in rank order (rank 0's from 0, the last non-empty one's to the chunk's end); an
// empty shard maps to an empty range. Every cut lies inside or between tensors at a multiple of 64
// elements from the tensor's start (shards are 4096-element aligned, tensors 64), so the Adam
// kernels' SIMD vectors stay whole; a multiple of kernels::kAdam8bitBlock only where the tensor
// starts at a multiple of it in its chunk (q8_block_split says whether 8-bit moments can be cut).
struct ElementRange {
  uint64_t begin = 0, end = 0;
  uint64_t elements() const { return end - begin; }
};
ElementRange master_shard(const ParamLayout& layout, const ParamLayout& master_layout, size_t c, int ranks, int rank);
// Across ranks with 8-bit moments: where a rank's shard cut would split a tensor's 8-bit block (a
// cut inside the tensor, not a whole number of kernels::kAdam8bitBlock elements from its start),
// the first such tensor as "<name> (<elements> elements at element <start> of its chunk, the cut
// <k> elements into it)"; nullopt when no cut at `ranks` ranks splits a block (always when every
// tensor starts at a multiple of 256 elements of its chunk, as models whose width and key/value
// width are multiples of 16 do).
std::optional<std::string> q8_block_split(const ParamLayout& layout, int ranks);
// The 8-bit block scales [begin, end) of chunk `c` of `master_layout` that its master elements
// `range` hold (a range whose cuts split no block: master_shard where q8_block_split is nullopt):
// the scales of the tensors before range.begin and of the whole blocks of a tensor it cuts.
ElementRange range_scales(const ParamLayout& master_layout, size_t c, ElementRange range);
// optimizer_state_pieces cut to each chunk's master_shard: the pieces rank `rank` of `ranks` keeps
// (none of a chunk whose shard is empty), their scales cut alike (range_scales; 8-bit moments only
// where q8_block_split is nullopt). ranks == 1: optimizer_state_pieces.
std::vector<StatePiece> rank_state_pieces(const ParamLayout& layout, const ParamLayout& master_layout,
                                          uint64_t piece_params, int ranks, int rank);

// The trainer's optimizer state: one image per piece (optimizer_state_pieces with
// options.sub_group_size: fp32 elements, and for 8-bit moments its block scales), homed where
// options.optimizer_home says (always cpu for the optimizer on the device: the pinned images
// mirror the device state), labelled "chunk <c>" or "chunk <c> piece <k>/<n>".
OptimizerPipelineOptions optimizer_state_options(const ParamLayout& master_layout, const TrainOptions& options);
// The same over the given pieces (rank_state_pieces across ranks); `labels` false leaves the labels
// out (a sizing that never names a piece).
OptimizerPipelineOptions optimizer_state_options(const std::vector<StatePiece>& pieces, const TrainOptions& options,
                                                 bool labels = true);
// optimizer_state_pieces of a shared layout (shared_param_layout), kept for the few layouts sized
// last: a plan sizes the state of every candidate placement of one model (a 10000-layer model's
// cut is most of a candidate's sizing). Thread-safe.
std::shared_ptr<const std::vector<StatePiece>> shared_state_pieces(const std::shared_ptr<const ParamLayout>& master_layout,
                                                                   uint64_t piece_params);

// The device arena a run takes, by what: working weights (every chunk, or the slots), gradients
// (the model's DeviceGrads, or the offloader's slots), activations, the optimizer's state when it
// lives on the device, and the batch buffers. Aligned as the arena aligns blocks (256 bytes).
struct DeviceBytes {
  uint64_t weights = 0, gradients = 0, activations = 0, optimizer = 0, batch = 0;
  uint64_t total() const { return weights + gradients + activations + optimizer + batch; }
};
DeviceBytes estimate_device_bytes(const ModelConfig& config, const TrainOptions& options);

}  // namespace strata::model
