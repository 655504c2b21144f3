// The multi-rank checks of the MPI Communicator, run by CTest under mpirun (label mpi; see
// tests/CMakeLists.txt). Not a gtest binary: every rank runs the same program and exits non-zero on
// a mismatch, which makes mpirun exit non-zero.
//   comm_mpi_check collectives : every collective against a reference computed on each rank; the
//                                ordered sums bit for bit, with values whose sum depends on order.
//   comm_mpi_check fail        : the collectives, then rank 1 exits 1: mpirun must exit non-zero
//                                (the harness check that a failing rank fails the collectives test).
//   comm_mpi_check silent|kill : rank 1 stays out of an all_reduce (silent: alive; kill: SIGKILLs
//                                itself); every other rank must get an error naming rank 1 within
//                                the timeout, print COMM_FAULT_OK and exit 3 (abort_mpi_world), as a
//                                run does (tests/runtime/comm_fault_check.sh).
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

int run_collectives(Backend& backend, Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const Stream s = Stream::compute;
  auto alloc = [&](uint64_t bytes) { return static_cast<char*>(backend.allocate(bytes + 1, "comm check").value()); };

  // all_gather: 37 floats a rank.
  const uint64_t g = 37;
  float* gsend = reinterpret_cast<float*>(alloc(g * 4));
  float* grecv = reinterpret_cast<float*>(alloc(g * 4 * n));
  for (uint64_t i = 0; i < g; ++i) gsend[i] = static_cast<float>(me * 1000 + i);
  COMM_OK(comm.all_gather(gsend, grecv, g * 4, s));
  COMM_OK(comm.synchronize(s));
  for (int p = 0; p < n; ++p)
    for (uint64_t i = 0; i < g; ++i)
      COMM_CHECK(grecv[p * g + i] == static_cast<float>(p * 1000 + i), "all_gather rank %d block %d [%lu]", me, p, i);
  // In place: this rank's block already sits in recv.
  for (uint64_t i = 0; i < g * n; ++i) grecv[i] = -1.0f;
  for (uint64_t i = 0; i < g; ++i) grecv[me * g + i] = static_cast<float>(me * 1000 + i);
  COMM_OK(comm.all_gather(grecv + me * g, grecv, g * 4, s));
  COMM_OK(comm.synchronize(s));
  for (int p = 0; p < n; ++p)
    COMM_CHECK(grecv[p * g + g - 1] == static_cast<float>(p * 1000 + g - 1), "in-place all_gather block %d", p);

  // all_to_all: 5 bytes a block, block p of rank r holds (r, p, i).
  const uint64_t a = 5;
  char* asend = alloc(a * n);
  char* arecv = alloc(a * n);
  for (int p = 0; p < n; ++p)
    for (uint64_t i = 0; i < a; ++i) asend[p * a + i] = static_cast<char>(me * 16 + p * 4 + i);
  COMM_OK(comm.all_to_all(asend, arecv, a, s));
  COMM_OK(comm.synchronize(s));
  for (int p = 0; p < n; ++p)
    for (uint64_t i = 0; i < a; ++i)
      COMM_CHECK(arecv[p * a + i] == static_cast<char>(p * 16 + me * 4 + i), "all_to_all rank %d from %d", me, p);

  // reduce_scatter: 64 floats a shard.
  const uint64_t c = 64;
  float* rsend = reinterpret_cast<float*>(alloc(c * 4 * n));
  float* rrecv = reinterpret_cast<float*>(alloc(c * 4));
  for (int p = 0; p < n; ++p)
    for (uint64_t i = 0; i < c; ++i) rsend[p * c + i] = contribution(me, p, i);
  COMM_OK(comm.reduce_scatter(rsend, rrecv, c, s));
  COMM_OK(comm.synchronize(s));
  int order_matters = 0;
  for (uint64_t i = 0; i < c; ++i) {
    COMM_CHECK(bits(rrecv[i]) == bits(ordered_sum(n, me, i)), "reduce_scatter rank %d [%lu]: %.9g != %.9g", me, i,
               rrecv[i], ordered_sum(n, me, i));
    order_matters += bits(ordered_sum(n, me, i)) != bits(reverse_sum(n, me, i));
  }
  if (n >= 3) COMM_CHECK(order_matters > 0, "the values do not tell the rank order apart");

  // all_reduce over 1001 floats (shards of unequal size), out of place then in place.
  const uint64_t m = 1001;
  float* xs = reinterpret_cast<float*>(alloc(m * 4));
  float* ys = reinterpret_cast<float*>(alloc(m * 4));
  for (uint64_t i = 0; i < m; ++i) xs[i] = contribution(me, 0, i);
  COMM_OK(comm.all_reduce(xs, ys, m, s));
  COMM_OK(comm.all_reduce(xs, xs, m, s));
  COMM_OK(comm.synchronize(s));
  for (uint64_t i = 0; i < m; ++i) {
    COMM_CHECK(bits(ys[i]) == bits(ordered_sum(n, 0, i)), "all_reduce rank %d [%lu]", me, i);
    COMM_CHECK(bits(xs[i]) == bits(ordered_sum(n, 0, i)), "in-place all_reduce rank %d [%lu]", me, i);
  }

  // broadcast 333 bytes from the last rank.
  char* bbuf = alloc(333);
  for (int i = 0; i < 333; ++i) bbuf[i] = static_cast<char>(me == n - 1 ? i * 7 : 0);
  COMM_OK(comm.broadcast(bbuf, 333, n - 1, s));
  COMM_OK(comm.barrier(s));
  COMM_OK(comm.synchronize(s));
  for (int i = 0; i < 333; ++i) COMM_CHECK(bbuf[i] == static_cast<char>(i * 7), "broadcast rank %d [%d]", me, i);

  std::printf("rank %d of %d: collectives %s (%d elements where rank order changes the sum)\n", me, n,
              g_failures == 0 ? "ok" : "FAILED", order_matters);
  return g_failures == 0 ? 0 : 1;
}

int run_fault(Backend& backend, Communicator& comm, bool kill) {
  const Stream s = Stream::compute;
  COMM_OK(comm.barrier(s));
  COMM_OK(comm.synchronize(s));
  if (comm.rank() == 1) {
    if (kill) std::raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::seconds(60));  // stays out; the others' abort ends it
    return 1;
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
  abort_mpi_world(3);  // what a run does: take the world down, exit non-zero
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  using namespace strata;
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  BackendOptions options;
  options.memory_budget = uint64_t{16} << 20;
  auto backend = make_backend(options);
  if (!backend.is_ok()) {
    std::fprintf(stderr, "%s\n", backend.status().to_string().c_str());
    return 2;
  }
  auto launch = detect_launch();
  if (!launch.is_ok()) {
    std::fprintf(stderr, "%s\n", launch.status().to_string().c_str());
    return 2;
  }
  CommOptions comm_options;
  comm_options.timeout_seconds = mode == "collectives" ? 30.0 : 3.0;
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
  if (mode == "silent" || mode == "kill") return run_fault(**backend, **comm, mode == "kill");
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
