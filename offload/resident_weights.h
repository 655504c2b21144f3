// ResidentWeights: the WeightSource (offload/chunk_source.h) whose chunks all live on the device
// for the whole run, one arena block each: acquire hands out the block, release does nothing.
// This is the default when the model fits. Updates (load, init, the optimizer's copy-out) are
// written into a small ring of pinned staging buffers and copied up on Stream::h2d; the compute
// stream waits for them before its next use, so an optimizer on the host overlaps its next
// chunk with the previous chunk's upload.
// Thread-safety: one driving thread (WeightSource's contract). Lifetime: the backend and the
// pinned pool outlive it; the destructor waits for every stream and returns its blocks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offload/chunk_source.h"
#include "runtime/backend.h"
#include "runtime/pinned_pool.h"

namespace strata {

inline constexpr uint32_t kResidentStaging = 2;  // update buffers of a ResidentWeights by default

// Pinned bytes create() takes: `staging` buffers of the largest chunk, each rounded up to the
// pool's 4 KiB blocks (0 for no chunks). For the planner (model/plan/planner.h).
uint64_t resident_weights_pinned_bytes(const std::vector<uint64_t>& chunk_bytes, uint32_t staging = kResidentStaging);

class ResidentWeights final : public WeightSource {
 public:
  // One device block per entry of `chunk_bytes` (tags "<name> weights (<chunk_names[c]>)"), and
  // `staging` pinned buffers of the largest chunk. Over budget: the arena's out_of_memory naming
  // the chunk; the pool's for the staging.
  static StatusOr<std::unique_ptr<ResidentWeights>> create(Backend& backend, PinnedPool& pinned,
                                                           const std::vector<uint64_t>& chunk_bytes,
                                                           const std::vector<std::string>& chunk_names,
                                                           const std::string& name,
                                                           uint32_t staging = kResidentStaging);
  ~ResidentWeights() override;
  ResidentWeights(const ResidentWeights&) = delete;
  ResidentWeights& operator=(const ResidentWeights&) = delete;

  size_t chunk_count() const override { return chunks_.size(); }
  uint64_t chunk_bytes(size_t c) const override { return bytes_.at(c); }
  Status begin_sequence(std::string_view) override { return Status::ok(); }
  Status end_sequence() override { return Status::ok(); }
  StatusOr<std::byte*> acquire(size_t c) override;
  // Another reader waits for the uploads still in flight (the compute stream did at each commit).
  StatusOr<std::byte*> acquire_for(size_t c, Stream reader) override;
  Status release(size_t c) override;
  StatusOr<std::byte*> update_buffer(size_t c) override;
  Status commit_update(size_t c) override;
  Status flush() override;
  Status read(size_t c, std::byte* host) override;

  // Chunk c's device block (tests; the device optimizer updates weights in place).
  std::byte* device_chunk(size_t c) const { return chunks_.at(c); }

 private:
  ResidentWeights(Backend& backend, std::vector<uint64_t> bytes) : backend_(backend), bytes_(std::move(bytes)) {}
  Status check_chunk(size_t c, const char* what) const;

  Backend& backend_;
  const std::vector<uint64_t> bytes_;
  std::vector<std::byte*> chunks_;                 // device, one block per chunk
  std::vector<PinnedBuffer> staging_;              // ring of update buffers, largest chunk each
  std::vector<std::unique_ptr<Event>> uploaded_;   // per staging buffer: its last upload
  std::unique_ptr<Event> computed_;
  size_t next_staging_ = 0;
  int64_t pending_chunk_ = -1;                     // the chunk whose update buffer is out
};

}  // namespace strata
