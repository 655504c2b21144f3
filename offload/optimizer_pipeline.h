// OptimizerPipeline: the optimizer state of every chunk (fp32 master weights + Adam m + v, or
// master + 8-bit m/v codes + their block scales) as ONE contiguous, aligned image per chunk, homed
// in pinned CPU memory or in one NvmeStore extent per chunk, and one pipelined walk over the chunks
// in a given order: read(next) | visit(current) | write(previous), through a bounded ring of pinned
// staging buffers (nvme home). The same walk serves the optimizer step (visit = AdamW), checkpoint
// save (visit = copy out, no write back) and restore/initialization (visit = fill, write back).
// Not the Adam arithmetic (offload/cpu_adam.h, run by the visit), not a gradient path and not a
// scheduler (the caller decides when a walk runs and on which thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "offload/cpu_adam.h"
#include "offload/nvme_store.h"
#include "offload/staging_ring.h"
#include "offload/sticky_error.h"
#include "offload/tier.h"
#include "runtime/pinned_pool.h"
#include "runtime/status.h"

namespace strata {

class TraceRecorder;  // offload/trace.h

// ---- the per-chunk image ------------------------------------------------------------------------

// One region of a chunk's state image: bytes [offset, offset + bytes). Empty (bytes 0) when the
// state kind does not have it.
struct StateRegion {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

inline constexpr uint64_t kStateRegionAlignment = 64;  // every region starts on a cache line

// Where each state of one chunk sits in its image. n = fp32_elements (the chunk's fp32 master bytes
// / 4, padding included), s = scale_count:
//   f32: master (4n) | m (4n fp32) | v (4n fp32)
//   q8 : master (4n) | m_code (n int8) | v_code (n uint8) | m_scale (4s fp32) | v_scale (4s fp32)
// in that order, each region starting on a kStateRegionAlignment boundary. A tensor whose master
// starts at fp32 element k of the chunk has its fp32 moments at element k of m and v, or its codes at
// byte k of m_code and v_code (one code per element, as Trainer lays out pinned 8-bit states); its
// block scales are a run of the chunk's scales, in tensor order (the caller's bookkeeping).
struct OptimizerStateLayout {
  AdamStates states = AdamStates::f32;
  uint64_t fp32_elements = 0;
  uint64_t scale_count = 0;
  StateRegion master;
  StateRegion m, v;                 // f32 only
  StateRegion m_code, v_code;       // q8 only
  StateRegion m_scale, v_scale;     // q8 only
  uint64_t bytes = 0;   // end of the last region: the extent's logical size
  uint64_t padded = 0;  // bytes rounded up to `alignment`: what a buffer for the image must hold
};

// Pure. `alignment`: the padding of the whole image (4096, or the store's alignment if larger;
// a power of two >= kStateRegionAlignment). scale_count is ignored for f32.
OptimizerStateLayout optimizer_state_layout(AdamStates states, uint64_t fp32_elements, uint64_t scale_count,
                                            uint64_t alignment = 4096);

// ---- options and preflight ----------------------------------------------------------------------

struct OptimizerPipelineOptions {
  // Per chunk (indexed as ParamLayout::chunks of the master layout): fp32 elements (master bytes / 4),
  // and for q8 the total block scales of its tensors (sum of kernels::adam8bit_blocks(elements));
  // for f32 scale_count is empty or all zero.
  std::vector<uint64_t> fp32_elements;
  std::vector<uint64_t> scale_count;
  AdamStates states = AdamStates::f32;
  Tier home = Tier::cpu;  // cpu (pinned, visited in place) or nvme (one extent per chunk)
  // nvme: pinned staging buffers, each the largest padded image; >= 3 (the chunk read ahead, the
  // one visited, the one being written). More buffers read further ahead.
  uint32_t staging = 3;
  std::string name = "optimizer";  // for extent names, errors and trace tags
  // Per chunk: how extent names, errors and trace spans call it ("chunk 3 piece 2/5" for a caller
  // whose pipeline chunks are pieces of its own); empty: "chunk <index>".
  std::vector<std::string> labels;
};

// invalid_argument naming what is wrong (no chunks, a chunk of 0 slots, scale counts or labels of the
// wrong length, q8 with a chunk of 0 scales or f32 with scales, home not cpu/nvme, nvme without a store
// or with fewer than 3 staging buffers), else ok. `have_store`: an NvmeStore will be given.
Status check_optimizer_pipeline_options(const OptimizerPipelineOptions& options, bool have_store);

// Pinned bytes create() takes (cpu home: every chunk's image; nvme home: the staging ring), and
// the NVMe bytes of its extents (0 for a cpu home), for a preflight against --cpu-mem and the
// store's reservation before anything is allocated. Pass the store's alignment when known.
uint64_t optimizer_pipeline_pinned_bytes(const OptimizerPipelineOptions& options, uint32_t store_alignment = 4096);
uint64_t optimizer_pipeline_nvme_bytes(const OptimizerPipelineOptions& options, uint32_t store_alignment = 4096);

// ---- the visit's view of one chunk --------------------------------------------------------------

// Typed pointers into one chunk's image, valid only during the visit. f32: master, m, v
// (fp32_elements each); q8: master (fp32_elements), m_code and v_code (fp32_elements each), m_scale and
// v_scale (scale_count each); the pointers of the other kind are null. `image` is the whole image
// (layout.bytes), e.g. for a checkpoint that copies it out or in at once.
struct ChunkState {
  size_t chunk = 0;
  uint64_t fp32_elements = 0;
  uint64_t scale_count = 0;
  float* master = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  int8_t* m_code = nullptr;
  uint8_t* v_code = nullptr;
  float* m_scale = nullptr;
  float* v_scale = nullptr;
  std::span<std::byte> image;
};

struct OptimizerPipelineStats {
  uint64_t chunks_visited = 0;
  uint64_t read_bytes = 0;     // NVMe bytes read (padded images)
  uint64_t write_bytes = 0;    // NVMe bytes written (padded images)
  uint64_t zero_fills = 0;     // nvme: visits of never-written chunks, served as zeros without a read
  // Reads begun before the visit of the chunk preceding theirs in the walk had finished (the
  // read-ahead at work: all but the walk's first), and the most chunks read ahead of the one being
  // visited at any visit (staging - 1 at a walk's first visit, staging - 2 in the steady state,
  // where one buffer is visited and one holds the previous chunk's write).
  uint64_t reads_ahead = 0;
  uint64_t max_reads_ahead = 0;
  uint64_t peak_staging_in_use = 0;  // most staging buffers busy at once (<= options.staging)
  double read_wait_seconds = 0;   // the driving thread waiting for (and CRC-checking) reads
  double write_wait_seconds = 0;  // waiting for writes to finish (staging reuse, walk end)
  double visit_seconds = 0;       // inside visit()
  // As carved in create (fixed for the pipeline's life).
  uint64_t pinned_bytes = 0;
  uint64_t nvme_bytes = 0;
};

// Ownership: the pipeline owns its pinned buffers (from `pool`) and extents (in `store`); the pool,
// store and trace recorder are borrowed and must outlive it. The store's engine completes I/O
// asynchronously; every transfer a walk begins is finished before the walk returns.
// Thread-safety: one driving thread calls every method (not safe for concurrent use).
// Contents start zeroed: a cpu home is zero-filled at create; an nvme extent never written reads as
// zeros without any I/O (the store refuses to read an extent never written) until the first walk
// with write_back writes it. So both homes look the same to a visit from the start.
class OptimizerPipeline {
 public:
  // `store`: required iff options.home is nvme (a store given with a cpu home is not used).
  // `trace`: optional; spans "chunk c" on tracks "optimizer read" / "optimizer write".
  // Errors: invalid_argument (check_optimizer_pipeline_options); out_of_memory from the pool naming
  // the buffer and the pinned bytes all of them need; no_space from the store naming the chunk.
  static StatusOr<std::unique_ptr<OptimizerPipeline>> create(PinnedPool& pool, NvmeStore* store,
                                                             TraceRecorder* trace, OptimizerPipelineOptions options);
  ~OptimizerPipeline();  // releases the extents (no I/O is in flight between walks)
  OptimizerPipeline(const OptimizerPipeline&) = delete;
  OptimizerPipeline& operator=(const OptimizerPipeline&) = delete;

