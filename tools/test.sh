#!/usr/bin/env bash
# Builds strata if needed, then runs the test stages, each in its own build dir, timing each:
#   unit  every test through CTest (build/); tests labelled `gpu` skip with the reason when no GPU
#         is visible. Extra arguments go to this stage's ctest (e.g. -L gpu, -R Config).
#   asan  every CPU test, fuzz corpus replays and CLI tests included, under ASan+UBSan (build-asan/,
#         CPU backend; LeakSanitizer suppressions in tools/lsan.supp).
#   tsan  the offload tests (I/O engines, NVMe store, CPU Adam, tier manager, prefetcher, gradient
#         offloader, optimizer pipeline), the stream, backend and thread-pool tests and the
#         trainer's pipeline and batch loader under TSan (build-tsan/, CPU backend, only the
#         offload, runtime and model test binaries; suppressions in tools/tsan.supp)
#   fuzz  each tests/fuzz harness under libFuzzer with ASan+UBSan for 20 s from its corpus, two at
#         a time (build-fuzz/, clang; skipped, saying why, where clang's libFuzzer is missing)
# STRATA_TEST_STAGES picks stages. Default: unit tsan fuzz, which CI (.ci/run: setup, then this)
# runs in about 30 min on 2 idle cores. asan is not in the default: its build alone takes about
# 39 CPU-minutes (about 20 min on 2 cores), which would take CI past its 45-minute budget; run
# `STRATA_TEST_STAGES="unit asan tsan fuzz" tools/test.sh` before a merge that touches memory.
# Not a CI system: .ci/run calls this script after tools/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=$(nproc)
STAGES=${STRATA_TEST_STAGES:-unit tsan fuzz}
# Sanitizer reports fail the test that triggered them.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tools/lsan.supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tools/tsan.supp}

# The sanitizer builds compile at -O1 (what ASan and TSan are meant for): about half the compile
# time of -O3, which is most of these stages' time on a 2-core machine.
SANITIZER_OPT="-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG"

configure() {  # configure DIR [cmake args...]: once per build dir; an existing dir keeps its cache
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
  fi
}

stage_unit() {
  # shellcheck disable=SC2086
  configure "$BUILD_DIR" ${STRATA_CMAKE_ARGS:-}
  cmake --build "$BUILD_DIR" --parallel "$JOBS"
  ctest --test-dir "$BUILD_DIR" --output-on-failure --parallel "$JOBS" "$@"
}

cpu_test_targets() {  # cpu_test_targets DIR: every CPU test binary and fuzz replay of a build dir
  ninja -C "$1" -t targets all | sed -n 's/^tests\/\(fuzz\/\)\{0,1\}\(strata_[a-z]*_tests\|strata_fuzz_[a-z_]*\): .*/\2/p'
}

stage_asan() {
  configure build-asan -DSTRATA_CUDA=OFF -DSTRATA_SANITIZE=address,undefined "$SANITIZER_OPT"
  # The CPU test binaries, the fuzz replays and the CLI the tools tests run; not the gpu test
  # binaries (every test in them skips without CUDA), whose CTest stand-ins *_NOT_BUILT are excluded.
  # shellcheck disable=SC2046
  cmake --build build-asan --parallel "$JOBS" --target strata $(cpu_test_targets build-asan)
  ctest --test-dir build-asan --output-on-failure --parallel "$JOBS" -LE gpu -E '_NOT_BUILT$'
}

stage_tsan() {
  configure build-tsan -DSTRATA_CUDA=OFF -DSTRATA_SANITIZE=thread "$SANITIZER_OPT"
  cmake --build build-tsan --parallel "$JOBS" --target strata_offload_tests strata_runtime_tests strata_model_tests
  ctest --test-dir build-tsan --output-on-failure --parallel "$JOBS" -L offload
  ctest --test-dir build-tsan --output-on-failure --parallel "$JOBS" -L runtime \
        -R '^(Cpu(Backend|Stream)|Backend|ThreadPool|PinnedPool)'
  # The trainer's CPU update pipeline (D2H, host update and H2D on the CPU backend's stream threads)
  # and the batch loader's background thread.
  ctest --test-dir build-tsan --output-on-failure --parallel "$JOBS" -L model \
        -R '^(Presets/TrainerGoldenTest|TrainerTest|BatchLoaderTest)\.'
}

stage_fuzz() {
  if ! command -v clang++ >/dev/null || ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
      clang++ -x c++ -fsanitize=fuzzer - -o /tmp/strata-libfuzzer-probe.$$ 2>/dev/null; then
    echo "test.sh: fuzz stage skipped: clang++ with libFuzzer (-fsanitize=fuzzer) is not installed (tools/setup.sh installs clang and libclang-rt-14-dev)"
    return 0
  fi
  rm -f /tmp/strata-libfuzzer-probe.$$
  configure build-fuzz -DSTRATA_CUDA=OFF -DSTRATA_FUZZ=ON -DSTRATA_BUILD_TESTS=ON "$SANITIZER_OPT" \
            -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
            "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
  cmake --build build-fuzz --parallel "$JOBS" --target strata_fuzz_config strata_fuzz_safetensors strata_fuzz_token_file
  ctest --test-dir build-fuzz --output-on-failure --parallel "$JOBS" -L fuzz
}

summary=""
for stage in $STAGES; do
  start=$(date +%s)
  case $stage in
    unit) stage_unit "$@" ;;
    asan | tsan | fuzz) "stage_$stage" ;;
    *) echo "test.sh: unknown stage '$stage' in STRATA_TEST_STAGES (stages: unit asan tsan fuzz)" >&2; exit 2 ;;
  esac
  took=$(( $(date +%s) - start ))
  echo "test.sh: stage $stage passed in ${took} s"
  summary+="$stage ${took}s  "
done
echo "test.sh: all stages passed: $summary"
