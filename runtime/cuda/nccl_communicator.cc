// NcclCommunicator: each collective is numbered, bracketed by two events on its CUDA stream (its
// start: the work before it done; its end) and queued as one NCCL group; a non-blocking NCCL
// communicator, so queueing itself is polled. synchronize() polls those events and NCCL's
// asynchronous error instead of blocking in cudaStreamSynchronize: a collective that has started
// and makes no progress for CommOptions' timeout is aborted (ncclCommAbort) and named. The ordered
// sums run on the compute stream (ComputeOps::accumulate_widened), fenced by events when the
// collective's stream is another. Compiled to nothing without NCCL (STRATA_HAVE_NCCL unset: the
// CUDA backend then has no communicator beyond the local one, and make_communicator says so).
#if STRATA_HAVE_NCCL
#include "runtime/cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/file_rendezvous.h"
#include "runtime/mpi_communicator.h"
#include "runtime/mutex.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The poll's pause: spin a little (a small collective completes in microseconds), then sleep.
void pause_poll(int& polls) {
  if (++polls > 200) std::this_thread::sleep_for(std::chrono::microseconds(50));
  else std::this_thread::yield();
}

std::string nccl_error_text(ncclComm_t comm, ncclResult_t r) {
  std::string text = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += fmt::format(": {}", last);
  return text;
}

bool ranges_overlap(const void* a, uint64_t a_bytes, const void* b, uint64_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

// Polls a non-blocking communicator until NCCL has finished the call that returned ncclInProgress
// (its setup, or the queueing of a group); the timeout counts from the call (0: forever).
// Returns NCCL's result, or ncclInProgress when the time ran out.
ncclResult_t wait_nccl(ncclComm_t comm, double timeout_seconds, double* waited) {
  const auto start = Clock::now();
  int polls = 0;
  while (true) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    *waited = seconds_since(start);
    if (state != ncclInProgress) return state;
    if (timeout_seconds > 0 && *waited > timeout_seconds) return ncclInProgress;
    pause_poll(polls);
  }
}

// One queued collective, as synchronize() watches it.
struct Pending {
  uint64_t seq;
  std::string_view op;  // a literal
  Stream stream;
  cudaEvent_t started;  // recorded before its first call: the work queued before it is done
  cudaEvent_t done;     // recorded after its last call
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(CudaBackend& backend, ncclComm_t comm, int rank, int size, bool owns_mpi,
                   const CommOptions& options, void* barrier_words)
      : backend_(backend), rank_(rank), size_(size), owns_mpi_(owns_mpi), options_(options),
        barrier_words_(static_cast<uint32_t*>(barrier_words)), comm_(comm) {}

  ~NcclCommunicator() override {
    MutexLock lock(mu_);
    (void)cudaSetDevice(backend_.device_index());
    // Waits (within the timeout, aborting NCCL when it runs out) for every collective, so the
    // scratch is no longer used and NCCL can be finalized.
    for (int s = 0; s < kStreamCount; ++s)
      if (streams_used_ & (1u << s)) (void)watch(static_cast<Stream>(s));
    const bool broken = !error_.is_ok();
    if (broken) {
      for (int s = 0; s < kStreamCount; ++s)  // the aborted kernels have returned
        if (streams_used_ & (1u << s)) (void)backend_.synchronize(static_cast<Stream>(s));
    } else if (comm_ != nullptr) {
      double waited = 0;
      ncclResult_t r = ncclCommFinalize(comm_);
      if (r == ncclInProgress || r == ncclSuccess) r = wait_nccl(comm_, options_.timeout_seconds, &waited);
      if (r == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
        error_ = error(Code::io_error, "finalizing NCCL on rank {} of {} failed: {}", rank_, size_,
                       r == ncclInProgress ? "timed out" : ncclGetErrorString(r));
      }
      comm_ = nullptr;
    }
    for (const Pending& p : pending_) {
      cudaEventDestroy(p.started);
      cudaEventDestroy(p.done);
    }
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    for (cudaEvent_t e : fence_) if (e != nullptr) cudaEventDestroy(e);
    if (scratch_ != nullptr) (void)backend_.release(scratch_);
    (void)backend_.release(barrier_words_);
    if (owns_mpi_ && error_.is_ok()) finalize_mpi();  // a dead peer would make MPI_Finalize hang
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "nccl"; }