  using Visit = std::function<Status(size_t chunk, ChunkState& state)>;

  // Visits the chunks of `order` (distinct chunk indices, any order, any subset) one at a time.
  // cpu home: the pinned image in place, no copies (write_back has no effect: the state is the home).
  // nvme home: reads of the next chunks are begun into free staging buffers, as far ahead as the
  // ring allows (a buffer still writing a chunk older than the previous one is finished to make
  // room); the current chunk's read is finished and CRC-checked by the store, it is visited, and
  // then (write_back) its write is begun, finished lazily on staging reuse or at the end of the walk.
  // Returns the first error, every transfer begun having been finished:
  //  - invalid_argument for an index out of range or repeated (before any I/O);
  //  - a read error (io_error past the store's retries, corruption on a CRC mismatch) naming the
  //    chunk, the extent and the path: the walk stops there and that chunk is never visited;
  //  - the visit's error, with the chunk as context: the walk stops, that chunk is not written
  //    (nvme: its extent keeps the previous state; cpu: the visit's partial changes stay);
  //  - a write error (e.g. no_space) naming the chunk: sticky, every later walk returns it, since
  //    that chunk's extent no longer holds valid state.
  Status for_each_chunk(std::span<const size_t> order, const Visit& visit, bool write_back);

  // The same walk one visit at a time, for a caller that interleaves it with other work (the
  // trainer updates chunk c just before the next forward needs it). begin_walk validates `order`
  // (invalid_argument as above, nothing begun) and begins the first reads (nvme); visit_next
  // visits the next chunk of the order (reading further ahead, finishing its read, visiting,
  // beginning its write); end_walk finishes every transfer still in flight and returns the
  // sticky write error. Between calls the reads ahead and the writes behind proceed on their own.
  // Errors as for_each_chunk's; any error also ends the walk (every transfer finished, the rest
  // of the order unvisited). failed_precondition: begin_walk during a walk, visit_next outside
  // one or past its order's end. for_each_chunk is begin_walk + visit_next per chunk + end_walk.
  Status begin_walk(std::span<const size_t> order, bool write_back);
  Status visit_next(const Visit& visit);
  Status end_walk();
  bool walking() const { return walking_; }
  // The chunk visit_next visits next; precondition: walking() and walk_remaining() > 0.
  size_t walk_next_chunk() const { return walk_order_[walk_pos_]; }
  size_t walk_remaining() const { return walking_ ? walk_order_.size() - walk_pos_ : 0; }

