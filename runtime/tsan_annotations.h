// Happens-before edges ThreadSanitizer cannot see for itself: a hand-off inside uninstrumented code.
// Debian's oneTBB is built without TSan, so when a parallel loop hands its ranges to oneTBB's
// workers, and when they finish, nothing TSan watches orders the caller's writes before a worker's
// reads, or a worker's writes before the caller's reads after the loop: every such access looks
// like a race. Suppressing them (tools/tsan.supp) hides them but is slow -- TSan still finds and
// matches each racy address, an ever longer search (a 5 MB parallel zero-fill took 113 s) -- so the
// loops that hand work to oneTBB (runtime/parallel_ranges.h, ThreadPool::parallel_for) say where
// the edges are:
//   tsan_release(&token);                      // the caller, before the loop
//   parallel_for(... { tsan_acquire(&token);   // each range, first
//                      ...;
//                      tsan_release(&token); });  // each range, last
//   tsan_acquire(&token);                      // the caller, after the loop
// (TSan's release joins the thread's clock into the token's, so every range's edge reaches the
// caller.) No-ops, with no cost, in every build without TSan.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define STRATA_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRATA_TSAN 1
#endif
#endif

#ifdef STRATA_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace strata {

// The calling thread's writes so far happen before what a thread does after tsan_acquire(token).
inline void tsan_release(void* token) {
#ifdef STRATA_TSAN
  __tsan_release(token);
#else
  (void)token;
#endif
}

inline void tsan_acquire(void* token) {
#ifdef STRATA_TSAN
  __tsan_acquire(token);
#else
  (void)token;
#endif
}

}  // namespace strata
