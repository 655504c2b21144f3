// The multi-rank checks of the MPI Communicator, run by CTest under mpirun (label mpi; see
// tests/CMakeLists.txt). Not a gtest binary: every rank runs the same program and exits non-zero on
// a mismatch, which makes mpirun exit non-zero.
//   comm_mpi_check collectives [cpu|cuda] : every collective against a reference computed on each
//                                rank; the ordered sums bit for bit, with values whose sum depends
//                                on order. cuda: the NCCL communicator (at one rank too), one GPU a
//                                rank (GPU local_rank), so as many GPUs as ranks: not registered
//                                with CTest; tools/gpu_check.sh's comm phase runs it.
//   comm_mpi_check fail        : the collectives, then rank 1 exits 1: mpirun must exit non-zero
//                                (the harness check that a failing rank fails the collectives test).
//   comm_mpi_check silent|kill [cpu] [own-exit]
//                              : rank 1 stays out of an all_reduce (silent: alive; kill: SIGKILLs
//                                itself); every other rank must get an error naming rank 1 within
//                                the timeout, print COMM_FAULT_OK and exit 3 through abort_mpi_world,
//                                as a run does (tests/runtime/comm_fault_check.sh). own-exit (for
//                                mpirun --enable-recovery, where each rank's own detection and exit
//                                status are checked): each rank exits by itself instead (std::_Exit;
//                                a silent rank 1 after twice the timeout), since one survivor's
//                                MPI_Abort may kill another before its exit status is recorded.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/mpi_communicator.h"

namespace strata {
namespace {

int g_failures = 0;

#define COMM_CHECK(cond, ...)                                                   \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "CHECK FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                        \
      std::fprintf(stderr, "\n");                                               \
      ++g_failures;                                                             \
    }                                                                           \
  } while (0)

