// BatchLoader: the ring of pinned batch buffers and the loader thread that fills them in order.
// A fill runs outside the lock; a seek() while it runs bumps the generation so that fill is
// dropped when it is published. Not a device copy.
#include "model/data/batch_loader.h"

#include <cstring>

namespace strata::model {
namespace {

// Bytes of one ring buffer: the (B, T) inputs and targets.
uint64_t buffer_bytes_of(const BatchLoaderOptions& o) {
  return 2ull * o.sampling.batch_size * o.sampling.seq_len * sizeof(int32_t);
}

}  // namespace

uint64_t batch_loader_pinned_bytes(const BatchLoaderOptions& options) {
  constexpr uint64_t kBlock = 4096;  // PinnedPool rounds every block up to 4 KiB
  return uint64_t(options.depth) * ((buffer_bytes_of(options) + kBlock - 1) / kBlock * kBlock);
}

StatusOr<std::unique_ptr<BatchLoader>> BatchLoader::create(TokenDataset dataset, PinnedPool& pool,
                                                           const BatchLoaderOptions& options) {
  if (options.depth < 2) {
    return error(Code::invalid_argument,
                 "batch loader depth {} must be at least 2 (one batch in use, one being filled)", options.depth);
  }
  STRATA_ASSIGN_OR_RETURN(WindowSampler sampler, WindowSampler::create(dataset, options.sampling));
  STRATA_RETURN_IF_ERROR(sampler.check(options.start));
  std::unique_ptr<BatchLoader> loader(new BatchLoader(std::move(dataset), std::move(sampler), options));
  const uint64_t buffer_bytes = buffer_bytes_of(options);
  for (uint32_t i = 0; i < options.depth; ++i) {
    StatusOr<PinnedBuffer> buffer = pool.acquire(buffer_bytes);
    if (!buffer.is_ok()) return buffer.status().with_context("allocating the batch loader's pinned ring");
    loader->buffers_.push_back(std::move(buffer).value());
  }
  loader->thread_ = std::thread([l = loader.get()] { l->run(); });
  return loader;
}

BatchLoader::BatchLoader(TokenDataset dataset, WindowSampler sampler, const BatchLoaderOptions& options)
    : dataset_(std::move(dataset)),
      sampler_(std::move(sampler)),
      batch_size_(options.sampling.batch_size),
      seq_len_(options.sampling.seq_len),
      batches_per_epoch_(sampler_.batches_per_epoch()),
      fill_position_(options.start),
      next_position_(options.start) {
  for (uint32_t i = 0; i < options.depth; ++i) free_buffers_.push_back(i);  // create() acquires the buffers
}

BatchLoader::~BatchLoader() { stop(); }

void BatchLoader::stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BatchLoader::run() {
  std::vector<uint64_t> starts(batch_size_);
  std::vector<int32_t> row(seq_len_ + 1);
  MutexLock lock(mu_);
  while (true) {
    while (!stopping_ && free_buffers_.empty()) cv_.wait(mu_);
    if (stopping_) return;
    const uint32_t buffer = free_buffers_.front();
    free_buffers_.pop_front();
    const LoaderPosition p = fill_position_;
    const uint64_t generation = generation_;
    fill_position_ = sampler_.advance(p);
    lock.unlock();
    fill(buffer, p, starts, row);
    lock.lock();
    if (generation == generation_) {
      ready_.push_back({buffer, p});
    } else {
      free_buffers_.push_back(buffer);
    }
    cv_.notify_all();
  }
}

void BatchLoader::fill(uint32_t buffer, LoaderPosition p, std::vector<uint64_t>& starts, std::vector<int32_t>& row) {
  sampler_.row_starts(p, starts);
  const size_t bt = size_t{batch_size_} * seq_len_;
  int32_t* inputs = buffers_[buffer].as<int32_t>();
  int32_t* targets = inputs + bt;
  for (uint32_t b = 0; b < batch_size_; ++b) {
    dataset_.read(starts[b], seq_len_ + 1, row.data());
    std::memcpy(inputs + size_t{b} * seq_len_, row.data(), seq_len_ * sizeof(int32_t));
    std::memcpy(targets + size_t{b} * seq_len_, row.data() + 1, seq_len_ * sizeof(int32_t));
  }
}

StatusOr<BatchView> BatchLoader::next() {
  MutexLock lock(mu_);
  if (stopping_) return error(Code::failed_precondition, "the batch loader was stopped; no more batches");
  if (held_buffer_ >= 0) {
    free_buffers_.push_back(static_cast<uint32_t>(held_buffer_));
    held_buffer_ = -1;
    cv_.notify_all();
  }
  while (!stopping_ && ready_.empty()) cv_.wait(mu_);
  if (stopping_) return error(Code::failed_precondition, "the batch loader was stopped; no more batches");
  const Ready r = ready_.front();
  ready_.pop_front();
  held_buffer_ = r.buffer;
  next_position_ = sampler_.advance(r.position);
  BatchView view;
  view.inputs = buffers_[r.buffer].as<int32_t>();
  view.targets = view.inputs + size_t{batch_size_} * seq_len_;
  view.batch_size = batch_size_;
  view.seq_len = seq_len_;
  view.position = r.position;
  return view;
}

LoaderPosition BatchLoader::position() const {
  MutexLock lock(mu_);
  return next_position_;
}

Status BatchLoader::seek(LoaderPosition p) {
  STRATA_RETURN_IF_ERROR(sampler_.check(p));
  MutexLock lock(mu_);
  ++generation_;
  for (const Ready& r : ready_) free_buffers_.push_back(r.buffer);
  ready_.clear();
  fill_position_ = p;
  next_position_ = p;
  cv_.notify_all();
  return Status::ok();
}

}  // namespace strata::model