  size_t chunk_count() const { return layouts_.size(); }
  const OptimizerStateLayout& layout(size_t c) const { return layouts_[c]; }
  const OptimizerPipelineOptions& options() const { return options_; }
  Status write_error() const { return write_error_.status(); }

  OptimizerPipelineStats stats() const;
  void reset_stats();  // counters and times to zero (per step); the carved sizes stay

 private:
  struct StagingUse;  // per staging buffer: the walk's state of its read
  StagingRingOptions ring_options() const;
  OptimizerPipeline(PinnedPool& pool, NvmeStore* store, TraceRecorder* trace, OptimizerPipelineOptions options);
  Status carve();
  ChunkState view(size_t c, std::byte* image) const;
  std::string label(size_t c) const;

  Status visit_cpu(size_t c, const Visit& visit);
  Status visit_nvme(size_t i, const Visit& visit);  // walk position i
  void read_ahead(size_t visiting);                  // begins reads into the free staging buffers
  Status abort_walk(Status why);                     // drains, ends the walk, returns `why`
  // A staging buffer for a read while walk position `visiting` is next to be visited: an idle one,
  // else the one holding the oldest write of a position <= visiting - 2, finished first. -1: none.
  int take_for_read(size_t visiting);
  void begin_read(size_t pos, size_t c, int b);  // a begin error is kept in the buffer for its visit
  Status finish_read(int b);                      // waits, checks; on error frees b
  Status finish_write(int b);                     // records the first error (sticky)
  bool writing(size_t b) const;                   // staging b has a write in flight
  void drain();                                   // finishes every transfer in flight (errors: reads dropped, writes sticky)
  void note_in_use();

  PinnedPool& pool_;
  NvmeStore* const store_;
  const OptimizerPipelineOptions options_;
  std::vector<OptimizerStateLayout> layouts_;
  std::vector<PinnedBuffer> homes_;   // cpu home, one per chunk
  std::vector<ExtentId> extents_;     // nvme home, one per chunk
  std::vector<uint8_t> written_;      // nvme home: the extent holds a good write
  StagingRing staging_;               // nvme home; holder: the chunk read, visited or written
  std::vector<StagingUse> use_;       // per staging buffer
  std::vector<uint8_t> seen_;         // per chunk, scratch for order validation
  std::vector<int> buffer_of_;        // per walk position: staging buffer holding its read, -1: none
  uint32_t alignment_ = 4096;
  StickyError write_error_;           // first failed write
  // The walk in progress (begin_walk .. end_walk).
  bool walking_ = false;
  bool walk_write_back_ = false;
  std::vector<size_t> walk_order_;
  size_t walk_pos_ = 0;   // the next position to visit
  size_t walk_next_ = 0;  // the next position to begin a read for (nvme)
  OptimizerPipelineStats counters_;
};

}  // namespace strata
