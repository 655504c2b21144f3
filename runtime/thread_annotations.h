// Clang's thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html) as
// macros, after leveldb's port/thread_annotations.h and abseil's: a member written
// `int n_ GUARDED_BY(mu_);` is checked by clang's -Wthread-safety (on, as an error, in every clang
// build: cmake/StrataCompilerFlags.cmake). On compilers without the attributes (gcc, nvcc) every
// macro is empty. Not a lock: the annotated lock types are in runtime/mutex.h.
#pragma once

#if defined(__clang__) && defined(__has_attribute)
#if __has_attribute(guarded_by)
#define STRATA_THREAD_ANNOTATION(x) __attribute__((x))
#endif
#endif
#ifndef STRATA_THREAD_ANNOTATION
#define STRATA_THREAD_ANNOTATION(x)  // gcc, nvcc: no analysis
#endif

// A class whose objects are a capability (a lock): CAPABILITY("mutex").
#ifndef CAPABILITY
#define CAPABILITY(x) STRATA_THREAD_ANNOTATION(capability(x))
#endif
// An RAII class that acquires a capability in its constructor and releases it in its destructor.
#ifndef SCOPED_CAPABILITY
#define SCOPED_CAPABILITY STRATA_THREAD_ANNOTATION(scoped_lockable)
#endif

// Data members: reads and writes need the capability (a shared hold suffices for reads).
#ifndef GUARDED_BY
#define GUARDED_BY(x) STRATA_THREAD_ANNOTATION(guarded_by(x))
#endif
// Pointer members: the pointee needs the capability (the pointer itself does not).
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) STRATA_THREAD_ANNOTATION(pt_guarded_by(x))
#endif
// Lock order between capabilities.
#ifndef ACQUIRED_BEFORE
#define ACQUIRED_BEFORE(...) STRATA_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#endif
#ifndef ACQUIRED_AFTER
#define ACQUIRED_AFTER(...) STRATA_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#endif

// Functions: the caller must hold the capabilities (exclusively, or at least shared).
#ifndef REQUIRES
#define REQUIRES(...) STRATA_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#endif
#ifndef REQUIRES_SHARED
#define REQUIRES_SHARED(...) STRATA_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#endif
// Functions: the caller must not hold the capabilities (the function takes them itself).
#ifndef EXCLUDES
#define EXCLUDES(...) STRATA_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#endif

// Functions that take or drop a capability and keep it past their return (lock(), unlock()).
// With no argument inside a capability class: `this`.
#ifndef ACQUIRE
#define ACQUIRE(...) STRATA_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#endif
#ifndef ACQUIRE_SHARED
#define ACQUIRE_SHARED(...) STRATA_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#endif
#ifndef RELEASE
#define RELEASE(...) STRATA_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#endif
#ifndef RELEASE_SHARED
#define RELEASE_SHARED(...) STRATA_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#endif
#ifndef RELEASE_GENERIC
#define RELEASE_GENERIC(...) STRATA_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#endif
// try_lock(): the first argument is the return value that means "acquired".
#ifndef TRY_ACQUIRE
#define TRY_ACQUIRE(...) STRATA_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#endif
#ifndef TRY_ACQUIRE_SHARED
#define TRY_ACQUIRE_SHARED(...) STRATA_THREAD_ANNOTATION(try_acquire_shared_capability(__VA_ARGS__))
#endif

// Functions that tell the analysis the capability is held from here on (a run-time check, or none).
#ifndef ASSERT_CAPABILITY
#define ASSERT_CAPABILITY(x) STRATA_THREAD_ANNOTATION(assert_capability(x))
#endif
#ifndef ASSERT_SHARED_CAPABILITY
#define ASSERT_SHARED_CAPABILITY(x) STRATA_THREAD_ANNOTATION(assert_shared_capability(x))
#endif
// Functions that return a reference to a capability (an accessor for a private mutex).
#ifndef RETURN_CAPABILITY
#define RETURN_CAPABILITY(x) STRATA_THREAD_ANNOTATION(lock_returned(x))
#endif

// Turns the analysis off for one function. Use sparingly, each with a one-line reason: a correct
// pattern the analysis cannot follow, never a way to silence a real finding.
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS STRATA_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif
