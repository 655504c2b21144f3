#!/usr/bin/env bash
# Builds what the tests need (tools/setup.sh builds only the `strata` binary), then runs the test
# stages, each in its own build dir, timing each:
#   unit  builds every target of build/ (the test binaries too), then every test through CTest;
#         tests labelled `gpu` skip with the reason when no GPU
#         is visible. Extra arguments go to this stage's ctest (e.g. -L gpu, -R Config).
#   asan  every CPU test and the CLI tests (of the transparency matrix, three of its 24 cases) under
#         ASan+UBSan (build-asan/, CPU backend, clang with libFuzzer's coverage so the fuzz stage
#         reuses the build; LeakSanitizer suppressions in tools/lsan.supp), the mpi tests without
#         LeakSanitizer (Open MPI leaks from the components it unloads). Without clang's
#         libFuzzer it builds with the default compiler and also replays the fuzz corpora, as the
#         unit stage does.
#   tsan  the offload tests (I/O engines, NVMe store, CPU Adam, tier manager, prefetcher, gradient
#         offloader, optimizer pipeline), the stream, backend, thread-pool and Mutex/CondVar tests and
#         the trainer's pipeline and batch loader under TSan (build-tsan/, CPU backend, only the
#         offload, runtime and model test binaries; suppressions in tools/tsan.supp)
#   fuzz  each tests/fuzz harness under libFuzzer with ASan+UBSan for 20 s from its corpus, two at
#         a time (build-asan/, whose libraries the asan stage built; skipped, saying why, where
#         clang's libFuzzer is missing)
# STRATA_TEST_STAGES picks stages. Default: all four, which CI (.ci/run: setup, then this) ran in
# 51 min on this 2-core VM on 2026-11-28 (its budget is 90; the VM's speed varies by a third from
# one hour to the next): setup (the `strata` binary with CUDA) ~9.5, unit 13 (its build 6, the test
# binaries unity-built), asan 23 (its build 10-13), tsan 7 (its build 5-6; its tests 1, since the
# hand-offs to oneTBB are annotated, not suppressed), fuzz 1. A stage added to the default needs
# room made first.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=$(nproc)
STAGES=${STRATA_TEST_STAGES:-unit asan tsan fuzz}
# Sanitizer reports fail the test that triggered them. intercept_tls_get_addr=0: Debian's GCC 12
# sanitizer runtime takes a dynamic TLS block (oneTBB's, hwloc's plugins') whose address happens to
# sit 16 bytes into a page for a glibc 2.19 header, reads two words before it as a range, and
# LeakSanitizer's exit scan then dies in it ("Tracer caught signal 11") after the test passed:
# which tests it hits moves with the heap's layout (google/sanitizers#1322; fixed in GCC 14 and
# LLVM 17). The leak check stays on; only the dynamic TLS blocks' contents are not scanned.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0:intercept_tls_get_addr=0}
# print_suppressions=0: a suppressed leak (tools/lsan.supp's, which comes and goes with TBB's
# timing) would otherwise append its five-line "Suppressions used" table to the process's stderr,
# which the CLI tests read (TrainProgressCli counts a run's lines: 31 of 30 with it).
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tools/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tools/tsan.supp}

# The sanitizer builds are most of CI's time on a 2-core machine. They compile at -O1 (what ASan
# and TSan are meant for: about half the compile time of -O3) as unity builds (CMAKE_UNITY_BUILD:
# 8 sources per compiler run share the parse of the common headers; strata_unity_skip in
# cmake/StrataTargets.cmake keeps out a source whose file-local names collide with a sibling's),
# only the targets their tests need. The ASan+UBSan build is also the libFuzzer build: one clang
# build of the libraries serves the asan and fuzz stages.
SANITIZER_BUILD=(-DSTRATA_CUDA=OFF "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" -DCMAKE_UNITY_BUILD=ON)