  Status all_gather(const void* send, void* recv, uint64_t bytes, Stream s) override EXCLUDES(mu_) {
    static constexpr std::string_view op = "all_gather";
    MutexLock lock(mu_);
    STRATA_RETURN_IF_ERROR(check(op, send, bytes, "send"));
    STRATA_RETURN_IF_ERROR(check(op, recv, bytes * size_, "recv"));
    const char* own = static_cast<const char*>(recv) + rank_ * bytes;
    if (send != own && ranges_overlap(send, bytes, recv, bytes * size_))
      return invalid(op, "send overlaps recv but is not recv's block of this rank (the in-place form)");
    return collective(op, s, [&](cudaStream_t cs) REQUIRES(mu_) {
      return group([&]() REQUIRES(mu_) { return ncclAllGather(send, recv, bytes, ncclChar, comm_, cs); });
    });
  }

  Status all_to_all(const void* send, void* recv, uint64_t bytes, Stream s) override EXCLUDES(mu_) {
    static constexpr std::string_view op = "all_to_all";
    MutexLock lock(mu_);
    STRATA_RETURN_IF_ERROR(check(op, send, bytes * size_, "send"));
    STRATA_RETURN_IF_ERROR(check(op, recv, bytes * size_, "recv"));
    if (ranges_overlap(send, bytes * size_, recv, bytes * size_)) return invalid(op, "send and recv overlap");
    return collective(op, s, [&](cudaStream_t cs) REQUIRES(mu_) {
      return exchange(cs, [&](int p) { return Block{static_cast<const char*>(send) + p * bytes, bytes}; },
                      [&](int p) { return Block{static_cast<char*>(recv) + p * bytes, bytes}; }, /*copy_own=*/true);
    });
  }

  Status reduce_scatter(const float* send, float* recv, uint64_t count, Stream s) override EXCLUDES(mu_) {
    static constexpr std::string_view op = "reduce_scatter";
    MutexLock lock(mu_);
    STRATA_RETURN_IF_ERROR(check(op, send, count * size_ * 4, "send"));
    STRATA_RETURN_IF_ERROR(check(op, recv, count * 4, "recv"));
    if (ranges_overlap(send, count * size_ * 4, recv, count * 4)) return invalid(op, "send and recv overlap");
    // scratch block p: rank p's contribution to this rank's shard (this rank's own stays in send;
    // a world of one needs none).
    STRATA_ASSIGN_OR_RETURN(float* scratch, scratch_floats(op, size_ == 1 ? 0 : count * size_));
    return collective(op, s, [&](cudaStream_t cs) REQUIRES(mu_) -> Status {
      STRATA_RETURN_IF_ERROR(exchange(cs, [&](int p) { return Block{send + p * count, count * 4}; },
                                      [&](int p) { return Block{scratch + p * count, count * 4}; }, /*copy_own=*/false));
      return ordered_sum(s, cs, recv, count, [&](int p) { return p == rank_ ? send + rank_ * count : scratch + p * count; });
    });
  }

