// CheckpointRanks: the messages the ranks of a scale-out run exchange to write one checkpoint
// together (model/ckpt/checkpoint.h's save_checkpoint on rank 0, save_checkpoint_shard on the
// others): rank 0's list of the files it created, a status from every rank that they all agree
// on, and each rank's record of the pieces it wrote. Small host messages, moved by a ShardGather
// (offload/shard_gather.h) over the run's communicator. Not the checkpoint's contents and not
// the shards' bytes, which every rank writes into the files itself.
// Thread-safety: one driving thread. Lifetime: the ShardGather outlives it. Every method is a
// collective: every rank calls the same ones in the same order (a rank that stops calling them
// leaves the others to the communicator's timeout).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "offload/shard_gather.h"
#include "runtime/status.h"

namespace strata::model {

class CheckpointRanks {
 public:
  // `gather` over the run's communicator; `rank` of `size` as it says.
  CheckpointRanks(ShardGather& gather, int rank, int size) : gather_(gather), rank_(rank), size_(size) {}

  int rank() const { return rank_; }
  int size() const { return size_; }

  // The file list of a save (save_checkpoint's first message across ranks): rank 0 sends it once
  // per save, an error when its save failed before it had files to share, so the others never
  // wait for a list that will not come. files_sent() says whether this save's went out; begin_save()
  // starts the next save.
  // The list is a JSON object; a failure is {"error": message} (failed_files() tells it apart).
  StatusOr<std::string> send_files(const std::string& text) {
    sent_ = true;
    return broadcast(text);
  }
  Status send_failure(const Status& why);
  static bool failed_files(const std::string& text);
  bool files_sent() const { return sent_; }
  void begin_save() { sent_ = false; }

  // Every rank's `mine`, in rank order, on every rank (any lengths, 0 included).
  StatusOr<std::vector<std::string>> all_gather(const std::string& mine);
  // Rank 0's `text` on every rank (the others' `text` is ignored: pass "").
  StatusOr<std::string> broadcast(const std::string& text);
  // `agreed` := ok on every rank when every rank's `mine` is ok; else, on every rank, the lowest
  // failing rank's error (its code, its message prefixed "rank r: ").
  // Returns the exchange's own failure (a dead rank) as the communicator reports it.
  Status agree(const Status& mine, Status& agreed);

  // One Status as bytes and back (agree's message; save_checkpoint_shard's report): decode_status
  // reads the one at `at` of `bytes` into `out` and moves `at` past it; corruption on bytes
  // encode_status did not make.
  static std::string encode_status(const Status& s);
  static Status decode_status(const std::string& bytes, size_t& at, Status& out);

 private:
  ShardGather& gather_;
  const int rank_;
  const int size_;
  bool sent_ = false;
};

}  // namespace strata::model
