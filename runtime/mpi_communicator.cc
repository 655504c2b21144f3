// MpiCommunicator: every collective as point-to-point messages on a duplicate of MPI_COMM_WORLD,
// posted at once (MPI_Irecv then MPI_Isend, messages of at most 1 GiB) and polled with MPI_Testsome
// against CommOptions' timeout; the ordered fp32 sums on the owner with kernels::accumulate_widened. Linear
// algorithms (each rank talks to every other directly, broadcast from the root to each rank): right
// for the few ranks of a workstation; a tree or ring is future work if a bench asks for it.
#include "runtime/mpi_communicator.h"

// The C API only: without these, mpi.h in C++ pulls in the deprecated C++ bindings (libmpi_cxx).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "kernels/cpu/grad_accumulate.h"
#include "runtime/mutex.h"

namespace strata {
namespace {

constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 30;
constexpr uint64_t kTagSpace = 32767;  // MPI guarantees MPI_TAG_UB >= 32767

std::string mpi_error_text(int rc) {
  std::array<char, MPI_MAX_ERROR_STRING> text{};
  int len = 0;
  if (MPI_Error_string(rc, text.data(), &len) != MPI_SUCCESS) return fmt::format("MPI error {}", rc);
  return std::string(text.data(), static_cast<size_t>(len));
}

// A block of one message exchange: `bytes` at `ptr` to or from rank `peer`.
struct Piece {
  int peer;
  char* ptr;
  uint64_t bytes;
};

// The first failure among a communicator and its duplicates, which share one: a collective of one
// that fails (a dead peer) ends the others' at their next poll, not at their own timeout (a
// compute stream waiting on a failed gather would otherwise reach the next collective only then,
// and wait a second timeout for the same dead rank).
class WorldFailure {
 public:
  void set(const Status& s) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (!error_.is_ok()) return;
    error_ = s;
    failed_.store(true, std::memory_order_release);
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  Status error() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return error_;
  }

 private:
  std::atomic<bool> failed_{false};
  mutable Mutex mu_;
  Status error_ GUARDED_BY(mu_);
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(Backend& backend, MPI_Comm comm, int rank, int size, bool owns_init, const CommOptions& options,
                  std::shared_ptr<WorldFailure> world)
      : backend_(backend), comm_(comm), rank_(rank), size_(size), owns_init_(owns_init), options_(options),
        world_(std::move(world)) {}

  ~MpiCommunicator() override {
    for (int s = 0; s < kStreamCount; ++s) {
      if (streams_used_.load() & (1u << s)) (void)backend_.synchronize(static_cast<Stream>(s));
    }
    bool broken = !sticky().is_ok();
    if (broken) return;  // a dead peer would hang MPI_Comm_free / MPI_Finalize: the caller exits
    MPI_Comm_free(&comm_);
    if (owns_init_) finalize_mpi();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "mpi"; }

  Status all_gather(const void* send, void* recv, uint64_t bytes, Stream s) override {
    STRATA_RETURN_IF_ERROR(check_buffers("all_gather", send, bytes, recv, bytes * size_));
    return enqueue("all_gather", s, [=, this](uint64_t seq) REQUIRES(run_mu_) {
      char* out = static_cast<char*>(recv);
      std::vector<Piece> sends, recvs;
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        sends.push_back({p, const_cast<char*>(static_cast<const char*>(send)), bytes});
        recvs.push_back({p, out + p * bytes, bytes});
      }
      if (out + rank_ * bytes != send) std::memmove(out + rank_ * bytes, send, bytes);
      return exchange("all_gather", seq, sends, recvs);
    });
  }

