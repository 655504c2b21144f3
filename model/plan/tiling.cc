// Tiling (tiling.h): the fewest tiles that fit a device budget, searched over the device bytes
// estimate_device_bytes gives each candidate.
#include "model/plan/tiling.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "model/plan/placement.h"

namespace strata::model {
namespace {

bool paged(const TrainOptions& o) { return o.weight_home != Tier::device; }

// The axes a search may tile, and how finely it may cut an MLP.
struct FreeAxes {
  bool vocab = false, mlp = false;
  int64_t most_mlp_tiles = 0;
};

// The device bytes of `config` with a tiling, each tiling sized once. Paged, the bytes are the
// slot groups' (layers, embedding, head, MLP tiles: a slot each holds the group's largest chunk,
// the same in every layer), the activations' (which grow with the layers, whatever the tiles) and
// the batch buffers', so the search sizes a one-layer model and adds the activations of the other
// layers (a layout of 80 layers in 64 tiles per weight is 10k chunks; of one, 129), and so does
// the result: sizing it whole built a layout of 1.3M chunks for a 10000-layer model at 64 tiles,
// 40 times in one `strata plan` (the tests hold the sum equal to what a run allocates). Each
// axis's bytes fall as its tiles get finer (within the tiled values: a table in two tiles takes two
// slots of its first tile, more than one whole slot), so the search bisects.
class DeviceBytesOf {
 public:
  // `whole`: the bytes of `config` as it is (the search's start).
  DeviceBytesOf(const ModelConfig& config, const TrainOptions& options, uint64_t whole)
      : one_layer_(config), options_(options) {
    one_layer_.n_layer = 1;
    other_layers_ = whole - estimate_device_bytes(one_layer_, options_).total();
  }
  uint64_t operator()(int64_t vocab_tile, int64_t mlp_tiles) {
    const auto [at, fresh] = known_.try_emplace({vocab_tile, mlp_tiles}, 0);
    if (fresh)
      at->second = estimate_device_bytes(tiled(one_layer_, vocab_tile, mlp_tiles), options_).total() + other_layers_;
    return at->second;
  }
  Tiling sized(int64_t vocab_tile, int64_t mlp_tiles, uint64_t budget) {
    const uint64_t b = (*this)(vocab_tile, mlp_tiles);
    return Tiling{.vocab_tile = vocab_tile, .mlp_tiles = mlp_tiles, .device_bytes = b, .fits = b <= budget};
  }

 private:
  static ModelConfig tiled(ModelConfig c, int64_t vocab_tile, int64_t mlp_tiles) {
    c.vocab_tile = vocab_tile;
    c.mlp_tiles = mlp_tiles;
    return c;
  }
  ModelConfig one_layer_;
  const TrainOptions& options_;
  uint64_t other_layers_ = 0;  // the activations of layers 2 .. L
  std::map<std::pair<int64_t, int64_t>, uint64_t> known_;
};

// The least n in [lo, hi] with fits(n), for fits false then true along the range; hi + 1 if none.
template <typename Fits>
int64_t first_fitting(int64_t lo, int64_t hi, Fits fits) {
  while (lo <= hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid))
      hi = mid - 1;
    else
      lo = mid + 1;
  }
  return lo;
}

// The chunks a tiling adds to the layout: an MLP in m tiles per weight adds 2m to every layer (the
// layer's own chunk stays), a table in t tiles t - 1 (the embedding's, and an untied head's).
int64_t added_chunks(const ModelConfig& c, int64_t vocab_tile, int64_t mlp_tiles) {
  const int64_t tables = c.tied_head ? 1 : 2;
  const int64_t table_tiles = vocab_tile > 0 ? (c.vocab + vocab_tile - 1) / vocab_tile : 1;
  return c.n_layer * 2 * (mlp_tiles > 1 ? mlp_tiles : 0) + (table_tiles - 1) * tables;
}