have_libfuzzer() {
  command -v clang++ >/dev/null &&
    echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
      clang++ -x c++ -fsanitize=fuzzer - -o /tmp/strata-libfuzzer-probe.$$ 2>/dev/null &&
    rm -f /tmp/strata-libfuzzer-probe.$$
}
ASAN_BUILD=("${SANITIZER_BUILD[@]}" "-DSTRATA_SANITIZE=address,undefined")
if have_libfuzzer; then
  ASAN_BUILD+=(-DSTRATA_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
fi

configure() {  # configure DIR [cmake args...]: once per build dir; an existing dir keeps its cache
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
  fi
}

configure_own() {  # configure_own DIR [cmake args...]: a dir only this script builds, started over
  local dir=$1      # when it was configured with other arguments (a compiler cannot be changed in place)
  shift
  if [ -f "$dir/build.ninja" ] && [ "$(cat "$dir/test.sh-args" 2>/dev/null)" != "$*" ]; then
    echo "test.sh: $dir was configured with other arguments; configuring it again from scratch"
    rm -rf "$dir"
  fi
  configure "$dir" "$@"
  echo "$*" >"$dir/test.sh-args"
}

built() {  # says how long the running stage took to configure and build (its tests come after)
  echo "test.sh: stage $stage built in $(( $(date +%s) - start )) s"
}

stage_unit() {
  # shellcheck disable=SC2086
  configure "$BUILD_DIR" ${STRATA_CMAKE_ARGS:-}
  cmake --build "$BUILD_DIR" --parallel "$JOBS"
  built
  ctest --test-dir "$BUILD_DIR" --output-on-failure --parallel "$JOBS" "$@"
}

cpu_test_targets() {  # cpu_test_targets DIR: every CPU test binary, fuzz replay and mpi check (*_mpi_check) of a build dir
  ninja -C "$1" -t targets all |
    sed -n 's/^tests\/\(fuzz\/\)\{0,1\}\(strata_[a-z]*_tests\|strata_fuzz_[a-z_]*\|[a-z]*_mpi_check\): .*/\2/p'
}

fuzz_built() {  # fuzz_built: whether build-asan is the libFuzzer build (its harnesses link libFuzzer)
  grep -q '^STRATA_FUZZ:BOOL=ON$' build-asan/CMakeCache.txt
}

stage_asan() {
  configure_own build-asan "${ASAN_BUILD[@]}"
  # The CPU test binaries, the fuzz harnesses and the CLI the tools tests run; not the gpu test
  # binaries (every test in them skips without CUDA), whose CTest stand-ins *_NOT_BUILT are excluded.
  # shellcheck disable=SC2046
  cmake --build build-asan --parallel "$JOBS" --target strata $(cpu_test_targets build-asan)
  built
  local skip=gpu
  if fuzz_built; then
    skip='gpu|fuzz'  # the libFuzzer runs are the fuzz stage's
  fi
  # The transparency matrix is 24 cases of the same training code (each placement against the
  # resident run, per architecture, precision, accumulation and moment format), each of 10 steps
  # (half the 30-45 s a case under ASan that 20 took): three cases here (both architectures, each
  # precision, accumulation, 8-bit moments), all 24 in the unit stage.
  # Left out here, run in the unit stage: the longest training runs through the CLI, each 40-110 s
  # under ASan (a third of its tests' time), whose code the shorter tests here cover -- a mid-run
  # NVMe checkpoint resumed (NvmeCheckpoint.PiecesWriteTheSameFilesAsWholeChunks writes the same
  # pieces), bf16 and fp16 through the CLI (the transparency cases below train both), a kill at every
  # checkpoint point (the checkpoint and signal tests write and resume them), layer-major against
  # micro-batch-major (LayerMajor.WeightsCrossNvmeAboutTwiceAStep runs layer-major), the progress
  # lines through a pipe and --log-every on a terminal (TerminalGetsOneLiveLineAndATenthOfTheSteps
  # draws the live line) and an NVMe-homed run resumed through the CLI (the NVMe checkpoint and
  # transparency tests here page and resume NVMe homes).
  ctest --test-dir build-asan --output-on-failure --parallel "$JOBS" -LE "$skip|mpi" \
        -E '_NOT_BUILT$|^Placements/Transparency\.|^(NvmeCheckpoint\.AMidRunCheckpointResumesBitIdentically|TrainCli\.Bf16AndFp16Train|TrainKill\..*|LayerMajor\.TrainsBitIdenticallyToMicroBatchMajor|TrainProgressCli\.(PipeGetsPlainLinesAtLogEvery|LogEveryIsKeptOnATerminal)|OffloadCli\.ANvmeHomedRunResumesBitIdentically)$'
  # Under mpirun the ranks' MPI_Init and MPI_Finalize load and unload Open MPI's components, whose
  # allocations LeakSanitizer then reports from unmapped modules (frames no suppression can name),
  # with libpciaccess's from Open MPI's own hwloc topology: the mpi tests (the MPI communicator,
  # `bench comm`) keep ASan and UBSan but not leak checking. Their own heap is RAII-owned. The
  # training across ranks runs the same code in each of its cases (the unit stage runs all of
  # them): here two 2-rank equalities (GPT-2 fp32 with its tied table, LLaMA bf16) and GPT-2's
  # placements (the CPU optimizer's exchange, gather and ZeRO-3); not the 4-rank ones nor the
  # 4-rank kill, whose 20 s wait is the same code as the 2-rank one's, nor the ranks' placement
  # (runtime/rank_locality_test.cc runs its code here; the check is `strata info` and a binding read
  # from /proc).
  ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" \
    ctest --test-dir build-asan --output-on-failure --parallel "$JOBS" -L mpi \
          -E '^(Train\.Mpi\.(RanksEqualGradAccum\.(gpt2-tiny\.bf16|llama-tiny\.fp32|.*\.np4)|PlacementsEqual\.llama-tiny\..*|DeadRankStopsTraining\.np4)|Comm\.Mpi\.RankPlacement\..*)'
  ctest --test-dir build-asan --output-on-failure --parallel "$JOBS" --no-tests=error \
        -R '^Placements/Transparency\..*/(Gpt2_fp16_K1_8bit|Llama_bf16_K3|Gpt2_fp32_K3)( |$)'
}

stage_tsan() {
  configure_own build-tsan "${SANITIZER_BUILD[@]}" -DSTRATA_SANITIZE=thread
  # offload_mpi_check: its `sharded` mode without mpirun (label offload) drives the compute and
  # comm streams at once (ZeRO-3's gathers ahead through the local communicator's duplicate).
  cmake --build build-tsan --parallel "$JOBS" --target strata_offload_tests strata_runtime_tests strata_model_tests \
        offload_mpi_check
  built
  ctest --test-dir build-tsan --output-on-failure --parallel "$JOBS" -L offload
  ctest --test-dir build-tsan --output-on-failure --parallel "$JOBS" -L runtime \
        -R '^(Cpu(Backend|Stream)|Backend|ThreadPool|PinnedPool|Mutex|CondVar)'
  # The trainer's CPU update pipeline (D2H, host update and H2D on the CPU backend's stream threads)
  # and the batch loader's background thread.
  ctest --test-dir build-tsan --output-on-failure --parallel "$JOBS" -L model \
        -R '^(Presets/TrainerGoldenTest|TrainerTest|BatchLoaderTest)\.'
}

stage_fuzz() {
  if ! have_libfuzzer; then
    echo "test.sh: fuzz stage skipped: clang++ with libFuzzer (-fsanitize=fuzzer) is not installed (tools/setup.sh installs clang and libclang-rt-14-dev)"
    return 0
  fi
  configure_own build-asan "${ASAN_BUILD[@]}"  # the asan stage's build dir; after it, nothing to build
  cmake --build build-asan --parallel "$JOBS" --target strata_fuzz_config strata_fuzz_safetensors strata_fuzz_token_file
  built
  ctest --test-dir build-asan --output-on-failure --parallel "$JOBS" -L fuzz
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