  Status all_to_all(const void* send, void* recv, uint64_t bytes, Stream s) override {
    STRATA_RETURN_IF_ERROR(check_buffers("all_to_all", send, bytes * size_, recv, bytes * size_));
    return enqueue("all_to_all", s, [=, this](uint64_t seq) REQUIRES(run_mu_) {
      const char* in = static_cast<const char*>(send);
      char* out = static_cast<char*>(recv);
      std::vector<Piece> sends, recvs;
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        sends.push_back({p, const_cast<char*>(in + p * bytes), bytes});
        recvs.push_back({p, out + p * bytes, bytes});
      }
      std::memcpy(out + rank_ * bytes, in + rank_ * bytes, bytes);
      return exchange("all_to_all", seq, sends, recvs);
    });
  }

  Status reduce_scatter(const float* send, float* recv, uint64_t count, Stream s) override {
    STRATA_RETURN_IF_ERROR(check_buffers("reduce_scatter", send, count * size_ * 4, recv, count * 4));
    return enqueue("reduce_scatter", s, [=, this](uint64_t seq) REQUIRES(run_mu_) {
      // scratch block p holds rank p's contribution to this rank's shard (this rank's own: in send).
      float* const scratch = scratch_floats(count * size_);
      std::vector<Piece> sends, recvs;
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        sends.push_back({p, reinterpret_cast<char*>(const_cast<float*>(send + p * count)), count * 4});
        recvs.push_back({p, reinterpret_cast<char*>(scratch + p * count), count * 4});
      }
      STRATA_RETURN_IF_ERROR(exchange("reduce_scatter", seq, sends, recvs));
      for (int p = 0; p < size_; ++p) {
        const float* x = p == rank_ ? send + rank_ * count : scratch + p * count;
        kernels::accumulate_widened(kernels::FloatFormat::f32, x, recv, count, p == 0);
      }
      return Status::ok();
    });
  }

  Status all_reduce(const float* send, float* recv, uint64_t count, Stream s) override {
    STRATA_RETURN_IF_ERROR(check_buffers("all_reduce", send, count * 4, recv, count * 4));
    return enqueue("all_reduce", s, [=, this](uint64_t seq) REQUIRES(run_mu_) {
      // Shard p = [begin(p), begin(p + 1)): reduce-scatter the shards, then all-gather the sums.
      auto begin = [&](int p) { return count * static_cast<uint64_t>(p) / size_; };
      const uint64_t mine = begin(rank_), n = begin(rank_ + 1) - mine;
      float* const scratch = scratch_floats(n * size_);
      std::vector<Piece> sends, recvs;
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        sends.push_back({p, reinterpret_cast<char*>(const_cast<float*>(send + begin(p))), (begin(p + 1) - begin(p)) * 4});
        recvs.push_back({p, reinterpret_cast<char*>(scratch + p * n), n * 4});
      }
      std::memcpy(scratch + rank_ * n, send + mine, n * 4);  // send may be recv
      STRATA_RETURN_IF_ERROR(exchange("all_reduce", seq, sends, recvs));
      for (int p = 0; p < size_; ++p)
        kernels::accumulate_widened(kernels::FloatFormat::f32, scratch + p * n, recv + mine, n, p == 0);
      sends.clear();
      recvs.clear();
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        sends.push_back({p, reinterpret_cast<char*>(recv + mine), n * 4});
        recvs.push_back({p, reinterpret_cast<char*>(recv + begin(p)), (begin(p + 1) - begin(p)) * 4});
      }
      return exchange("all_reduce", seq, sends, recvs);
    });
  }

  Status broadcast(void* buf, uint64_t bytes, int root, Stream s) override {
    if (root < 0 || root >= size_)
      return error(Code::invalid_argument, "broadcast on rank {} of {}: root {} is not a rank", rank_, size_, root);
    STRATA_RETURN_IF_ERROR(check_buffers("broadcast", buf, bytes, buf, bytes));
    return enqueue("broadcast", s, [=, this](uint64_t seq) REQUIRES(run_mu_) {
      std::vector<Piece> sends, recvs;
      if (rank_ == root) {
        for (int p = 0; p < size_; ++p)
          if (p != rank_) sends.push_back({p, static_cast<char*>(buf), bytes});
      } else {
        recvs.push_back({root, static_cast<char*>(buf), bytes});
      }
      return exchange("broadcast", seq, sends, recvs);
    });
  }

  Status barrier(Stream s) override {
    return enqueue("barrier", s, [this](uint64_t seq) REQUIRES(run_mu_) {
      std::vector<Piece> pieces;
      for (int p = 0; p < size_; ++p)
        if (p != rank_) pieces.push_back({p, nullptr, 0});
      return exchange("barrier", seq, pieces, pieces);
    });
  }

  Status synchronize(Stream s) override {
    Status st = backend_.synchronize(s);
    Status sticky_error = sticky();
    return sticky_error.is_ok() ? st : sticky_error;
  }

  StatusOr<std::unique_ptr<Communicator>> duplicate() override EXCLUDES(run_mu_) {
    STRATA_RETURN_IF_ERROR(sticky());
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
      return error(Code::unavailable,
                   "a second MPI communicator needs MPI_THREAD_MULTIPLE (two streams call MPI at once), but this MPI "
                   "provides only {}",
                   provided == MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED" : "a lower thread level");
    MPI_Comm dup = MPI_COMM_NULL;
    int rc = MPI_SUCCESS;
    {
      MutexLock run(run_mu_);  // no collective of this one runs meanwhile
      rc = MPI_Comm_dup(comm_, &dup);
    }
    if (rc != MPI_SUCCESS)
      return error(Code::unavailable, "MPI_Comm_dup on rank {} of {} failed: {}", rank_, size_, mpi_error_text(rc));
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    return std::unique_ptr<Communicator>(
        std::make_unique<MpiCommunicator>(backend_, dup, rank_, size_, /*owns_init=*/false, options_, world_));
  }

 private:
  // This communicator's first failure, else a duplicate's (the world is broken either way).
  Status sticky() const EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      if (!error_.is_ok()) return error_;
    }
    return world_->failed() ? world_->error() : Status::ok();
  }

  Status check_buffers(std::string_view op, const void* send, uint64_t send_bytes, const void* recv,
                       uint64_t recv_bytes) const {
    if ((send == nullptr && send_bytes > 0) || (recv == nullptr && recv_bytes > 0))
      return error(Code::invalid_argument, "{} on rank {} of {}: null buffer for {} bytes", op, rank_, size_,
                   std::max(send_bytes, recv_bytes));
    return sticky();
  }

  // scratch_ with room for `floats` (its contents undefined).
  float* scratch_floats(uint64_t floats) REQUIRES(run_mu_) {
    if (scratch_.size() < floats) scratch_.resize(floats);
    return scratch_.data();
  }

  // Numbers the collective (its messages' tag) and queues `body` on `s`, where it runs holding
  // run_mu_ (write each body REQUIRES(run_mu_): the analysis cannot follow std::function); the
  // first failure of any body becomes the sticky error, and a body queued after it does nothing.
  Status enqueue(std::string_view op, Stream s, std::function<Status(uint64_t)> body) EXCLUDES(mu_) {
    uint64_t seq = 0;
    STRATA_RETURN_IF_ERROR(sticky());
    {
      MutexLock lock(mu_);
      seq = next_seq_++;
    }
    streams_used_.fetch_or(1u << static_cast<unsigned>(s));
    Status st = backend_.host_callback(s, [this, seq, body = std::move(body)] {
      if (!sticky().is_ok()) return;
      MutexLock run(run_mu_);  // one collective at a time uses MPI (MPI_THREAD_SERIALIZED suffices)
      Status result = body(seq);
      if (!result.is_ok()) {
        {
          MutexLock lock(mu_);
          if (error_.is_ok()) error_ = result;
        }
        world_->set(result);
      }
    });
    return st.with_context(fmt::format("{} on rank {} of {}", op, rank_, size_));
  }

  // Posts every receive, then every send, and polls until all complete, or fails when none
  // completes for the timeout.
  Status exchange(std::string_view op, uint64_t seq, const std::vector<Piece>& sends,
                  const std::vector<Piece>& recvs) REQUIRES(run_mu_) {
    const int tag = static_cast<int>(seq % kTagSpace);
    std::vector<MPI_Request> reqs;
    std::vector<int> peers;
    std::vector<char> is_recv;
    auto fail = [&](std::string what) {
      for (MPI_Request& r : reqs) {
        if (r == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
      return error(Code::io_error, "{} #{} on rank {} of {}: {}", op, seq, rank_, size_, what);
    };
    auto post = [&](const Piece& p, bool recv) -> Status {
      uint64_t off = 0;
      do {
        const int n = static_cast<int>(std::min(p.bytes - off, kMaxMessageBytes));
        MPI_Request r = MPI_REQUEST_NULL;
        int rc = recv ? MPI_Irecv(p.ptr + off, n, MPI_BYTE, p.peer, tag, comm_, &r)
                      : MPI_Isend(p.ptr + off, n, MPI_BYTE, p.peer, tag, comm_, &r);
        if (rc != MPI_SUCCESS)
          return fail(fmt::format("posting a {} rank {} failed: {}", recv ? "receive from" : "send to", p.peer,
                                  mpi_error_text(rc)));
        reqs.push_back(r);
        peers.push_back(p.peer);
        is_recv.push_back(recv ? 1 : 0);
        off += static_cast<uint64_t>(n);
      } while (off < p.bytes);
      return Status::ok();
    };
    for (const Piece& p : recvs) STRATA_RETURN_IF_ERROR(post(p, true));
    for (const Piece& p : sends) STRATA_RETURN_IF_ERROR(post(p, false));

    using Clock = std::chrono::steady_clock;
    auto last_progress = Clock::now();  // the timeout counts from the last completed message
    std::vector<int> done(reqs.size());
    std::vector<MPI_Status> statuses(reqs.size());
    int idle_polls = 0;
    while (true) {
      int outcount = 0;
      int rc = MPI_Testsome(static_cast<int>(reqs.size()), reqs.data(), &outcount, done.data(), statuses.data());
      if (rc != MPI_SUCCESS) {
        for (int i = 0; i < outcount; ++i) {
          int k = done[i];
          if (statuses[i].MPI_ERROR != MPI_SUCCESS)
            return fail(fmt::format("{} rank {} failed: {}", is_recv[k] ? "receiving from" : "sending to", peers[k],
                                    mpi_error_text(statuses[i].MPI_ERROR)));
        }
        return fail(fmt::format("MPI_Testsome failed: {}", mpi_error_text(rc)));
      }
      if (outcount == MPI_UNDEFINED) return Status::ok();  // every request complete
      if (outcount > 0) {
        idle_polls = 0;
        last_progress = Clock::now();
        continue;
      }
      if (world_->failed())  // a duplicate's collective found the world broken
        return fail(fmt::format("stopped: {}", world_->error().message()));
      const double waited = std::chrono::duration<double>(Clock::now() - last_progress).count();
      if (options_.timeout_seconds > 0 && waited > options_.timeout_seconds) {
        std::set<int> silent, not_receiving;
        for (size_t k = 0; k < reqs.size(); ++k) {
          if (reqs[k] == MPI_REQUEST_NULL) continue;
          (is_recv[k] ? silent : not_receiving).insert(peers[k]);
        }
        const std::set<int>& who = silent.empty() ? not_receiving : silent;
        std::string ranks;
        for (int p : who) ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", p);
        return fail(fmt::format("{} rank{} {} for {:.1f} s (timeout {:.1f} s): the peer is dead or stuck",
                                silent.empty() ? "nothing taken by" : "no data from", who.size() > 1 ? "s" : "",
                                ranks, waited, options_.timeout_seconds));
      }
      if (++idle_polls > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // Constant after construction.
  Backend& backend_;
  MPI_Comm comm_;
  const int rank_;
  const int size_;
  const bool owns_init_;
  const CommOptions options_;
  const std::shared_ptr<WorldFailure> world_;  // shared with the duplicates
  std::atomic<unsigned> streams_used_{0};

  Mutex run_mu_;  // held by the stream worker for the whole of one collective
  // The ordered sums' receive blocks, grown to the largest collective so far and kept: a
  // collective neither allocates nor zeroes them (at 256 MiB that was most of its time).
  std::vector<float> scratch_ GUARDED_BY(run_mu_);
  mutable Mutex mu_;
  Status error_ GUARDED_BY(mu_);
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
};

}  // namespace

StatusOr<MpiWorld> init_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = 0;
  MpiWorld world;
  if (!initialized) {
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) return error(Code::unavailable, "MPI_Init_thread failed: {}", mpi_error_text(rc));
    world.owns_init = true;
  } else {
    MPI_Query_thread(&provided);
  }
  world.serialized = provided >= MPI_THREAD_SERIALIZED;
  MPI_Comm_rank(MPI_COMM_WORLD, &world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world.size);
  return world;
}

Status broadcast_world(void* data, uint64_t bytes, int root) {
  if (bytes > kMaxMessageBytes) return error(Code::invalid_argument, "broadcast_world: {} B is over 1 GiB", bytes);
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) return error(Code::unavailable, "MPI_Comm_dup failed: {}", mpi_error_text(rc));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  rc = MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm);
  MPI_Comm_free(&comm);
  if (rc != MPI_SUCCESS) return error(Code::io_error, "MPI_Bcast of {} B from rank {} failed: {}", bytes, root, mpi_error_text(rc));
  return Status::ok();
}

void finalize_mpi() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

StatusOr<std::unique_ptr<Communicator>> make_mpi_communicator(Backend& backend, const CommOptions& options) {
  if (backend.kind() != BackendKind::cpu)
    return error(Code::invalid_argument, "the MPI communicator needs the CPU backend (the CUDA backend uses NCCL)");
  STRATA_ASSIGN_OR_RETURN(MpiWorld world, init_mpi());
  if (!world.serialized)
    return error(Code::failed_precondition,
                 "MPI's thread level is below MPI_THREAD_SERIALIZED, but the communicator runs collectives on a "
                 "stream's worker thread (needs MPI_THREAD_SERIALIZED)");
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) return error(Code::unavailable, "MPI_Comm_dup failed: {}", mpi_error_text(rc));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<Communicator>(
      std::make_unique<MpiCommunicator>(backend, comm, world.rank, world.size, world.owns_init, options,
                                        std::make_shared<WorldFailure>()));
}

void abort_mpi_world(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace strata