  Status all_reduce(const float* send, float* recv, uint64_t count, Stream s) override EXCLUDES(mu_) {
    static constexpr std::string_view op = "all_reduce";
    MutexLock lock(mu_);
    STRATA_RETURN_IF_ERROR(check(op, send, count * 4, "send"));
    STRATA_RETURN_IF_ERROR(check(op, recv, count * 4, "recv"));
    if (send != recv && ranges_overlap(send, count * 4, recv, count * 4))
      return invalid(op, "send and recv overlap but are not the same buffer (the in-place form)");
    // Shard p = [begin(p), begin(p + 1)), as MpiCommunicator: reduce-scatter the shards, then
    // all-gather the sums. In place, the ordered sum into recv's shard would overwrite this rank's
    // contribution before it is added (rank > 0): it is copied to the scratch first.
    auto begin = [count, n = size_](int p) { return count * static_cast<uint64_t>(p) / n; };
    const uint64_t mine = begin(rank_), n = begin(rank_ + 1) - mine;
    const bool copy_own = send == recv && rank_ > 0;
    STRATA_ASSIGN_OR_RETURN(float* scratch, scratch_floats(op, size_ == 1 ? 0 : n * size_));
    return collective(op, s, [&](cudaStream_t cs) REQUIRES(mu_) -> Status {
      if (copy_own && n > 0)
        STRATA_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(scratch + rank_ * n, send + mine, n * 4, cudaMemcpyDeviceToDevice, cs));
      auto shard = [&](const float* base, int p) { return Block{base + begin(p), (begin(p + 1) - begin(p)) * 4}; };
      STRATA_RETURN_IF_ERROR(exchange(cs, [&](int p) { return shard(send, p); },
                                      [&](int p) { return Block{scratch + p * n, n * 4}; }, /*copy_own=*/false));
      STRATA_RETURN_IF_ERROR(ordered_sum(s, cs, recv + mine, n, [&](int p) -> const float* {
        return p == rank_ && !copy_own ? send + mine : scratch + p * n;
      }));
      return exchange(cs, [&](int) { return Block{recv + mine, n * 4}; }, [&](int p) { return shard(recv, p); },
                      /*copy_own=*/false);
    });
  }

  Status broadcast(void* buf, uint64_t bytes, int root, Stream s) override EXCLUDES(mu_) {
    static constexpr std::string_view op = "broadcast";
    MutexLock lock(mu_);
    if (root < 0 || root >= size_) return invalid(op, fmt::format("root {} is not a rank", root));
    STRATA_RETURN_IF_ERROR(check(op, buf, bytes, "buf"));
    return collective(op, s, [&](cudaStream_t cs) REQUIRES(mu_) {
      return group([&]() REQUIRES(mu_) { return ncclBroadcast(buf, buf, bytes, ncclChar, root, comm_, cs); });
    });
  }

  // An all-gather of one word a rank: no rank's copy completes before every rank has joined.
  Status barrier(Stream s) override EXCLUDES(mu_) {
    static constexpr std::string_view op = "barrier";
    MutexLock lock(mu_);
    return collective(op, s, [&](cudaStream_t cs) REQUIRES(mu_) {
      return group([&]() REQUIRES(mu_) { return ncclAllGather(barrier_words_ + rank_, barrier_words_, 4, ncclChar, comm_, cs); });
    });
  }

  Status synchronize(Stream s) override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    STRATA_RETURN_IF_ERROR(watch(s));
    return backend_.synchronize(s);  // the stream's work after its last collective
  }

  // ncclCommSplit with one color: the same ranks in the same order, a communicator of its own.
  StatusOr<std::unique_ptr<Communicator>> duplicate() override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    STRATA_RETURN_IF_ERROR(sticky());
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(backend_.device_index()));
    StatusOr<void*> words = backend_.allocate(4 * static_cast<uint64_t>(size_), "nccl barrier");
    if (!words.is_ok()) return words.status().with_context("the duplicate NCCL communicator's barrier words");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // as the first: a rank that never splits is a timeout, not a hang
    ncclComm_t dup = nullptr;
    ncclResult_t r = ncclCommSplit(comm_, /*color=*/0, /*key=*/rank_, &dup, &config);
    double waited = 0;
    if (r == ncclInProgress || r == ncclSuccess) r = wait_nccl(comm_, options_.timeout_seconds, &waited);
    if (r == ncclSuccess && dup != nullptr) r = wait_nccl(dup, options_.timeout_seconds, &waited);
    if (r != ncclSuccess || dup == nullptr) {
      std::string why = r == ncclInProgress
                            ? fmt::format("the other ranks did not split within {:.1f} s (timeout {:.1f} s)", waited,
                                          options_.timeout_seconds)
                            : nccl_error_text(dup != nullptr ? dup : comm_, r);
      if (dup != nullptr) ncclCommAbort(dup);
      (void)backend_.release(*words);
      return error(Code::unavailable, "ncclCommSplit on rank {} of {} failed: {}", rank_, size_, why);
    }
    return std::unique_ptr<Communicator>(
        std::make_unique<NcclCommunicator>(backend_, dup, rank_, size_, /*owns_mpi=*/false, options_, *words));
  }

 private:
  struct Block {
    const void* ptr;
    uint64_t bytes;
  };

  Status sticky() const REQUIRES(mu_) { return error_; }

  Status invalid(std::string_view op, std::string_view what) const {
    return error(Code::invalid_argument, "{} on rank {} of {}: {}", op, rank_, size_, what);
  }

  // A buffer argument: null or outside the backend's live blocks is invalid_argument, before
  // anything is queued; a broken communicator returns its error.
  Status check(std::string_view op, const void* p, uint64_t bytes, std::string_view what) const REQUIRES(mu_) {
    STRATA_RETURN_IF_ERROR(sticky());
    if (bytes == 0) return Status::ok();
    if (p == nullptr) return invalid(op, fmt::format("null {} buffer for {} bytes", what, bytes));
    return backend_.check_device_range(p, bytes, fmt::format("{} on rank {} of {}: {}", op, rank_, size_, what));
  }

  // The first failure after a collective is numbered: NCCL is aborted (the ranks may be mid-way
  // through an exchange that can no longer complete) and the error is sticky.
  Status fail(std::string_view op, uint64_t seq, std::string_view what) REQUIRES(mu_) {
    if (error_.is_ok()) error_ = error(Code::io_error, "{} #{} on rank {} of {}: {}", op, seq, rank_, size_, what);
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    return error_;
  }

  StatusOr<cudaEvent_t> take_event() REQUIRES(mu_) {
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  // Numbers the collective and queues `body` on `s`'s CUDA stream between its two events.
  template <class Body>
  Status collective(std::string_view op, Stream s, Body&& body) REQUIRES(mu_) {
    STRATA_RETURN_IF_ERROR(sticky());
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(backend_.device_index()));  // before numbering: not sticky
    const uint64_t seq = ++next_seq_;
    retire_completed();
    streams_used_ |= 1u << static_cast<unsigned>(s);
    cudaStream_t cs = backend_.stream(s);
    Pending p{seq, op, s, nullptr, nullptr};
    Status st = [&]() REQUIRES(mu_) -> Status {
      STRATA_ASSIGN_OR_RETURN(p.started, take_event());
      STRATA_ASSIGN_OR_RETURN(p.done, take_event());
      STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(p.started, cs));
      STRATA_RETURN_IF_ERROR(body(cs));
      return STRATA_CUDA_STATUS(cudaEventRecord(p.done, cs));
    }();
    if (!st.is_ok()) {
      for (cudaEvent_t e : {p.started, p.done})
        if (e != nullptr) free_events_.push_back(e);
      return fail(op, seq, st.message());
    }
    pending_.push_back(p);
    return Status::ok();
  }

  // One NCCL group around `calls` (which returns the first failing call's result), then the wait
  // until the non-blocking communicator has queued it.
  template <class Calls>
  Status group(Calls&& calls) REQUIRES(mu_) {
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess) {
      ncclResult_t c = calls();
      r = ncclGroupEnd();
      if (c != ncclSuccess && c != ncclInProgress) r = c;
    }
    if (r != ncclSuccess && r != ncclInProgress)
      return error(Code::io_error, "NCCL failed to queue it: {}", nccl_error_text(comm_, r));
    double waited = 0;
    r = wait_nccl(comm_, options_.timeout_seconds, &waited);
    if (r == ncclInProgress)
      return error(Code::io_error, "NCCL could not queue it for {:.1f} s (timeout {:.1f} s): a peer is dead, stuck "
                   "or not in this collective", waited, options_.timeout_seconds);
    if (r != ncclSuccess) return error(Code::io_error, "NCCL: {}", nccl_error_text(comm_, r));
    return Status::ok();
  }

  // Block send(p) to rank p and block recv(p) from rank p, for every other rank, as one group of
  // ncclSend/ncclRecv (no messages to itself); with copy_own, this rank's block is copied from
  // send(rank) to recv(rank) on the stream (the all-to-all), else left where it is (the sums read it
  // in place).
  template <class Send, class Recv>
  Status exchange(cudaStream_t cs, Send&& send, Recv&& recv, bool copy_own) REQUIRES(mu_) {
    if (copy_own) {
      const Block from = send(rank_), to = recv(rank_);
      if (from.bytes > 0)
        STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(const_cast<void*>(to.ptr), from.ptr, from.bytes,
                                                    cudaMemcpyDeviceToDevice, cs));
    }
    if (size_ == 1) return Status::ok();
    return group([&]() REQUIRES(mu_) {
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        const Block out = send(p), in = recv(p);
        ncclResult_t r = ncclSend(out.ptr, out.bytes, ncclChar, p, comm_, cs);
        if (r == ncclSuccess) r = ncclRecv(const_cast<void*>(in.ptr), in.bytes, ncclChar, p, comm_, cs);
        if (r != ncclSuccess) return r;
      }
      return ncclSuccess;
    });
  }

  // acc (n fp32) = part(0) + part(1) + ... + part(size - 1), in that order (the first taken as is),
  // by the backend's accumulate_widened on the compute stream; fenced by events when `s` is
  // another stream, so it runs after `s`'s work so far and before `s`'s next.
  template <class Part>
  Status ordered_sum(Stream s, cudaStream_t cs, float* acc, uint64_t n, Part&& part) REQUIRES(mu_) {
    if (n == 0) return Status::ok();
    const bool fenced = s != Stream::compute;
    cudaStream_t compute = backend_.stream(Stream::compute);
    if (fenced) {
      STRATA_RETURN_IF_ERROR(fence_events());
      STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(fence_[0], cs));
      STRATA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute, fence_[0], 0));
    }
    for (int p = 0; p < size_; ++p)
      STRATA_RETURN_IF_ERROR(
          backend_.ops().accumulate_widened(acc, part(p), DType::f32, static_cast<int64_t>(n), p == 0));
    if (fenced) {
      STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(fence_[1], compute));
      STRATA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(cs, fence_[1], 0));
    }
    return Status::ok();
  }

  Status fence_events() REQUIRES(mu_) {
    for (cudaEvent_t& e : fence_)
      if (e == nullptr) STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return Status::ok();
  }

  // The scratch with room for `floats` (contents undefined). Growing it first waits for the
  // collectives that may still read the old one (the sums on the compute stream end before their
  // collective's `done` event).
  StatusOr<float*> scratch_floats(std::string_view op, uint64_t floats) REQUIRES(mu_) {
    const uint64_t bytes = floats * 4;
    if (bytes <= scratch_bytes_) return static_cast<float*>(scratch_);
    if (scratch_ != nullptr) {
      for (int t = 0; t < kStreamCount; ++t)
        if (streams_used_ & (1u << t)) STRATA_RETURN_IF_ERROR(watch(static_cast<Stream>(t)));
      STRATA_RETURN_IF_ERROR(backend_.release(scratch_));
      scratch_ = nullptr;
      scratch_bytes_ = 0;
    }
    StatusOr<void*> block = backend_.allocate(bytes, "nccl scratch");
    if (!block.is_ok())
      return block.status().with_context(fmt::format(
          "{} on rank {} of {}: the ordered sum's scratch ({} B: every rank's contribution to this rank's shard)", op,
          rank_, size_, bytes));
    scratch_ = *block;
    scratch_bytes_ = bytes;
    return static_cast<float*>(scratch_);
  }

  // Returns the events of the collectives that have completed, oldest first, to the pool.
  void retire_completed() REQUIRES(mu_) {
    while (!pending_.empty() && cudaEventQuery(pending_.front().done) == cudaSuccess) {
      free_events_.push_back(pending_.front().started);
      free_events_.push_back(pending_.front().done);
      pending_.pop_front();
    }
  }

  // Blocks until every collective queued on `s` has completed, polling: NCCL's asynchronous error
  // and a started collective without progress for the timeout abort NCCL and become the sticky
  // error naming it. Progress is a collective completing; the clock runs only while the oldest
  // unfinished one has started (the stream's earlier work, however long, is not the peers' fault).
  Status watch(Stream s) REQUIRES(mu_) {
    STRATA_RETURN_IF_ERROR(sticky());
    auto last_progress = Clock::now();
    int polls = 0;
    while (true) {
      size_t i = 0;  // the oldest of `s`'s collectives not seen complete
      while (i < pending_.size()) {
        const Pending& p = pending_[i];
        if (p.stream != s) {
          ++i;
          continue;
        }
        cudaError_t q = cudaEventQuery(p.done);
        if (q == cudaErrorNotReady) break;
        if (q != cudaSuccess) return fail(p.op, p.seq, STRATA_CUDA_STATUS(q).message());
        free_events_.push_back(p.started);
        free_events_.push_back(p.done);
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        last_progress = Clock::now();
        polls = 0;
      }
      if (i == pending_.size()) return Status::ok();
      const Pending* head = &pending_[i];
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r == ncclSuccess && state != ncclSuccess && state != ncclInProgress) r = state;
      if (r != ncclSuccess) return fail(head->op, head->seq, fmt::format("NCCL: {}", nccl_error_text(comm_, r)));
      if (cudaEventQuery(head->started) == cudaErrorNotReady) {
        last_progress = Clock::now();  // not started: the stream is busy with earlier work
      } else if (options_.timeout_seconds > 0 && seconds_since(last_progress) > options_.timeout_seconds) {
        return fail(head->op, head->seq,
                    fmt::format("no progress for {:.1f} s (timeout {:.1f} s): a peer is dead, stuck or in another "
                                "collective; NCCL aborted", seconds_since(last_progress), options_.timeout_seconds));
      }
      pause_poll(polls);
    }
  }

  // Constant after construction.
  CudaBackend& backend_;
  const int rank_;
  const int size_;
  const bool owns_mpi_;
  const CommOptions options_;
  uint32_t* const barrier_words_;  // size_ words of the backend's memory

  // One thread drives the communicator at a time; the lock makes a second one wait, not race.
  mutable Mutex mu_;
  ncclComm_t comm_ GUARDED_BY(mu_);  // null once aborted
  Status error_ GUARDED_BY(mu_);     // the sticky error
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  unsigned streams_used_ GUARDED_BY(mu_) = 0;
  std::deque<Pending> pending_ GUARDED_BY(mu_);     // queued, not yet seen complete, by seq
  std::vector<cudaEvent_t> free_events_ GUARDED_BY(mu_);
  cudaEvent_t fence_[2] GUARDED_BY(mu_) = {nullptr, nullptr};  // ordered_sum's, made on first use
  // The ordered sums' receive blocks, grown to the largest collective so far and kept.
  void* scratch_ GUARDED_BY(mu_) = nullptr;
  uint64_t scratch_bytes_ GUARDED_BY(mu_) = 0;
};

