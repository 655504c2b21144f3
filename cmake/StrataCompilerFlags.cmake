# Compiler flags shared by every strata target, through the interface target strata::flags.
# The default binary targets baseline x86-64 (SIMD kernels are compiled per-function with target
# attributes and chosen at run time by cpuid); STRATA_NATIVE=ON tunes for the build machine.
add_library(strata_flags INTERFACE)
add_library(strata::flags ALIAS strata_flags)
target_compile_options(strata_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${STRATA_WERROR}>>:-Werror>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${STRATA_NATIVE}>>:-march=native>)
# clang checks the locking contracts written in the types (GUARDED_BY, REQUIRES, ... from
# runtime/thread_annotations.h on runtime/mutex.h's Mutex) at compile time, and a violation stops
# the build whatever STRATA_WERROR says. gcc and nvcc have no such analysis (the macros are empty).
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  target_compile_options(strata_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-Wthread-safety -Werror=thread-safety>)
endif()
if(STRATA_SANITIZE)
  # -fno-sanitize-recover=all: a UBSan finding aborts the test that hit it, whatever UBSAN_OPTIONS
  # says (by default UBSan prints and carries on, and the test would pass).
  target_compile_options(strata_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${STRATA_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer>)
  target_link_options(strata_flags INTERFACE -fsanitize=${STRATA_SANITIZE})
endif()
if(STRATA_HAVE_CUDA)
  target_compile_definitions(strata_flags INTERFACE STRATA_HAVE_CUDA=1)
  target_compile_options(strata_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
endif()
target_compile_definitions(strata_flags INTERFACE
  STRATA_VERSION="${PROJECT_VERSION}" STRATA_LIBURING_VERSION="${LIBURING_VERSION}")
