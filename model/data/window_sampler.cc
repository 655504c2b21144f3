// WindowSampler: segment/row bookkeeping and the keyed Feistel permutation behind shuffling.
// Keys are mixed with splitmix64, so nearby seeds and epochs give unrelated orders.
#include "model/data/window_sampler.h"

#include <algorithm>
#include <bit>

namespace strata::model {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t mix_key(uint64_t seed, uint64_t epoch, uint64_t segment) {
  return splitmix64(splitmix64(splitmix64(seed) ^ epoch) ^ (segment + 0x632be59bd9b4e019ull));
}

}  // namespace

IndexPermutation::IndexPermutation(uint64_t n, uint64_t key) : n_(n), key_(key) {
  if (n_ > 1) {
    const unsigned bits = static_cast<unsigned>(std::bit_width(n_ - 1));
    half_bits_ = (bits + 1) / 2;
  }
}

uint64_t IndexPermutation::operator()(uint64_t i) const {
  if (n_ <= 1) return i;
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  // The Feistel network permutes [0, 4^half_bits) ⊇ [0, n); walking the cycle until the value
  // lands in range restricts it to a permutation of [0, n) (at most 4x the domain: few walks).
  uint64_t x = i;
  do {
    uint64_t left = x >> half_bits_, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = splitmix64(right ^ splitmix64(key_ + round)) & mask;
      const uint64_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    x = (left << half_bits_) | right;
  } while (x >= n_);
  return x;
}

StatusOr<WindowSampler> WindowSampler::create(const TokenDataset& dataset, const WindowSamplerOptions& options) {
  if (options.batch_size == 0 || options.seq_len == 0) {
    return error(Code::invalid_argument, "batch size {} and sequence length {} must both be at least 1",
                 options.batch_size, options.seq_len);
  }
  const uint64_t window = uint64_t{options.batch_size} * options.seq_len + 1;
  WindowSampler sampler;
  sampler.options_ = options;
  auto add_segment = [&](uint64_t first, uint64_t count) {
    const uint64_t rows = (count - 1) / options.seq_len;
    sampler.segments_.push_back({first, rows, rows / options.batch_size});
    sampler.batches_per_epoch_ += rows / options.batch_size;
  };
  if (options.per_shard) {
    for (size_t i = 0; i < dataset.shards().size(); ++i) {
      const TokenDataset::Shard& s = dataset.shards()[i];
      if (s.count < window) {
        return error(Code::invalid_argument,
                     "token file {} has {} tokens (from token {}), too short for one batch of B={} x T={} "
                     "(needs {} tokens); use a smaller batch or sequence length, or merge the shards",
                     s.path, s.count, s.first_in_file, options.batch_size, options.seq_len, window);
      }
      add_segment(dataset.shard_begin(i), s.count);
    }
  } else {
    if (dataset.size() < window) {
      return error(Code::invalid_argument,
                   "the token data ({}{}) has {} tokens, too short for one batch of B={} x T={} (needs {} "
                   "tokens); use a smaller batch or sequence length, or more data",
                   dataset.shards().front().path, dataset.shards().size() > 1 ? " and more" : "", dataset.size(),
                   options.batch_size, options.seq_len, window);
    }
    add_segment(0, dataset.size());
  }
  return sampler;
}

LoaderPosition WindowSampler::advance(LoaderPosition p) const {
  if (++p.batch >= batches_per_epoch_) {
    p.batch = 0;
    ++p.epoch;
  }
  return p;
}

Status WindowSampler::check(LoaderPosition p) const {
  if (p.batch >= batches_per_epoch_) {
    return error(Code::out_of_range,
                 "loader position batch {} of epoch {} is past the {} batches of an epoch; the checkpoint was "
                 "made with other data, batch size or sequence length",
                 p.batch, p.epoch, batches_per_epoch_);
  }
  return Status::ok();
}

void WindowSampler::prepare_epoch(uint64_t epoch) {
  if (cached_epoch_ == epoch) return;
  const IndexPermutation segment_order(segments_.size(), mix_key(options_.seed, epoch, UINT64_MAX));
  order_.resize(segments_.size());
  cumulative_.resize(segments_.size());
  uint64_t sum = 0;
  for (size_t k = 0; k < segments_.size(); ++k) {
    order_[k] = static_cast<uint32_t>(options_.shuffle ? segment_order(k) : k);
    cumulative_[k] = sum;
    sum += segments_[order_[k]].batches;
  }
  cached_epoch_ = epoch;
}

void WindowSampler::row_starts(LoaderPosition p, std::span<uint64_t> row_starts) {
  prepare_epoch(p.epoch);
  const size_t k = static_cast<size_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), p.batch) -
                                       cumulative_.begin()) - 1;
  const uint32_t seg_index = order_[k];
  const Segment& seg = segments_[seg_index];
  const uint64_t first_row = (p.batch - cumulative_[k]) * options_.batch_size;
  const IndexPermutation rows(seg.rows, mix_key(options_.seed, p.epoch, seg_index));
  for (size_t i = 0; i < row_starts.size(); ++i) {
    const uint64_t r = options_.shuffle ? rows(first_row + i) : first_row + i;
    row_starts[i] = seg.first_token + r * options_.seq_len;
  }
}

}  // namespace strata::model
