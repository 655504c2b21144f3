// DeviceGrads: the GradSink (offload/chunk_source.h) that keeps every chunk's gradient on the
// device for the whole run, for an optimizer on the device and for callers that read gradients
// from the model (tests). It follows the one definition of accumulation and of the norm that
// gradients streamed to the host follow (GradientOffloader; kernels/cpu/grad_accumulate.h), with
// the backend's accumulate_widened and sum_squares_blocks ops, so the two placements give the
// same bits: each backward contribution lands in a zeroed working-precision buffer and is widened
// into the chunk's fp32 accumulator (the step's first contribution copies, later ones add); the
// squared norm is the sum, in chunk order, of each chunk's blocked sum of squares.
// A chunk with one contribution in a step (grad-accum 1, one rank) is not widened: its norm and gradient()
// read the working-precision buffer, whose exact widening is the fp32 sum (the same bits, without
// the fp32 pass: 6 bytes an element written and read less). Its first widening waits until a second
// contribution's acquire, or a reader asks for widened().
// Device memory per chunk: its working-precision buffer (from create), its fp32 accumulator and one
// double per 4096 floats for the norm's block partials (from the first begin_step or acquire, so a
// spread over ranks before it allocates shards only); device_bytes says how much in all.
// Across ranks (spread_over_ranks, a scale-out run): each rank runs its micro-batches of the step and
// keeps its shard of the gradient, the sum of every rank's contributions in (round, rank, release) order,
// the bits of one rank accumulating the same micro-batches in that order (ZeRO's partitioned
// gradient: a rank's fp32 sums are 1/N of the model's).
// Thread-safety: one driving thread. Lifetime: the backend (and the communicator given to
// spread_over_ranks) outlive it; the destructor waits for every stream and returns its blocks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offload/chunk_shard.h"
#include "offload/chunk_source.h"
#include "runtime/backend.h"
#include "runtime/communicator.h"
#include "runtime/dtype.h"

namespace strata {

class DeviceGrads final : public GradSink {
 public:
  // Blocks for every entry of `chunk_bytes` (bytes in `dtype`, the working precision; tags
  // "<name> gradients (<chunk_names[c]>)"). Over budget: the arena's out_of_memory.
  static StatusOr<std::unique_ptr<DeviceGrads>> create(Backend& backend, DType dtype,
                                                       const std::vector<uint64_t>& chunk_bytes,
                                                       const std::vector<std::string>& chunk_names,
                                                       const std::string& name);
  ~DeviceGrads() override;
  DeviceGrads(const DeviceGrads&) = delete;
  DeviceGrads& operator=(const DeviceGrads&) = delete;

  Status begin_step() override;  // every accumulator reads zero until its first contribution
  // The chunk's working-precision buffer, zero-filled on Stream::compute.
  StatusOr<std::byte*> acquire(size_t c) override;
  // The step's first contribution stays in the buffer; a later one queues acc(c) += widen(buffer)
  // (the first having been widened into acc(c) by this contribution's acquire).
  Status release(size_t c, bool last) override;

  // Zeroes the accumulators no contribution reached this step (across ranks: sums the ranks'
  // contributions first, below), then returns the squared global norm of the accumulated
  // gradient: the block partials of every chunk (computed on the device, copied down), summed per
  // chunk in block order and over chunks in chunk order, from +0.0. Synchronizes the compute and
  // d2h streams (and the communicator's collectives, whose sticky error is returned).
  StatusOr<double> finish_step() override;
  // Chunk c's squared-norm partial of the finished step (its blocks summed in order from +0.0; the
  // norm is these summed in chunk order): for a sink that owns some of a model's chunks
  // (offload/split_grads.h). One rank only (0 across ranks); valid from finish_step until the next.
  double partial(size_t c) const { return c < chunk_partials_.size() ? chunk_partials_[c] : 0.0; }
  // Chunk c's gradient sum on the device, for the update: the working-precision buffer while it holds
  // the step's only contribution (format = the working precision), else the fp32 accumulator (f32);
  // chunk_bytes(c) / element size elements, element i = element i of the chunk in the
  // working-precision layout. Valid after finish_step until the next step's acquire of the chunk
  // (stream order). Partitioned across ranks: the shard's fp32 sum, shard(c).elements() of them.
  struct Sum {
    const void* data;
    DType format;
  };
  Sum gradient(size_t c) const;
  // Chunk c's fp32 accumulator holding the step's sum, widening a single contribution into it first
  // (queued on Stream::compute: synchronize before reading it from the host). Untouched chunks read
  // zero after finish_step. failed_precondition when partitioned (no rank holds the whole sum).
  StatusOr<const float*> widened(size_t c);