// tiling.h's order over the free axes of `config` (the others keep config's values).
Tiling fewest_tiles(const ModelConfig& config, const TrainOptions& o, uint64_t budget, const FreeAxes& free) {
  const int64_t v0 = free.vocab ? 0 : config.vocab_tile, m0 = free.mlp ? 0 : config.mlp_tiles;
  ModelConfig start = config;
  start.vocab_tile = v0;
  start.mlp_tiles = m0;
  const uint64_t whole = estimate_device_bytes(start, o).total();
  if (whole <= budget) return Tiling{.vocab_tile = v0, .mlp_tiles = m0, .device_bytes = whole, .fits = true};
  DeviceBytesOf bytes(start, o, whole);
  const auto result = [&](int64_t v, int64_t m) { return bytes.sized(v, m, budget); };
  // Tiles of 1 .. most_blocks whole blocks, fewer rows than the table.
  const int64_t most_blocks = free.vocab ? (config.vocab - 1) / kVocabTileBlock : 0;
  // The vocabulary tiling with the fewest bytes, whatever the MLP's: the finest, unless its two
  // slots of one block are more than one slot of the whole table.
  const int64_t v_least = most_blocks >= 1 && bytes(kVocabTileBlock, m0) < whole ? kVocabTileBlock : v0;
  // The fewest MLP tiles with which anything fits: the least the MLP tiling may be.
  const int64_t most = free.mlp ? std::min({free.most_mlp_tiles, config.ffn_hidden, config.dim}) : m0;
  int64_t m = m0;
  if (bytes(v_least, m0) > budget) {
    if (!free.mlp || most < 2) return result(v_least, m0);  // nothing fits: the fewest bytes
    m = first_fitting(2, most, [&](int64_t n) { return bytes(v_least, n) <= budget; });
    if (m > most) return result(v_least, most);  // nothing fits: the fewest bytes
  }
  // The fewest vocabulary tiles that fit with n MLP tiles (that v_least does): v0 when it does,
  // else the most blocks per tile that fit (fewer rows per tile fit too), cut as evenly into that
  // many tiles as whole blocks allow (no larger a tile, so it fits too).
  const auto vocab_with = [&](int64_t n) {
    if (v_least == v0 || bytes(v0, n) <= budget) return v0;
    int64_t blocks = 1;
    for (int64_t hi = most_blocks; blocks < hi;) {
      const int64_t mid = blocks + (hi - blocks + 1) / 2;
      if (bytes(mid * kVocabTileBlock, n) <= budget)
        blocks = mid;
      else
        hi = mid - 1;
    }
    const int64_t tiles = (config.vocab + blocks * kVocabTileBlock - 1) / (blocks * kVocabTileBlock);
    const int64_t even = (config.vocab + tiles - 1) / tiles;
    return (even + kVocabTileBlock - 1) / kVocabTileBlock * kVocabTileBlock;
  };
  // From there up, each more MLP tile may let the tables take fewer: the fewest chunks in all wins
  // (on a tie the fewer MLP tiles). No more MLP tiles can win once they alone add as many chunks
  // as the best, nor once the tables fit whole.
  int64_t best_v = v_least, best_m = m, best_added = std::numeric_limits<int64_t>::max();
  for (; m <= most && added_chunks(config, v0, m) < best_added; m = m == 0 ? 2 : m + 1) {
    const int64_t v = vocab_with(m);
    if (added_chunks(config, v, m) < best_added) {
      best_v = v;
      best_m = m;
      best_added = added_chunks(config, v, m);
    }
    if (v == v0) break;
  }
  return result(best_v, best_m);
}

}  // namespace

Status check_tiling(const ModelConfig& config, const TrainOptions& o) {
  const int64_t most = std::min(config.ffn_hidden, config.dim);
  if (o.mlp_tiles > most)
    return error(Code::invalid_argument, "--mlp-tiles {}: the MLP of '{}' has {} hidden units and {} output rows, so "
                 "at most {} tiles (a tile holds at least one row of each weight)", o.mlp_tiles, config.name,
                 config.ffn_hidden, config.dim, most);
  ModelConfig c = config;
  c.vocab_tile = std::max<int64_t>(o.vocab_tile, 0);
  c.mlp_tiles = std::max<int64_t>(o.mlp_tiles, 0);
  return validate(c);
}

StatusOr<ModelConfig> with_tiling(const ModelConfig& config, const TrainOptions& o, uint64_t gpu_budget) {
  STRATA_RETURN_IF_ERROR(check_tiling(config, o));
  ModelConfig c = config;
  c.vocab_tile = std::max<int64_t>(o.vocab_tile, 0);
  c.mlp_tiles = std::max<int64_t>(o.mlp_tiles, 0);
  const FreeAxes free{.vocab = o.vocab_tile < 0, .mlp = o.mlp_tiles < 0, .most_mlp_tiles = kMaxAutoMlpTiles};
  if (!paged(o) || gpu_budget == 0 || (!free.vocab && !free.mlp)) return c;
  const Tiling t = fewest_tiles(c, o, gpu_budget, free);
  if (!t.fits) return c;  // no tiling fits: none is cut
  c.vocab_tile = t.vocab_tile;
  c.mlp_tiles = t.mlp_tiles;
  return c;
}

Tiling fewest_fitting_tiles(const ModelConfig& config, const TrainOptions& o, uint64_t gpu_budget) {
  ModelConfig c = config;
  c.vocab_tile = 0;
  c.mlp_tiles = 0;
  if (!paged(o)) {
    const uint64_t b = estimate_device_bytes(c, o).total();
    return Tiling{.device_bytes = b, .fits = b <= gpu_budget};
  }
  return fewest_tiles(c, o, gpu_budget, {.vocab = true, .mlp = true, .most_mlp_tiles = kMaxAutoMlpTiles});
}

std::string tiling_summary(const ModelConfig& c) {
  std::string mlp, vocab;
  if (c.mlp_tiles > 1) mlp = fmt::format("every layer's MLP in {} tiles per weight", c.mlp_tiles);
  if (c.vocab_tile > 0 && c.vocab_tile < c.vocab)
    vocab = fmt::format("the token table{} in {} tiles of {} rows", c.tied_head ? "" : " and the head", vocab_tiles(c),
                        c.vocab_tile);
  if (mlp.empty() && vocab.empty()) return "whole tables and MLPs";
  return mlp.empty() ? vocab : vocab.empty() ? mlp : mlp + " and " + vocab;
}

std::string tiling_flags(const ModelConfig& c, const TrainOptions& given) {
  const int64_t mlp = std::max<int64_t>(c.mlp_tiles, 1), vocab = c.vocab_tile < c.vocab ? c.vocab_tile : 0;
  std::string flags;
  if (given.mlp_tiles >= 0 ? std::max<int64_t>(given.mlp_tiles, 1) != mlp : mlp > 1)
    flags = fmt::format("--mlp-tiles {}", c.mlp_tiles);
  if (given.vocab_tile >= 0 ? given.vocab_tile != c.vocab_tile : vocab > 0)
    flags += fmt::format("{}--vocab-tile {}", flags.empty() ? "" : " ", c.vocab_tile);
  return flags;
}

}  // namespace strata::model
