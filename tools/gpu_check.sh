#!/usr/bin/env bash
# Checks strata on a machine with an NVIDIA GPU in one go, every phase under a deadline, every log
# written as it goes. A GPU machine is lent for minutes: spend them measuring, not building.
#   tools/gpu_check.sh --pack KIT.tar.xz [BUILD_DIR]   here, on the build machine (no GPU needed):
#       packs BUILD_DIR's (default build) strata and gpu test binaries, stripped, with the runtime
#       libraries ldd names outside glibc, CUDA and NCCL and the paths the tests were built with, into
#       an xz tarball (~12 MB). The default Release build already carries sm_90 code. libnccl (over
#       200 MB) stays out: the runner takes the GPU machine's, PyTorch's wheel's (nvidia/nccl/lib).
#   tools/gpu_check.sh --kit KIT.tar.xz [LOG_DIR]       there, on the GPU machine: unpacks the kit
#       with Python's tarfile (no xz needed), points LD_LIBRARY_PATH at it and at the machine's CUDA
#       libraries, links the golden data where the tests look for it, and runs the phases. Builds
#       nothing.
#   tools/gpu_check.sh [LOG_DIR]                         on a GPU machine with the build packages
#       (tools/setup.sh, or tools/gpu_debs.sh's .debs/ carried there): builds with the CUDA backend
#       for the GPU present, then runs the same phases.
# Phases (GPU_CHECK_PHASES, default "tests comm train profile"; each under its deadline, a failure
# is reported and the next phase runs):
#   tests    every gpu test with STRATA_REQUIRE_GPU=1 (a test that cannot reach the GPU fails)
#   comm     the NCCL communicator: its gpu tests (NcclWorldOfOne.*), then strata bench comm on NCCL
#            at a world of one (--device cuda --comm nccl: comm-bench.txt), then the same under
#            `mpirun -np 1` (NCCL's unique id over MPI: comm-bench-mpirun.txt) when mpirun is here
#            (said and skipped when not); the all-gather and reduce-scatter rows go to the summary.
#            With the kit's comm_mpi_check: its collectives on NCCL at one rank, and under mpirun
#            on every GPU when there are two or more (the ordered sums across ranks, bit for bit).
#            Then strata train --comm nccl at a world of one against no communicator, figures and
#            checkpoint bytes (tests/tools/train_solo_exchange_check.sh: comm-train-PRESET.log)
#   train    strata train on random tokens in bf16, optimizer on the device, for each
#            "preset:micro_batch" of GPU_CHECK_MODELS (default "gpt2-124m:16 gpt2-1.5b:8", T = 1024,
#            GPU_CHECK_STEPS steps, default 30), beside bench/peers/torch_gpt_train.py on the same
#            GPU: eager, and --compile for the presets in GPU_CHECK_COMPILE (default gpt2-124m)
#   profile  ncu's time of every kernel of strata's GPU_CHECK_PROFILE run (default gpt2-124m:16,
#            GPU_CHECK_PROFILE_STEPS steps, default 3), summed by kernel name per step, slowest
#            first (profile.txt); then ncu's sections for one launch of each kernel that
#            GPU_CHECK_NCU_DETAIL's regular expressions match (space-separated; default the attention
#            kernels; "" skips): profile-detail.txt
#   calibrate  strata plan --calibrate on the GPU (PCIe, GEMMs, CPU Adam, and NVMe on the offload
#            phase's swap directory) into the calibration cache, so that the offload and peer runs'
#            predictions (their metrics' prediction rows: measured / predicted step) use this machine's
#            rates; its rate lines to the summary
#   offload  bench/offload_train_bench.sh for each "preset:micro_batch" of GPU_CHECK_OFFLOAD (none
#            by default), swap files in GPU_CHECK_NVME (default LOG_DIR/swap); with
#            GPU_CHECK_OFFLOAD_SPLIT_MEM (e.g. 12GiB) also the weights in pinned memory under that
#            budget with the whole update on the CPU and with --optimizer-device split; with
#            GPU_CHECK_OFFLOAD_CACHE (e.g. 8GiB) also the nvme run with that pinned read cache
#   peer     for each "preset:micro_batch" of GPU_CHECK_PEER (default "llama-7b:8"), T = 1024,
#            activation checkpointing: strata train with the planner's placement under
#            --gpu-mem GPU_CHECK_PEER_GPU_MEM (default 24GiB; 8-bit moments unless
#            GPU_CHECK_PEER_Q8=0), then bench/peers/deepspeed_llama_train.py (ZeRO-3, parameters and
#            optimizer offloaded to the CPU) on the same model and batch, DeepSpeed installed from
#            the wheels in GPU_CHECK_DS_WHEELS (default .kit/wheels: tools/deepspeed_wheels.sh) into
#            LOG_DIR/ds-site; a line each with tokens/s and strata / DeepSpeed; strata's run with
#            --bench (the step against its bound), its setup time (command to the first step) and its
#            prediction row (measured / predicted step and device peak) in the summary
# Every phase appends its result to LOG_DIR/summary.txt; the train phase ends it with a table of
# median step times, tokens/s and the ratios to PyTorch. Exit status: 0 when every phase passed.
# Environment: GPU_CHECK_PYTHON (python3 with torch), GPU_CHECK_DEADLINE_* (seconds per phase:
# TESTS 420, COMM 180 per command, RUN 240 per training run, PROFILE 300), BUILD_DIR (build mode, default build-gpu),
# STRATA_CMAKE_ARGS, DEBS_DIR (.debs), DEPS_ROOT (/tmp/strata-deps), KIT_DIR (/tmp/strata-kit).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REPO=$PWD

say() { echo "gpu_check: $*"; }
fail() { echo "gpu_check: $1" >&2; exit "${2:-1}"; }

# --- --pack: the kit --------------------------------------------------------------------------------
if [ "${1:-}" = --pack ]; then
  kit=${2:?usage: tools/gpu_check.sh --pack KIT.tar.xz [BUILD_DIR]}
  build=${3:-build}
  [ -x "$build/bin/strata" ] || fail "no $build/bin/strata: build first (tools/setup.sh)" 2
  ldd "$build/bin/strata" | grep libcublas > /dev/null ||  # not -q: under pipefail an early exit fails ldd
    fail "$build/bin/strata was built without the CUDA backend (it does not link cuBLAS): build with nvcc present" 2
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/kit/bin" "$stage/kit/lib"
  bins=("$build/bin/strata")
  for t in "$build"/tests/strata_*_gpu_tests; do [ -x "$t" ] && bins+=("$t"); done
  [ ${#bins[@]} -gt 1 ] || fail "no gpu test binaries in $build/tests (configure with STRATA_BUILD_TESTS=ON)" 2
  [ -x "$build/tests/comm_mpi_check" ] && bins+=("$build/tests/comm_mpi_check")  # the comm phase's ranks check
  for b in "${bins[@]}"; do
    cp "$b" "$stage/kit/bin/" && strip --strip-unneeded "$stage/kit/bin/$(basename "$b")" ||
      fail "cannot copy and strip $b"
  done
  # Runtime libraries outside glibc, the C++ runtime (the GPU machine's is as new or newer, and a
  # kit's older one would shadow it for PyTorch and ncu) and CUDA/NVIDIA (from the GPU machine; libnccl
  # too: over 200 MB, and PyTorch's wheel carries one).
  skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcudnn|libnvidia|libnvrtc|libnccl|libnvJitLink|libcufile)'
  for b in "${bins[@]}"; do ldd "$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
      echo "$name" | grep -qE "$skip" && continue
      cp -L "$path" "$stage/kit/lib/$name" || exit 1
    done || fail "cannot copy the runtime libraries"
  # Where the tests were built to look: golden data (STRATA_TEST_DATA_DIR), scratch (STRATA_BINARY_DIR).
  {
    echo "TEST_DATA_DIR=$REPO/tests/data"
    echo "BINARY_DIR=$(cd "$build" && pwd)"
    echo "COMMIT=$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo +dirty)"
    echo "PACKED=$(date -u +%FT%TZ)"
  } > "$stage/kit/paths.env"
  (cd "$stage" && tar -cJf kit.tar.xz kit) || fail "cannot write the tarball"
  mkdir -p "$(dirname "$kit")" && mv "$stage/kit.tar.xz" "$kit" || fail "cannot write $kit"
  say "packed $(ls "$stage/kit/bin" | wc -l) binaries and $(ls "$stage/kit/lib" | wc -l) libraries into $kit" \
      "($(du -h "$kit" | cut -f1)); on the GPU machine: tools/gpu_check.sh --kit $kit LOG_DIR"
  exit 0
fi

MODE=build
KIT=""
if [ "${1:-}" = --kit ]; then
  MODE=kit
  KIT=${2:?usage: tools/gpu_check.sh --kit KIT.tar.xz [LOG_DIR]}
  shift 2
fi
LOG_DIR=${1:-gpu-check-logs}
mkdir -p "$LOG_DIR" || fail "cannot create $LOG_DIR" 2
LOG_DIR=$(cd "$LOG_DIR" && pwd)
SUMMARY=$LOG_DIR/summary.txt
: > "$SUMMARY"
PHASES=${GPU_CHECK_PHASES:-tests comm train profile}
STEPS=${GPU_CHECK_STEPS:-30}
MODELS=${GPU_CHECK_MODELS:-gpt2-124m:16 gpt2-1.5b:8}
COMPILE=${GPU_CHECK_COMPILE:-gpt2-124m}
PYTHON=${GPU_CHECK_PYTHON:-python3}
status=0

note() { echo "$*" | tee -a "$SUMMARY"; }
phase_failed() { status=1; note "FAILED: $*"; }
# Runs "$@" under a deadline of $1 seconds with its output in $2; returns its status (124: deadline).
within() {
  local seconds=$1 log=$2
  shift 2
  timeout --kill-after=10 "$seconds" "$@" > "$log" 2>&1
}

if ! command -v nvidia-smi > /dev/null; then
  fail "nvidia-smi not found: this machine has no NVIDIA driver (run --kit and the build mode on a GPU machine; --pack works anywhere)" 2
fi
nvidia-smi > "$LOG_DIR/nvidia-smi.txt" 2>&1
if ! nvidia-smi --query-gpu=name --format=csv,noheader > /dev/null 2>&1; then
  fail "nvidia-smi sees no GPU (see $LOG_DIR/nvidia-smi.txt)" 2
fi
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')
note "gpu_check: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1), sm_$arch; mode $MODE; logs in $LOG_DIR"

# --- the binaries: unpacked from the kit, or built here ------------------------------------------------
if [ "$MODE" = kit ]; then
  KIT_DIR=${KIT_DIR:-/tmp/strata-kit}
  rm -rf "$KIT_DIR" && mkdir -p "$KIT_DIR" || fail "cannot create $KIT_DIR" 2
  "$PYTHON" - "$KIT" "$KIT_DIR" <<'PY' || fail "cannot unpack $KIT" 2
import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as t:
    t.extractall(sys.argv[2], filter="data") if hasattr(tarfile, "data_filter") else t.extractall(sys.argv[2])
PY
  BIN=$KIT_DIR/kit/bin
  # shellcheck disable=SC1091
  . "$KIT_DIR/kit/paths.env"
  cuda_libs=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
    [ -d "$d" ] && cuda_libs="$cuda_libs:$d"
  done
  # libnccl is not in the kit: PyTorch's (the nvidia-nccl wheel's nvidia/nccl/lib), else the first
  # libnccl.so.2 under the Python's site-packages or the usual prefixes. First on the path: a
  # distribution's older one in /usr/lib would lack the calls strata makes.
  nccl_dir=$("$PYTHON" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  if [ -z "$nccl_dir" ] || [ ! -e "$nccl_dir/libnccl.so.2" ]; then
    # shellcheck disable=SC2046
    nccl_so=$(find $("$PYTHON" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
                /usr/local /usr/lib /opt -name 'libnccl.so.2*' 2>/dev/null | head -1)
    nccl_dir=${nccl_so:+$(dirname "$nccl_so")}
  fi
  if [ -n "$nccl_dir" ]; then cuda_libs=":$nccl_dir$cuda_libs"; fi
  # cuBLAS / cuDNN wheels beside PyTorch, when the toolkit's own are missing.
  for d in $("$PYTHON" -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
    [ -d "$d" ] && cuda_libs="$cuda_libs:$d"
  done
  # Only strata's processes see the kit's libraries (PyTorch keeps its own environment).
  STRATA_ENV=(env "LD_LIBRARY_PATH=$KIT_DIR/kit/lib$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  # The tests open their data at the path they were built with: point it at this checkout's.
  if [ "$TEST_DATA_DIR" != "$REPO/tests/data" ] && [ ! -e "$TEST_DATA_DIR" ]; then
    mkdir -p "$(dirname "$TEST_DATA_DIR")" && ln -s "$REPO/tests/data" "$TEST_DATA_DIR"
  fi
  mkdir -p "$BINARY_DIR/test-scratch" 2>/dev/null
  [ -e "$BINARY_DIR/bin/strata" ] || { mkdir -p "$BINARY_DIR/bin" && ln -sf "$BIN/strata" "$BINARY_DIR/bin/strata"; }
  if ! "${STRATA_ENV[@]}" ldd "$BIN/strata" > "$LOG_DIR/ldd.txt" 2>&1 || grep -q "not found" "$LOG_DIR/ldd.txt"; then
    hint=""
    grep -q "libnccl.*not found" "$LOG_DIR/ldd.txt" &&
      hint="; libnccl is not in the kit: install PyTorch (its nvidia-nccl wheel) for $PYTHON or put libnccl.so.2's folder on LD_LIBRARY_PATH"
    fail "the kit's strata cannot load: $(grep 'not found' "$LOG_DIR/ldd.txt" | head -3 | tr '\n' ' ')$hint" 2
  fi
  note "kit ${COMMIT:-?} packed ${PACKED:-?}; libnccl from ${nccl_dir:-the default library path}"
  TEST_BINS=("$BIN"/strata_*_gpu_tests)
else
  BUILD_DIR=${BUILD_DIR:-build-gpu}
  DEBS_DIR=${DEBS_DIR:-.debs}
  DEPS_ROOT=${DEPS_ROOT:-/tmp/strata-deps}
  multiarch=x86_64-linux-gnu
  cmake_extra=()
  if compgen -G "$DEBS_DIR/*.deb" > /dev/null; then
    rm -rf "$DEPS_ROOT" && mkdir -p "$DEPS_ROOT"
    for deb in "$DEBS_DIR"/*.deb; do
      dpkg-deb -x "$deb" "$DEPS_ROOT" || fail "cannot unpack $deb (is dpkg-deb installed?)"
    done
    lib="$DEPS_ROOT/usr/lib/$multiarch"
    # Debian's .pc files name /usr absolutely: point them at the prefix.
    find "$DEPS_ROOT" -name '*.pc' -exec sed -i -E "s#^([A-Za-z_]+)=/usr#\\1=$DEPS_ROOT/usr#" {} +
    # OpenBLAS is reached through update-alternatives links that dpkg-deb -x does not make.
    ln -sf openblas-pthread/libopenblas.so.0 "$lib/libopenblas.so.0"
    ln -sf openblas-pthread/libblas.so.3 "$lib/libblas.so.3"
    export PKG_CONFIG_PATH="$lib/pkgconfig:$lib/openblas-pthread/pkgconfig:$DEPS_ROOT/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export CMAKE_PREFIX_PATH="$DEPS_ROOT/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
    export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export CPATH="$DEPS_ROOT/usr/include${CPATH:+:$CPATH}"
    if ! command -v pkg-config > /dev/null; then
      export PATH="$DEPS_ROOT/usr/bin:$PATH"
      cmake_extra+=("-DPKG_CONFIG_EXECUTABLE=$DEPS_ROOT/usr/bin/pkgconf")
    fi
    say "unpacked $(compgen -G "$DEBS_DIR/*.deb" | wc -l) packages from $DEBS_DIR into $DEPS_ROOT"
  fi
  # Debian's package config files declare old policy versions; CMake 4 refuses those without this.
  export CMAKE_POLICY_VERSION_MINIMUM=3.5
  missing=()
  need_tool() { command -v "$1" > /dev/null || missing+=("$1 ($2)"); }
  need_tool cmake "cmake >= 3.25"
  need_tool ninja "ninja"
  need_tool c++ "a C++20 compiler, g++ >= 11"
  need_tool pkg-config "pkgconf"
  command -v protoc > /dev/null || [ -x "$DEPS_ROOT/usr/bin/protoc" ] || missing+=("protoc (protobuf-compiler)")
  nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
  [ -x "$nvcc" ] || nvcc=$(command -v nvcc || true)
  [ -n "$nvcc" ] && [ -x "$nvcc" ] || missing+=("nvcc (the CUDA toolkit; set CUDACXX)")
  if command -v pkg-config > /dev/null; then
    for m in liburing:liburing-dev hwloc:libhwloc-dev openblas:libopenblas-dev; do
      pkg-config --exists "${m%%:*}" || missing+=("${m%%:*} (${m#*:})")
    done
  fi
  inc_dirs=("$DEPS_ROOT/usr/include" /usr/include /usr/local/include)
  for h in tbb/tbb.h:libtbb-dev spdlog/spdlog.h:libspdlog-dev fmt/format.h:libfmt-dev \
           nlohmann/json.hpp:nlohmann-json3-dev CLI/CLI.hpp:libcli11-dev gtest/gtest.h:libgtest-dev \
           gmock/gmock.h:libgmock-dev google/protobuf/message_lite.h:libprotobuf-dev; do
    found=0
    for d in "${inc_dirs[@]}"; do [ -f "$d/${h%%:*}" ] && found=1; done
    [ $found = 1 ] || missing+=("${h%%:*} (${h#*:})")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "gpu_check: the build cannot start; missing:" >&2
    printf '  %s\n' "${missing[@]}" >&2
    echo "  On Debian: tools/setup.sh. Without a package registry: build and --pack a kit on a Debian machine," >&2
    echo "  or run tools/gpu_debs.sh there and bring its .debs/ folder here (DEBS_DIR names another)." >&2
    exit 2
  fi
  start=$(date +%s)
  # shellcheck disable=SC2086
  if ! { cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON \
           -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$arch" "${cmake_extra[@]}" \
           ${STRATA_CMAKE_ARGS:-} &&
         cmake --build "$BUILD_DIR" --parallel "$(nproc)"; } > "$LOG_DIR/build.log" 2>&1; then
    echo "gpu_check: the build failed; the end of $LOG_DIR/build.log:" >&2
    grep -E "error|Error|FAILED" "$LOG_DIR/build.log" | head -20 >&2
    tail -30 "$LOG_DIR/build.log" >&2
    exit 1
  fi
  note "built in $(($(date +%s) - start)) s"
  BIN=$(cd "$BUILD_DIR/bin" && pwd)
  STRATA_ENV=(env)
  TEST_BINS=("$BUILD_DIR"/tests/strata_*_gpu_tests)
fi
STRATA=$BIN/strata
"${STRATA_ENV[@]}" "$STRATA" info > "$LOG_DIR/info.txt" 2>&1 || phase_failed "strata info (see info.txt)"

has_phase() { [[ " $PHASES " == *" $1 "* ]]; }

# --- tests: every gpu test must run --------------------------------------------------------------------
if has_phase tests; then
  start=$(date +%s)
  passed=0
  for t in "${TEST_BINS[@]}"; do
    name=$(basename "$t")
    log="$LOG_DIR/test-$name.log"
    # Only the tests read STRATA_REQUIRE_GPU (strata itself ignores it: tools/strata/schema.cc).
    within "${GPU_CHECK_DEADLINE_TESTS:-420}" "$log" "${STRATA_ENV[@]}" STRATA_REQUIRE_GPU=1 "$t" --gtest_brief=1
    rc=$?
    if [ $rc -eq 0 ]; then
      passed=$((passed + 1))
    else
      phase_failed "$name (rc $rc, 124: deadline); see $(basename "$log"):"
      grep -E '^\[  FAILED  \]|Failure|error' "$log" | head -15 | tee -a "$SUMMARY" >&2
    fi
    grep -hE "^\[  PASSED  \]|^\[  SKIPPED \]" "$log" | sed "s/^/  $name /" | tee -a "$SUMMARY"
  done
  note "tests: $passed of ${#TEST_BINS[@]} gpu test binaries passed in $(($(date +%s) - start)) s"
fi

# --- comm: the NCCL communicator at a world of one -------------------------------------------------------
# comm_bench LABEL [launcher...]: strata bench comm on NCCL (comm-bench-LABEL.txt); its all-gather and
# reduce-scatter rows to the summary.
comm_bench() {
  local label=$1
  shift
  local out="$LOG_DIR/comm-bench$label.txt"
  if within "${GPU_CHECK_DEADLINE_COMM:-180}" "$out" "${STRATA_ENV[@]}" "$@" "$STRATA" bench comm --device cuda \
       --comm nccl --size 64KiB,1MiB,16MiB,256MiB,1GiB --repeat 10; then
    note "comm bench${label:+ ($label)}: $(grep '^bench comm:' "$out")"
    grep -E '^(op|all-gather|reduce-scatter) ' "$out" | tee -a "$SUMMARY"
  else
    phase_failed "strata bench comm on NCCL${label:+ ($label)} (rc $?); the end of $(basename "$out"):"
    tail -5 "$out" | tee -a "$SUMMARY" >&2
  fi
}
if has_phase comm; then
  gpu_tests=""
  for t in "${TEST_BINS[@]}"; do [[ $(basename "$t") == strata_runtime_gpu_tests ]] && gpu_tests=$t; done
  log="$LOG_DIR/comm-tests.log"
  if [ -z "$gpu_tests" ]; then
    phase_failed "comm: no strata_runtime_gpu_tests binary"
  elif within "${GPU_CHECK_DEADLINE_COMM:-180}" "$log" "${STRATA_ENV[@]}" STRATA_REQUIRE_GPU=1 "$gpu_tests" \
         --gtest_filter='NcclWorldOfOne.*' --gtest_brief=1; then
    note "comm: $(grep -hE '^\[  PASSED  \]' "$log")"
  else
    phase_failed "comm: the NCCL gpu tests (rc $?); see $(basename "$log"):"
    grep -E '^\[  FAILED  \]|Failure|error' "$log" | head -15 | tee -a "$SUMMARY" >&2
  fi
  comm_bench ""
  # comm_ranks LABEL [launcher...]: comm_mpi_check's collectives on NCCL (comm-ranks-LABEL.log).
  ranks_bin=$BIN/comm_mpi_check  # the kit's; a build's is in its tests folder
  [ -x "$ranks_bin" ] || ranks_bin=${BUILD_DIR:-build-gpu}/tests/comm_mpi_check
  [ -x "$ranks_bin" ] || note "comm: no comm_mpi_check (configured without mpirun?): the ranks check is skipped"
  comm_ranks() {
    local label=$1
    shift
    local log="$LOG_DIR/comm-ranks-$label.log"
    if [ ! -x "$ranks_bin" ]; then
      return
    elif within "${GPU_CHECK_DEADLINE_COMM:-180}" "$log" "${STRATA_ENV[@]}" "$@" "$ranks_bin" collectives cuda; then
      note "comm ranks ($label): $(grep -c 'nccl collectives ok' "$log") rank(s) ok"
    else
      phase_failed "comm ranks ($label) (rc $?); the end of $(basename "$log"):"
      tail -8 "$log" | tee -a "$SUMMARY" >&2
    fi
  }
  comm_ranks one
  # strata train through NCCL at a world of one (--comm nccl: the gradient exchange, the partitioned
  # state, the weights' gather and ZeRO-3's shards) against the same runs without a communicator,
  # figures and checkpoint bytes (comm-train-PRESET.log); its work directory (--nvme-path too) on
  # the offload phase's swap filesystem.
  mkdir -p "${GPU_CHECK_NVME:-$LOG_DIR/swap}"
  for case in gpt2-tiny:fp32 llama-tiny:bf16; do
    log="$LOG_DIR/comm-train-${case%%:*}.log"
    if within "${GPU_CHECK_DEADLINE_COMM:-180}" "$log" "${STRATA_ENV[@]}" TMPDIR="${GPU_CHECK_NVME:-$LOG_DIR/swap}" \
         bash tests/tools/train_solo_exchange_check.sh nccl "${case%%:*}" "${case##*:}" "$STRATA" --device cuda; then
      note "comm train: $(grep '^PASS' "$log")"
    else
      phase_failed "comm train: --comm nccl against no communicator, ${case%%:*} (rc $?); the end of $(basename "$log"):"
      tail -5 "$log" | tee -a "$SUMMARY" >&2
    fi
  done
  if command -v mpirun > /dev/null; then
    mpi_flags=()
    # Open MPI: root in a container, no core binding, the kit's library path to the rank.
    mpirun --version 2>&1 | grep -q "Open MPI" && mpi_flags=(--allow-run-as-root --bind-to none -x LD_LIBRARY_PATH)
    comm_bench "-mpirun" mpirun "${mpi_flags[@]}" -np 1
    comm_ranks mpirun-np1 mpirun "${mpi_flags[@]}" -np 1
    gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
    if [ "$gpus" -ge 2 ]; then
      comm_ranks "mpirun-np$gpus" mpirun "${mpi_flags[@]}" -np "$gpus"
    else
      note "comm: one GPU; NCCL across ranks (one GPU a rank) is not checked"
    fi
  else
    note "comm: no mpirun on this machine; the bench under mpirun -np 1 (NCCL's unique id over MPI) is skipped"
  fi
fi

# --- train: strata beside PyTorch ----------------------------------------------------------------------
# strata_run LABEL PRESET BATCH STEPS [extra flags]: metrics in train-LABEL.jsonl.
strata_run() {
  local label=$1 preset=$2 batch=$3 steps=$4
  shift 4
  local log="$LOG_DIR/train-$label.log"
  if within "${GPU_CHECK_DEADLINE_RUN:-240}" "$log" "${STRATA_ENV[@]}" "$STRATA" train --device cuda --preset "$preset" --dtype bf16 \
       --random-tokens 16M --micro-batch "$batch" --seq 1024 --steps "$steps" --eval-every 0 --log-every 1 \
       --optimizer-device device --metrics "$LOG_DIR/train-$label.jsonl" "$@"; then
    note "strata $label: $(grep -E "step +$steps/$steps" "$log" | tail -1 | sed 's/.*\] //')"
  else
    phase_failed "strata train $label (rc $?); the end of $(basename "$log"):"
    tail -5 "$log" | tee -a "$SUMMARY" >&2
  fi
}
torch_run() {
  local label=$1 preset=$2 batch=$3
  shift 3
  local log="$LOG_DIR/torch-$label.log"
  if within "${GPU_CHECK_DEADLINE_RUN:-240}" "$log" env PYTHONUNBUFFERED=1 "$PYTHON" bench/peers/torch_gpt_train.py \
       --preset "$preset" --micro-batch "$batch" --seq 1024 --steps 20 --warmup 5 --dtype bf16 \
       --peak-tflops 989 "$@"; then
    note "torch $label: $(tail -1 "$log")"
  else
    phase_failed "torch $label (rc $?); the end of $(basename "$log"):"
    tail -5 "$log" | tee -a "$SUMMARY" >&2
  fi
}
if has_phase train; then
  for spec in $MODELS; do
    preset=${spec%%:*} batch=${spec#*:}
    strata_run "$preset-b$batch" "$preset" "$batch" "$STEPS" --peak-tflops 989
    torch_run "$preset-b$batch-eager" "$preset" "$batch"
    if [[ " $COMPILE " == *" $preset "* ]]; then torch_run "$preset-b$batch-compile" "$preset" "$batch" --compile; fi
  done
  # The table: strata's median step over its steps after the 5th, PyTorch's median (its JSON line).
  "$PYTHON" - "$LOG_DIR" $MODELS <<'PY' | tee -a "$SUMMARY"
import json, os, statistics, sys
log_dir, specs = sys.argv[1], sys.argv[2:]
def torch_line(label):
    try:
        with open(os.path.join(log_dir, f"torch-{label}.log")) as f:
            for line in reversed(f.read().splitlines()):
                if line.startswith("{"):
                    return json.loads(line)
    except (OSError, ValueError):
        pass
    return None
print(f"{'run':34} {'step ms':>9} {'tok/s':>10} {'TFLOP/s':>8}  vs eager  vs compile")
for spec in specs:
    preset, batch = spec.split(":")
    label = f"{preset}-b{batch}"
    rows = []
    try:
        with open(os.path.join(log_dir, f"train-{label}.jsonl")) as f:
            rows = [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError):
        pass
    steps = [r for r in rows if "step_s" in r and "tokens_per_s" in r]
    late = steps[5:] or steps
    eager, comp = torch_line(f"{label}-eager"), torch_line(f"{label}-compile")
    if late:
        ms = statistics.median(r["step_s"] for r in late) * 1e3
        tok = statistics.median(r["tokens_per_s"] for r in late)
        tf = statistics.median(r.get("tflops", 0.0) for r in late)
        ratio = lambda peer: f"{tok / peer['tokens_per_s']:8.2f}x" if peer and peer.get("tokens_per_s") else "       -"
        print(f"{'strata ' + label:34} {ms:9.1f} {tok:10.0f} {tf:8.1f}  {ratio(eager)}  {ratio(comp)}")
    else:
        print(f"{'strata ' + label:34} no step rows")
    for name, peer in (("eager", eager), ("compile", comp)):
        if peer:
            print(f"{'torch ' + label + ' ' + name:34} {peer.get('step_s', 0) * 1e3:9.1f} {peer.get('tokens_per_s', 0):10.0f} "
                  f"{peer.get('tflops', 0):8.1f}")
PY
fi

# --- profile: ncu per kernel ----------------------------------------------------------------------------
if has_phase profile; then
  spec=${GPU_CHECK_PROFILE:-gpt2-124m:16}
  preset=${spec%%:*} batch=${spec#*:} psteps=${GPU_CHECK_PROFILE_STEPS:-3}
  ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -z "$ncu_bin" ]; then
    phase_failed "profile: ncu not found"
  elif within "${GPU_CHECK_DEADLINE_PROFILE:-300}" "$LOG_DIR/profile-ncu.log" "${STRATA_ENV[@]}" "$ncu_bin" --clock-control none \
         --metrics gpu__time_duration.sum --csv --page raw --log-file "$LOG_DIR/profile-ncu.csv" \
         "$STRATA" train --device cuda --preset "$preset" --dtype bf16 --random-tokens 16M --micro-batch "$batch" \
         --seq 1024 --steps "$psteps" --eval-every 0 --optimizer-device device; then
    "$PYTHON" - "$LOG_DIR/profile-ncu.csv" "$psteps" <<'PY' > "$LOG_DIR/profile.txt"
import collections, csv, sys
path, steps = sys.argv[1], int(sys.argv[2])
with open(path) as f:
    lines = [l for l in f if l.startswith('"')]
rows = list(csv.reader(lines))
head = rows[0]
name_at, time_at = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
unit = rows[1][time_at] if len(rows) > 1 and not rows[1][time_at].replace(".", "").isdigit() else "nsecond"
scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(unit, 1e-6)
total, count = collections.Counter(), collections.Counter()
for r in rows[1:]:
    try:
        t = float(r[time_at].replace(",", ""))
    except ValueError:
        continue
    total[r[name_at]] += t * scale
    count[r[name_at]] += 1
all_ms = sum(total.values())
print(f"{len(rows) - 1} kernels over {steps} steps (setup kernels included): {all_ms / steps:.2f} ms per step")
print(f"{'ms/step':>9} {'share':>6} {'calls/step':>10}  kernel")
for name, t in total.most_common(40):
    print(f"{t / steps:9.3f} {100 * t / all_ms:5.1f}% {count[name] / steps:10.1f}  {name[:150]}")
PY
    note "profile: $(head -1 "$LOG_DIR/profile.txt"); the slowest:"
    sed -n 3,14p "$LOG_DIR/profile.txt" | tee -a "$SUMMARY"
    if grep -q "align1" "$LOG_DIR/profile.txt"; then note "profile: an align1 GEMM is in the step"; else note "profile: no align1 GEMM"; fi
    # ncu's sections (speed of light, occupancy, warp stalls, memory) for one launch of each kernel
    # a regular expression of GPU_CHECK_NCU_DETAIL matches (demangled names; default: the
    # attention kernels).
    : > "$LOG_DIR/profile-detail.txt"
    set -f  # the patterns are regular expressions, not globs
    for pattern in ${GPU_CHECK_NCU_DETAIL-flash::.*forward_kernel flash::.*dq_kernel flash::.*dkv_kernel}; do
      if within "${GPU_CHECK_DEADLINE_PROFILE:-300}" "$LOG_DIR/profile-detail.log" "${STRATA_ENV[@]}" "$ncu_bin" \
           --clock-control none --kernel-name-base demangled --kernel-name "regex:$pattern" --launch-count 1 \
           --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
           --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
           "$STRATA" train --device cuda --preset "$preset" --dtype bf16 --random-tokens 16M --micro-batch "$batch" \
           --seq 1024 --steps 1 --eval-every 0 --optimizer-device device; then
        grep -v "^\[\|^strata\|^step" "$LOG_DIR/profile-detail.log" >> "$LOG_DIR/profile-detail.txt"
        note "profile: ncu sections of /$pattern/ in profile-detail.txt"
      else
        phase_failed "profile detail /$pattern/ (rc $?); the end of profile-detail.log:"
        tail -5 "$LOG_DIR/profile-detail.log" | tee -a "$SUMMARY" >&2
      fi
    done
    set +f
  else
    phase_failed "profile (rc $?); the end of profile-ncu.log:"
    tail -5 "$LOG_DIR/profile-ncu.log" | tee -a "$SUMMARY" >&2
  fi
fi

# --- calibrate: this machine's rates for the planner ---------------------------------------------------------
if has_phase calibrate; then
  log="$LOG_DIR/calibrate.log"
  mkdir -p "${GPU_CHECK_NVME:-$LOG_DIR/swap}"
  if within "${GPU_CHECK_DEADLINE_RUN:-240}" "$log" "${STRATA_ENV[@]}" "$STRATA" plan --calibrate --device cuda \
       --preset llama-1b --dtype bf16 --nvme-path "${GPU_CHECK_NVME:-$LOG_DIR/swap}"; then
    note "$(grep -m1 -E '\] calibration: ' "$log" | sed 's/.*\] //')"
  else
    phase_failed "calibrate (rc $?); the end of calibrate.log:"
    tail -5 "$log" | tee -a "$SUMMARY" >&2
  fi
fi

# --- offload: paged weights against resident ---------------------------------------------------------------
if has_phase offload; then
  for spec in ${GPU_CHECK_OFFLOAD:-}; do
    preset=${spec%%:*} batch=${spec#*:}
    log="$LOG_DIR/offload-$preset.log"
    if STRATA="$STRATA" DEVICE=cuda RESIDENT_GPU_MEM=auto PRESET="$preset" MB="$batch" SEQ=1024 STEPS=10 \
         SPLIT_GPU_MEM="${GPU_CHECK_OFFLOAD_SPLIT_MEM:-}" NVME_CACHE="${GPU_CHECK_OFFLOAD_CACHE:-}" \
         OUT="$LOG_DIR/offload-$preset" within "${GPU_CHECK_DEADLINE_RUN:-240}" "$log" "${STRATA_ENV[@]}" \
         bench/offload_train_bench.sh "${GPU_CHECK_NVME:-$LOG_DIR/swap}" --random-tokens 16M; then
      note "offload $preset: $(tail -9 "$log" | tr '\n' ' ')"
    else
      phase_failed "offload bench $preset (rc $?); the end of $(basename "$log"):"
      tail -8 "$log" | tee -a "$SUMMARY" >&2
    fi
  done
fi
# --- peer: strata's offload beside DeepSpeed ZeRO-3 offload ----------------------------------------------
# ds_install: DeepSpeed and its dependencies from the wheelhouse, the wheels of this Python only.
ds_install() {
  local wheels=${GPU_CHECK_DS_WHEELS:-$REPO/.kit/wheels} site=$LOG_DIR/ds-site tag
  [ -d "$wheels" ] || { echo "no wheelhouse at $wheels (tools/deepspeed_wheels.sh makes it)"; return 1; }
  tag=$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")') || return 1
  local picked=()
  for w in "$wheels"/*.whl; do
    case $(basename "$w") in
      *-cp3[0-9]*-cp3[0-9]*-*) [[ $(basename "$w") == *"-$tag-"* ]] && picked+=("$w") ;;
      *) picked+=("$w") ;;
    esac
  done
  "$PYTHON" -m pip install --quiet --no-index --no-deps --target "$site" "${picked[@]}" || return 1
  echo "$site"
}
if has_phase peer; then
  log="$LOG_DIR/peer-install.log"
  if ds_install > "$log" 2>&1; then
    site=$(tail -1 "$log")
    for spec in ${GPU_CHECK_PEER:-llama-7b:8}; do
      preset=${spec%%:*} batch=${spec#*:}
      q8=()
      if [ "${GPU_CHECK_PEER_Q8:-1}" = 1 ]; then q8=(--optimizer-type adamw8bit); fi
      slog="$LOG_DIR/peer-strata-$preset.log"
      if within "${GPU_CHECK_DEADLINE_RUN:-240}" "$slog" "${STRATA_ENV[@]}" "$STRATA" train --device cuda \
           --preset "$preset" --dtype bf16 --random-tokens 16M --micro-batch "$batch" --seq 1024 --steps 6 \
           --eval-every 0 --log-every 1 --activation-checkpointing --gpu-mem "${GPU_CHECK_PEER_GPU_MEM:-24GiB}" \
           --offload auto --peak-tflops 989 "${q8[@]}" --bench --metrics "$LOG_DIR/peer-strata-$preset.jsonl"; then
        note "peer strata $preset: $(grep -E 'step +6/6' "$slog" | tail -1 | sed 's/.*\] //')"
        note "peer strata $preset placement: $(grep -m1 -E 'offload auto|device memory' "$slog" | sed 's/.*\] //')"
        note "peer strata $preset $(grep -m1 -E '\] setup: ' "$slog" | sed 's/.*\] //')"
        note "peer strata $preset --bench: $(grep -m1 -E '^bottleneck: ' "$slog")"
        "$PYTHON" - "$LOG_DIR/peer-strata-$preset.jsonl" <<'PY' | tee -a "$SUMMARY"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
p = next((r for r in rows if r.get("prediction")), None)
if p is None:
    print("peer plan: no prediction row")
else:
    print(f"peer plan: measured / predicted step {p.get('step_ratio', float('nan')):.2f} (within 15%: "
          f"{'yes' if abs(p.get('step_ratio', 0) - 1) <= 0.15 else 'no'}), device peak / plan "
          f"{p.get('gpu_ratio', float('nan')):.2f}; rates: {p.get('rate_sources')}")
PY
      else
        phase_failed "peer strata $preset (rc $?); the end of $(basename "$slog"):"
        tail -5 "$slog" | tee -a "$SUMMARY" >&2
      fi
      dlog="$LOG_DIR/peer-deepspeed-$preset.log"
      if within "${GPU_CHECK_DEADLINE_RUN:-240}" "$dlog" env PYTHONPATH="$site" PATH="$site/bin:$PATH" \
           PYTHONUNBUFFERED=1 "$PYTHON" bench/peers/deepspeed_llama_train.py --preset "$preset" \
           --micro-batch "$batch" --seq 1024 --steps 4 --warmup 2 --peak-tflops 989; then
        note "peer deepspeed $preset: $(tail -1 "$dlog")"
      else
        phase_failed "peer deepspeed $preset (rc $?); the end of $(basename "$dlog"):"
        tail -8 "$dlog" | tee -a "$SUMMARY" >&2
      fi
      "$PYTHON" - "$LOG_DIR/peer-strata-$preset.jsonl" "$dlog" <<'PY' | tee -a "$SUMMARY"
import json, statistics, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    tok = statistics.median(r["tokens_per_s"] for r in rows[2:] if "tokens_per_s" in r)
    ds = next(json.loads(l) for l in reversed(open(sys.argv[2]).read().splitlines()) if l.startswith("{"))
    print(f"peer: strata {tok:.0f} tok/s, deepspeed {ds['tokens_per_s']:.0f} tok/s: strata / deepspeed {tok / ds['tokens_per_s']:.2f}x")
except (OSError, ValueError, StopIteration, KeyError, statistics.StatisticsError) as e:
    print(f"peer: no comparison ({type(e).__name__}: {e})")
PY
    done
  else
    phase_failed "peer: DeepSpeed not installed; the end of peer-install.log:"
    tail -5 "$log" | tee -a "$SUMMARY" >&2
  fi
fi
note "gpu_check: done, status $status"
exit $status