// What rank 0 sends the others: its unique id, or that it could not make one (the others must not
// wait for a communicator that will not form).
struct Bootstrap {
  int ok = 0;
  ncclUniqueId id{};
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(Backend& backend, const LaunchInfo& launch,
                                                               const CommOptions& options) {
  if (backend.kind() != BackendKind::cuda)
    return error(Code::invalid_argument, "the NCCL communicator needs the CUDA backend (the CPU backend uses MPI)");
  auto& cuda = static_cast<CudaBackend&>(backend);
  int rank = 0, size = 1;
  bool owns_mpi = false;
  Bootstrap boot;
  std::optional<RendezvousOptions> rendezvous;
  if (launch.launcher == Launcher::mpirun) {
    STRATA_ASSIGN_OR_RETURN(MpiWorld world, init_mpi());
    owns_mpi = world.owns_init;
    rank = world.rank;
    size = world.size;
    if (rank != launch.rank || size != launch.size)
      return error(Code::invalid_argument, "mpirun's environment says rank {} of {}, but MPI says rank {} of {}",
                   launch.rank, launch.size, rank, size);
    if (rank == 0) boot.ok = ncclGetUniqueId(&boot.id) == ncclSuccess ? 1 : 0;
    STRATA_RETURN_IF_ERROR(broadcast_world(&boot, sizeof boot, 0).with_context("sending NCCL's unique id"));
    if (boot.ok == 0)
      return error(Code::unavailable, "rank 0 could not make NCCL's unique id (NCCL_DEBUG=WARN says why)");
  } else if (launch.size > 1) {
    // torchrun-style: the unique id goes through the shared directory (runtime/file_rendezvous.h).
    rank = launch.rank;
    size = launch.size;
    rendezvous = RendezvousOptions{.dir = options.rendezvous_dir,
                                   .timeout_seconds = options.timeout_seconds > 0
                                                          ? std::max(60.0, options.timeout_seconds) : 0.0};
    if (rank == 0) boot.ok = ncclGetUniqueId(&boot.id) == ncclSuccess ? 1 : 0;
    std::vector<uint8_t> mine(sizeof boot);
    std::memcpy(mine.data(), &boot, sizeof boot);
    STRATA_ASSIGN_OR_RETURN(std::vector<uint8_t> shared, rendezvous_share(*rendezvous, rank, size, mine));
    if (shared.size() != sizeof boot)
      return error(Code::corruption, "rendezvous: rank 0 sent {} bytes, not NCCL's {}-byte bootstrap (another "
                   "strata version?)", shared.size(), sizeof boot);
    std::memcpy(&boot, shared.data(), sizeof boot);
    if (boot.ok == 0)
      return error(Code::unavailable, "rank 0 could not make NCCL's unique id (NCCL_DEBUG=WARN says why)");
  } else {
    ncclResult_t r = ncclGetUniqueId(&boot.id);
    if (r != ncclSuccess) return error(Code::unavailable, "ncclGetUniqueId failed: {}", ncclGetErrorString(r));
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(cuda.device_index()));
  StatusOr<void*> words = backend.allocate(4 * static_cast<uint64_t>(size), "nccl barrier");
  if (!words.is_ok()) return words.status().with_context("the NCCL communicator's barrier words");

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // no NCCL call blocks: a dead peer is a timeout here, not a hang
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, boot.id, rank, &config);
  double waited = 0;
  if ((r == ncclSuccess || r == ncclInProgress) && comm != nullptr) r = wait_nccl(comm, options.timeout_seconds, &waited);
  if (r != ncclSuccess) {
    std::string why = r == ncclInProgress
                          ? fmt::format("the other ranks did not join within {:.1f} s (timeout {:.1f} s)", waited,
                                        options.timeout_seconds)
                          : nccl_error_text(comm, r);
    if (comm != nullptr) ncclCommAbort(comm);
    (void)backend.release(*words);
    return error(r == ncclInProgress ? Code::io_error : Code::unavailable,
                 "NCCL could not form a communicator of {} rank{} on rank {} (device {}): {}", size,
                 size == 1 ? "" : "s", rank, cuda.device_index(), why);
  }
  // Every rank has joined, so every rank has read the id: rank 0 clears the rendezvous files.
  if (rendezvous && rank == 0) rendezvous_cleanup(*rendezvous, size);
  return std::unique_ptr<Communicator>(
      std::make_unique<NcclCommunicator>(cuda, comm, rank, size, owns_mpi, options, *words));
}

}  // namespace strata

#endif  // STRATA_HAVE_NCCL