#define COMM_OK(expr)                                                                          \
  do {                                                                                         \
    Status comm_st_ = (expr);                                                                  \
    if (!comm_st_.is_ok()) {                                                                   \
      std::fprintf(stderr, "%s failed: %s\n", #expr, comm_st_.to_string().c_str());            \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// Rank r's contribution to element i of shard p: 1e8, 1, -1e8, 1 patterns, whose sum depends on the
// order of addition once there are three or more ranks.
float contribution(int r, int p, uint64_t i) {
  static const float base[4] = {1e8f, 1.0f, -1e8f, 1.0f};
  return base[(r + i) % 4] * static_cast<float>(1 + i % 5 + p) + (i % 3 == 0 ? 0.0f : 0.25f * r);
}

// acc = x_0; acc += x_1; ... (the contract), and the same in reverse (to show the order matters).
float ordered_sum(int n, int p, uint64_t i) {
  float acc = contribution(0, p, i);
  for (int r = 1; r < n; ++r) acc += contribution(r, p, i);
  return acc;
}
float reverse_sum(int n, int p, uint64_t i) {
  float acc = contribution(n - 1, p, i);
  for (int r = n - 2; r >= 0; --r) acc += contribution(r, p, i);
  return acc;
}

// `count` elements of T in the backend's memory with a host mirror: fill `host`, put(); run the
// collective; get(), read `host`. Staged through copies so the same checks run on the CPU backend
// (MPI) and on CUDA (NCCL).
template <class T>
struct Mirrored {
  Mirrored(Backend& backend, uint64_t count)
      : b(backend), dev(static_cast<T*>(backend.allocate(count * sizeof(T) + 1, "comm check").value())), host(count) {}
  void put() {
    COMM_OK(b.copy_to_device(dev, host.data(), host.size() * sizeof(T), Stream::compute));
    COMM_OK(b.synchronize(Stream::compute));
  }
  void get(Communicator& comm) {
    COMM_OK(comm.synchronize(Stream::compute));
    COMM_OK(b.copy_to_host(host.data(), dev, host.size() * sizeof(T), Stream::compute));
    COMM_OK(b.synchronize(Stream::compute));
  }
  Backend& b;
  T* dev;
  std::vector<T> host;
};

int run_collectives(Backend& backend, Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const Stream s = Stream::compute;

  // all_gather: 37 floats a rank.
  const uint64_t g = 37;
  Mirrored<float> gsend(backend, g), grecv(backend, g * n);
  for (uint64_t i = 0; i < g; ++i) gsend.host[i] = static_cast<float>(me * 1000 + i);
  gsend.put();
  COMM_OK(comm.all_gather(gsend.dev, grecv.dev, g * 4, s));
  grecv.get(comm);
  for (int p = 0; p < n; ++p)
    for (uint64_t i = 0; i < g; ++i)
      COMM_CHECK(grecv.host[p * g + i] == static_cast<float>(p * 1000 + i), "all_gather rank %d block %d [%lu]", me, p, i);
  // In place: this rank's block already sits in recv.
  for (uint64_t i = 0; i < g * n; ++i) grecv.host[i] = -1.0f;
  for (uint64_t i = 0; i < g; ++i) grecv.host[me * g + i] = static_cast<float>(me * 1000 + i);
  grecv.put();
  COMM_OK(comm.all_gather(grecv.dev + me * g, grecv.dev, g * 4, s));
  grecv.get(comm);
  for (int p = 0; p < n; ++p)
    COMM_CHECK(grecv.host[p * g + g - 1] == static_cast<float>(p * 1000 + g - 1), "in-place all_gather block %d", p);

  // all_to_all: 5 bytes a block, block p of rank r holds (r, p, i).
  const uint64_t a = 5;
  Mirrored<char> asend(backend, a * n), arecv(backend, a * n);
  for (int p = 0; p < n; ++p)
    for (uint64_t i = 0; i < a; ++i) asend.host[p * a + i] = static_cast<char>(me * 16 + p * 4 + i);
  asend.put();
  COMM_OK(comm.all_to_all(asend.dev, arecv.dev, a, s));
  arecv.get(comm);
  for (int p = 0; p < n; ++p)
    for (uint64_t i = 0; i < a; ++i)
      COMM_CHECK(arecv.host[p * a + i] == static_cast<char>(p * 16 + me * 4 + i), "all_to_all rank %d from %d", me, p);

  // reduce_scatter: 64 floats a shard.
  const uint64_t c = 64;
  Mirrored<float> rsend(backend, c * n), rrecv(backend, c);
  for (int p = 0; p < n; ++p)
    for (uint64_t i = 0; i < c; ++i) rsend.host[p * c + i] = contribution(me, p, i);
  rsend.put();
  COMM_OK(comm.reduce_scatter(rsend.dev, rrecv.dev, c, s));
  rrecv.get(comm);
  int order_matters = 0;
  for (uint64_t i = 0; i < c; ++i) {
    COMM_CHECK(bits(rrecv.host[i]) == bits(ordered_sum(n, me, i)), "reduce_scatter rank %d [%lu]: %.9g != %.9g", me,
               i, rrecv.host[i], ordered_sum(n, me, i));
    order_matters += bits(ordered_sum(n, me, i)) != bits(reverse_sum(n, me, i));
  }
  if (n >= 3) COMM_CHECK(order_matters > 0, "the values do not tell the rank order apart");

  // all_reduce over 1001 floats (shards of unequal size), out of place then in place.
  const uint64_t m = 1001;
  Mirrored<float> xs(backend, m), ys(backend, m);
  for (uint64_t i = 0; i < m; ++i) xs.host[i] = contribution(me, 0, i);
  xs.put();
  COMM_OK(comm.all_reduce(xs.dev, ys.dev, m, s));
  COMM_OK(comm.all_reduce(xs.dev, xs.dev, m, s));
  ys.get(comm);
  xs.get(comm);
  for (uint64_t i = 0; i < m; ++i) {
    COMM_CHECK(bits(ys.host[i]) == bits(ordered_sum(n, 0, i)), "all_reduce rank %d [%lu]", me, i);
    COMM_CHECK(bits(xs.host[i]) == bits(ordered_sum(n, 0, i)), "in-place all_reduce rank %d [%lu]", me, i);
  }

  // broadcast 333 bytes from the last rank.
  Mirrored<char> bbuf(backend, 333);
  for (int i = 0; i < 333; ++i) bbuf.host[i] = static_cast<char>(me == n - 1 ? i * 7 : 0);
  bbuf.put();
  COMM_OK(comm.broadcast(bbuf.dev, 333, n - 1, s));
  COMM_OK(comm.barrier(s));
  bbuf.get(comm);
  for (int i = 0; i < 333; ++i) COMM_CHECK(bbuf.host[i] == static_cast<char>(i * 7), "broadcast rank %d [%d]", me, i);

  std::printf("rank %d of %d: %s collectives %s (%d elements where rank order changes the sum)\n", me, n,
              std::string(comm.name()).c_str(), g_failures == 0 ? "ok" : "FAILED", order_matters);
  return g_failures == 0 ? 0 : 1;
}

[[noreturn]] void run_fault(Backend& backend, Communicator& comm, bool kill, bool own_exit, double timeout_seconds) {
  const Stream s = Stream::compute;
  COMM_OK(comm.barrier(s));
  COMM_OK(comm.synchronize(s));
  if (comm.rank() == 1) {
    if (kill) std::raise(SIGKILL);
    // Stays out: past the others' timeout; without own-exit their abort ends it first.
    std::this_thread::sleep_for(std::chrono::duration<double>(own_exit ? 2 * timeout_seconds : 60.0));
    std::_Exit(1);
  }
  float* x = static_cast<float*>(backend.allocate(4096, "comm check").value());
  const auto start = std::chrono::steady_clock::now();
  COMM_OK(comm.all_reduce(x, x, 1024, s));
  Status st = comm.synchronize(s);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool named = st.message().find("rank 1") != std::string::npos &&
                     st.message().find("all_reduce") != std::string::npos;
  std::printf("%s rank %d after %.1f s: %s\n", !st.is_ok() && named ? "COMM_FAULT_OK" : "COMM_FAULT_BAD",
              comm.rank(), waited, st.to_string().c_str());
  std::fflush(stdout);
  // A later call returns the same (sticky) error.
  Status again = comm.barrier(s);
  if (again.message() != st.message()) std::printf("COMM_FAULT_BAD rank %d: not sticky: %s\n", comm.rank(), again.to_string().c_str());
  std::fflush(stdout);
  if (own_exit) std::_Exit(3);  // no MPI_Finalize: a peer is gone
  abort_mpi_world(3);           // what a run does: take the world down, exit non-zero
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  using namespace strata;
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  const std::string device = argc > 2 ? argv[2] : "cpu";
  const bool own_exit = argc > 3 && std::string(argv[3]) == "own-exit";
  if (argc > 3 && !own_exit) {
    std::fprintf(stderr, "%s: expected own-exit or nothing\n", argv[3]);
    return 2;
  }
  if (device != "cpu" && device != "cuda") {
    std::fprintf(stderr, "device %s: expected cpu or cuda\n", device.c_str());
    return 2;
  }
  if (device == "cuda" && mode != "collectives") {  // NCCL's timeout names the collective, not the peer
    std::fprintf(stderr, "mode %s: only the collectives mode runs on cuda\n", mode.c_str());
    return 2;
  }
  auto launch = detect_launch();
  if (!launch.is_ok()) {
    std::fprintf(stderr, "%s\n", launch.status().to_string().c_str());
    return 2;
  }
  BackendOptions options;
  options.memory_budget = uint64_t{16} << 20;
  if (device == "cuda") {  // NCCL, one GPU a rank
    options.kind = BackendKind::cuda;
    options.device_index = launch->local_rank;
  }
  auto backend = make_backend(options);
  if (!backend.is_ok()) {
    std::fprintf(stderr, "%s\n", backend.status().to_string().c_str());
    return 2;
  }
  CommOptions comm_options;
  comm_options.timeout_seconds = mode == "collectives" ? 30.0 : 3.0;
  if (device == "cuda") comm_options.kind = CommKind::nccl;  // NCCL at a world of one too
  auto comm = make_communicator(**backend, *launch, comm_options);
  if (!comm.is_ok()) {
    std::fprintf(stderr, "%s\n", comm.status().to_string().c_str());
    return 2;
  }
  if (mode == "collectives") return run_collectives(**backend, **comm);
  if (mode == "fail") return std::max(run_collectives(**backend, **comm), (*comm)->rank() == 1 ? 1 : 0);
  if ((*comm)->size() < 2) {
    std::fprintf(stderr, "mode %s needs at least 2 ranks\n", mode.c_str());
    return 2;
  }
  if (mode == "silent" || mode == "kill") run_fault(**backend, **comm, mode == "kill", own_exit, comm_options.timeout_seconds);
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
