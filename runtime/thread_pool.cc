// ThreadPool: a tbb::task_arena plus a task_scheduler_observer that pins every worker entering the
// arena to one CPU of the pool's set (round-robin by arena slot) and gives it back the whole
// process mask when it leaves (TBB workers are shared between arenas). A caller thread that
// enters with run()/parallel_for() is held inside the set for the call, then restored.
// Not a scheduler of its own: TBB does the work distribution.
#include "runtime/thread_pool.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <vector>

#include <fmt/ranges.h>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_scheduler_observer.h>

#include "runtime/log.h"
#include "runtime/topology.h"
#include "runtime/tsan_annotations.h"

namespace strata {

struct ThreadPool::Pinning : public tbb::task_scheduler_observer {
  Pinning(tbb::task_arena& arena, std::vector<int> set, std::vector<int> process_cpus, bool one_cpu_each,
          std::string name)
      : tbb::task_scheduler_observer(arena),
        set_(std::move(set)),
        process_cpus_(std::move(process_cpus)),
        one_cpu_each_(one_cpu_each),
        name_(std::move(name)) {}
  ~Pinning() override { observe(false); }

  void on_scheduler_entry(bool is_worker) override {
    if (is_worker) {
      if (!one_cpu_each_) {
        report(pin_current_thread_to_cpus(set_));
        return;
      }
      int slot = std::max(tbb::this_task_arena::current_thread_index(), 0);
      report(pin_current_thread_to_cpus({set_[static_cast<size_t>(slot) % set_.size()]}));
      return;
    }
    // A caller's thread: remember its mask (calls may nest across pools), hold it in the set.
    StatusOr<std::vector<int>> saved = current_thread_cpus();
    caller_masks().push_back(saved.is_ok() ? std::move(saved).value() : process_cpus_);
    report(pin_current_thread_to_cpus(set_));
  }

  void on_scheduler_exit(bool is_worker) override {
    if (is_worker) {
      report(pin_current_thread_to_cpus(process_cpus_));
      return;
    }
    std::vector<std::vector<int>>& masks = caller_masks();
    if (masks.empty()) return;
    report(pin_current_thread_to_cpus(masks.back()));
    masks.pop_back();
  }

 private:
  static std::vector<std::vector<int>>& caller_masks() {
    thread_local std::vector<std::vector<int>> masks;
    return masks;
  }
  void report(const Status& s) const {
    if (!s.is_ok())
      warn_once("thread_pool_pin:" + name_,
                fmt::format("thread pool '{}': could not pin a thread, it runs unpinned: {}", name_, s.to_string()));
  }

  const std::vector<int> set_;
  const std::vector<int> process_cpus_;
  const bool one_cpu_each_;
  const std::string name_;
};

StatusOr<std::unique_ptr<ThreadPool>> ThreadPool::create(const ThreadPoolOptions& options,
                                                         const Topology* topology) {
  if (options.threads < 0)
    return error(Code::invalid_argument, "thread pool '{}': threads must be >= 0 (0 = one per CPU), got {}",
                 options.name, options.threads);
  std::optional<Topology> discovered;
  if (!topology) {
    STRATA_ASSIGN_OR_RETURN(Topology t, Topology::discover());
    discovered.emplace(std::move(t));
    topology = &*discovered;
  }
  // The process's own CPUs (its binding: a launcher's, taskset's, a rank's share from
  // runtime/rank_locality.h): every core allowed means every one of those, and a worker leaving the
  // arena goes back to them, not to the whole machine.
  StatusOr<std::vector<int>> bound = current_thread_cpus();
  std::vector<int> process_cpus;
  if (bound.is_ok())
    std::set_intersection(bound->begin(), bound->end(), topology->cpus().begin(), topology->cpus().end(),
                          std::back_inserter(process_cpus));
  if (process_cpus.empty()) process_cpus = topology->cpus();
  std::vector<int> set = process_cpus;
  if (options.numa_node != -1) {
    const NumaNode* node = topology->numa_node(options.numa_node);
    if (!node || node->cpus.empty()) {
      std::vector<int> nodes;
      for (const NumaNode& n : topology->numa_nodes())
        if (!n.cpus.empty()) nodes.push_back(n.index);
      return error(Code::invalid_argument,
                   "thread pool '{}': NUMA node {} has no CPUs here; nodes with CPUs: [{}] (-1 = any)",
                   options.name, options.numa_node, fmt::join(nodes, ","));
    }
    set = node->cpus;
  }
  if (set.empty())
    return error(Code::internal, "thread pool '{}': hwloc reported no CPUs this process may use", options.name);
  const int threads = options.threads == 0 ? static_cast<int>(set.size()) : options.threads;
  if (threads > static_cast<int>(set.size()))
    spdlog::warn("thread pool '{}': {} threads on {} CPUs oversubscribes them", options.name, threads, set.size());

  std::unique_ptr<ThreadPool> pool(new ThreadPool());
  pool->arena_ = std::make_unique<tbb::task_arena>(threads);
  pool->arena_->initialize();
  pool->pinning_ = std::make_unique<Pinning>(*pool->arena_, std::move(set), std::move(process_cpus), options.pin,
                                             options.name);
  pool->pinning_->observe(true);
  return pool;
}

ThreadPool::~ThreadPool() {
  pinning_.reset();  // stop observing before the arena goes away
  arena_.reset();
}

int ThreadPool::concurrency() const { return arena_->max_concurrency(); }

void ThreadPool::parallel_for(size_t n, size_t grain,
                              const std::function<void(size_t begin, size_t end)>& body) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  // Whole chunks of `grain` items; the last chunk takes the remainder, so every call gets at least
  // min(grain, n) items.
  const size_t chunks = std::max<size_t>(n / grain, 1);
  // The order oneTBB's spawn and join give, made visible to ThreadSanitizer, which cannot see inside
  // an uninstrumented libtbb (runtime/tsan_annotations.h).
  char handoff = 0;
  tsan_release(&handoff);
  arena_->execute([&] {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, chunks), [&](const tbb::blocked_range<size_t>& r) {
      tsan_acquire(&handoff);
      size_t begin = r.begin() * grain;
      size_t end = r.end() == chunks ? n : r.end() * grain;
      body(begin, end);
      tsan_release(&handoff);
    });
  });
  tsan_acquire(&handoff);
}

}  // namespace strata