  // ---- across ranks: the gradient partitioned (ZeRO) -------------------------------------------
  // From the next step on, the step's gradient is summed over the ranks of `comm` (any size: a world
  // of one exchanges with itself, its shard the whole chunk, the same bits as unspread) and
  // each rank keeps only ITS SHARD of every chunk's sum (offload/chunk_shard.h: chunk_shard(
  // elements, size(), rank())), each rank running `micro_batches` micro-batches per step, all
  // ranks the same number, in rounds (round j: micro-batch j x size() + r of the step on rank r,
  // model/data/rank_batches.h): chunk c gets exactly `releases[c]` releases per backward on every
  // rank (2 for a tied embedding's tiles, the head's then the embedding's; else 1;
  // Transformer::gradient_releases). Each release is widened into an fp32 exchange buffer laid out
  // by destination rank and its shards go to their owners at once, in the backward (a chunk of one
  // release in round 0: comm.reduce_scatter; in a later round, all_to_all into a receive buffer; of
  // several releases: all_to_all into the chunk's stack, summed at its last release); the owner
  // adds them round by round,
  //   x(0,0,0); += x(0,0,1); ...; += x(0,1,0); ...; += x(1,0,0); ...   (round j, rank r's i-th
  //   release x(j,r,i): round-major, then rank-major)
  // -- the order in which one rank accumulating the same micro-batches adds them, so the shard
  // holds exactly the bits one rank's sum holds there. finish_step combines the ranks' block
  // partials (all-gathered) in block order: the one-rank norm, bit for bit.
  // Device memory then: per chunk its working-precision buffer and its shard's fp32 sum (the whole
  // sums are never allocated: call it before the first step); one exchange buffer of size() x the largest
  // stride (fp32), shared by every chunk, and with more than one micro-batch a rank a receive buffer
  // as large; for a chunk of R > 1 releases, a stack of R x size() x its stride; size() x the
  // norm's partials.
  // Errors: invalid_argument (a releases list of the wrong length or with a 0, 0
  // micro-batches), failed_precondition when called twice or after the first step; the arena's
  // out_of_memory comes at the first step. A release beyond releases[c] in a backward, or
  // finish_step with a chunk released fewer times in the last one, is failed_precondition (another
  // backward than the model's). Every rank must run as many backwards and release the chunks in
  // the same order (the same model): the exchanges are collectives. A chunk's round ends at its
  // releases[c]-th release, so the rounds are per chunk: micro-batch-major (every chunk's round j in
  // backward j) and layer-major (Transformer::step_layer_major: chunk c's rounds 0, 1, ... in turn,
  // then the next chunk's) add the same terms in the same order.
  Status spread_over_ranks(Communicator& comm, const std::vector<uint32_t>& releases, uint64_t micro_batches = 1);
  // Whether spread_over_ranks partitioned the gradient; then gradient(c) is the rank's shard of
  // the sum (element i = chunk element shard(c).begin + i, fp32) and widened() refuses.
  bool partitioned() const { return comm_ != nullptr; }
  Communicator* communicator() const { return comm_; }  // spread_over_ranks's; null on one rank
  // This rank's shard of chunk c (the whole chunk on one rank).
  const ChunkShard& shard(size_t c) const { return shards_.at(c); }

  // The device bytes create and then spread_over_ranks allocate, each block aligned to `align` (the
  // arena's): the planner's figure, to the byte. Spread when ranks > 1 or `spread` (a world of one
  // through a communicator); else create's alone.
  static uint64_t device_bytes(DType dtype, const std::vector<uint64_t>& chunk_bytes,
                               const std::vector<uint32_t>& releases, int ranks, uint64_t align,
                               uint64_t micro_batches = 1, bool spread = false);

  size_t chunk_count() const { return work_.size(); }
  uint64_t chunk_bytes(size_t c) const { return bytes_.at(c); }

 private:
  DeviceGrads(Backend& backend, DType dtype, std::vector<uint64_t> bytes)
      : backend_(backend), dtype_(dtype), bytes_(std::move(bytes)) {}
  uint64_t elements(size_t c) const { return bytes_[c] / dtype_size(dtype_); }
  Status check(size_t c, const char* what) const;
  Status widen_for_ranks(size_t c);
  Status exchange(size_t c, uint32_t release);
  StatusOr<double> norm_over_ranks();
  StatusOr<void*> allocate(uint64_t bytes, const std::string& tag);
  Status allocate_sums();

  Backend& backend_;
  const DType dtype_;
  const std::vector<uint64_t> bytes_;
  std::string name_;                    // for the blocks' tags
  std::vector<std::string> chunk_names_;
  std::vector<void*> blocks_;           // every arena block, for release
  std::vector<std::byte*> work_;        // per chunk: the backward's buffer (working precision)
  std::vector<float*> acc_;             // per chunk: fp32 accumulator
  std::vector<uint64_t> partial_at_;    // per chunk: index of its first block partial (+ total)
  double* partials_ = nullptr;          // device: every chunk's block partials
  std::vector<double> host_partials_;
  std::vector<double> chunk_partials_;  // per chunk, from the last finish_step (one rank)
  // Where chunk c's sum of this step is.
  enum class Held : uint8_t {
    none,          // no contribution yet (finish_step zeroes acc and moves to in_acc)
    in_work,       // the only contribution, in the working buffer; acc not written
    in_work_also,  // the only contribution, in the working buffer and widened into acc
    in_acc,        // acc holds the sum; the working buffer is scratch
  };
  std::vector<Held> held_;  // per chunk
  std::vector<ChunkShard> shards_;      // per chunk: this rank's shard (the whole chunk on one rank)
  // Across ranks (spread_over_ranks; comm_ null otherwise). acc_[c] is then the shard's sum
  // (stride floats) and partials_ holds size() x rank_partials_ doubles, rank r's at r x
  // rank_partials_ (its chunk c's blocks at partial_at_[c] within).
  Communicator* comm_ = nullptr;
  std::vector<uint32_t> releases_;      // per chunk: its releases per step
  std::vector<float*> stacks_;          // per chunk of R > 1 releases: the shards received, [release][rank][stride]
  float* exchange_ = nullptr;           // size() x the largest stride: a release by destination rank
  float* received_ = nullptr;           // as large, with micro_batches_ > 1: a later round's shards
  uint64_t micro_batches_ = 1;          // a rank's per step (its backwards: rounds)
  uint64_t rank_partials_ = 0;
  std::vector<uint32_t> released_;      // per chunk: releases so far this backward (0 after its last)
  std::vector<uint32_t> rounds_;        // per chunk: backwards (rounds) that released it this step
};

}  // namespace strata
