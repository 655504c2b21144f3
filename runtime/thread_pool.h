// ThreadPool: a oneTBB task arena of a fixed size whose worker threads are pinned (hwloc) to a set
// of cores -- all the cores the process is bound to, or the cores of one NUMA node (the one near a
// GPU or near the memory a kernel touches). Parallel loops run inside it with tbb::parallel_for and use only its threads.
// Not a general scheduler: one arena, blocking entry.
// Thread-safety: run() and parallel_for() may be called from any thread; calls from several
// threads share the arena's workers. Lifetime: outlives every call into it.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <tbb/task_arena.h>

#include "runtime/status.h"

namespace strata {

class Topology;

struct ThreadPoolOptions {
  int threads = 0;      // 0 = every core allowed: the CPUs this process is bound to (all, or a rank's
                        // share: runtime/rank_locality.h), or all of numa_node's
  int numa_node = -1;   // -1 = any node; otherwise pin workers to that node's cores
  bool pin = true;      // pin each worker to one core of the set (false: just the set)
  std::string name = "pool";
};

class ThreadPool {
 public:
  // `topology` may be null (then it is discovered). An unknown numa_node or threads < 0 is
  // invalid_argument; more threads than cores is allowed (oversubscription) with a warning.
  static StatusOr<std::unique_ptr<ThreadPool>> create(const ThreadPoolOptions& options,
                                                      const Topology* topology = nullptr);
  ~ThreadPool();

  int concurrency() const;

  // Runs `fn` inside the arena and waits for it; TBB algorithms inside use this pool's workers.
  template <typename F>
  auto run(F&& fn) {
    return arena_->execute(std::forward<F>(fn));
  }

  // Calls body(begin, end) over [0, n) split into ranges of at least `grain` items, in parallel,
  // and waits. n == 0 calls nothing.
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t begin, size_t end)>& body);

 private:
  ThreadPool() = default;
  struct Pinning;
  std::unique_ptr<tbb::task_arena> arena_;
  std::unique_ptr<Pinning> pinning_;
};

}  // namespace strata
