#!/usr/bin/env bash
# Checks strata on a machine with an NVIDIA GPU, in one go, keeping every log: builds with the CUDA
# backend for the GPU present, runs every `gpu` test (CUDA kernels and backend against the CPU and
# float64 references, the golden model and trainer on CUDA) with STRATA_REQUIRE_GPU=1, so a test that
# cannot reach the GPU fails instead of skipping, then times `strata train` on gpt2-124m in bf16 on
# random tokens with the optimizer on the CPU and on the device, and runs `strata bench pcie` and
# `strata bench device`. Not a setup script.
#
# Dependencies: the build needs Debian's -dev packages (tools/setup.sh installs them). On a GPU
# machine without a package registry, run tools/gpu_debs.sh on a Debian machine first and bring the
# folder it fills (.debs/): this script unpacks it into a private prefix (DEPS_ROOT, never /) and
# points CMake, pkg-config and the loader at it. What is still missing is named before configuring.
#
# Usage: tools/gpu_check.sh [LOG_DIR]
# Environment: BUILD_DIR (default build-gpu), STRATA_CMAKE_ARGS (extra cmake args), DEBS_DIR (default
# .debs), DEPS_ROOT (default /tmp/strata-deps), GPU_CHECK_STEPS (default 30), GPU_CHECK_BATCH
# (default 16), GPU_CHECK_ONLY (build|tests: stop after that stage), GPU_CHECK_PRESETS (more models
# to time after gpt2-124m, optimizer on the device, 10 steps each: "preset:micro_batch ...", e.g.
# "gpt2-350m:16 gpt2-1.5b:8 llama-1b:8"), GPU_CHECK_OFFLOAD (paged weights against resident, one
# bench/offload_train_bench.sh run per "preset:micro_batch", --gpu-mem a quarter of the weights +
# gradients, 10 steps of 1024 random tokens; default "gpt2-1.5b:4"; "" skips), GPU_CHECK_NVME (a
# directory on an NVMe drive for the nvme-homed run; default LOG_DIR/swap).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
LOG_DIR=${1:-gpu-check-logs}
BUILD_DIR=${BUILD_DIR:-build-gpu}
DEBS_DIR=${DEBS_DIR:-.debs}
DEPS_ROOT=${DEPS_ROOT:-/tmp/strata-deps}
STEPS=${GPU_CHECK_STEPS:-30}
BATCH=${GPU_CHECK_BATCH:-16}
ONLY=${GPU_CHECK_ONLY:-}
mkdir -p "$LOG_DIR"
LOG_DIR=$(cd "$LOG_DIR" && pwd)
status=0

say() { echo "gpu_check: $*"; }
fail() { echo "gpu_check: $*" >&2; exit "${2:-1}"; }

if ! command -v nvidia-smi > /dev/null; then
  fail "nvidia-smi not found: this machine has no NVIDIA driver" 2
fi
nvidia-smi > "$LOG_DIR/nvidia-smi.txt" 2>&1
# The GPU's own architecture (e.g. 90 for an H100/H200) unless the caller chose one.
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), sm_$arch; logs in $LOG_DIR"

# --- dependencies: unpack carried .debs into a private prefix --------------------------------------
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

# --- dependencies: name everything missing before configuring ---------------------------------------
missing=()
need_tool() { command -v "$1" > /dev/null || missing+=("$1 ($2)"); }
need_tool cmake "cmake >= 3.25"
need_tool ninja "ninja"
need_tool c++ "a C++20 compiler, g++ >= 11"
need_tool pkg-config "pkgconf"
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
[ -x "$nvcc" ] || nvcc=$(command -v nvcc || true)
[ -n "$nvcc" ] && [ -x "$nvcc" ] || missing+=("nvcc (the CUDA toolkit; set CUDACXX)")
if command -v pkg-config > /dev/null; then
  for m in liburing:liburing-dev hwloc:libhwloc-dev openblas:libopenblas-dev; do
    pkg-config --exists "${m%%:*}" || missing+=("${m%%:*} (${m#*:})")
  done
fi
# Header-only or CMake-config packages: look for their headers where the compiler will.
inc_dirs=("$DEPS_ROOT/usr/include" /usr/include /usr/local/include)
for h in tbb/tbb.h:libtbb-dev spdlog/spdlog.h:libspdlog-dev fmt/format.h:libfmt-dev \
         nlohmann/json.hpp:nlohmann-json3-dev CLI/CLI.hpp:libcli11-dev gtest/gtest.h:libgtest-dev \
         gmock/gmock.h:libgmock-dev; do
  found=0
  for d in "${inc_dirs[@]}"; do [ -f "$d/${h%%:*}" ] && found=1; done
  [ $found = 1 ] || missing+=("${h%%:*} (${h#*:})")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu_check: the build cannot start; missing:" >&2
  printf '  %s\n' "${missing[@]}" >&2
  echo "  On Debian: tools/setup.sh. Without a package registry: run tools/gpu_debs.sh on a Debian" >&2
  echo "  bookworm machine and bring its .debs/ folder here (DEBS_DIR names another)." >&2
  exit 2
fi
{ c++ --version | head -1; cmake --version | head -1; "$nvcc" --version | tail -2; } > "$LOG_DIR/toolchain.txt" 2>&1

# --- build ------------------------------------------------------------------------------------------
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
say "built in $(($(date +%s) - start)) s"
"$BUILD_DIR/bin/strata" info > "$LOG_DIR/info.txt" 2>&1
[ "$ONLY" = build ] && exit 0

# --- gpu tests: every one must run --------------------------------------------------------------------
start=$(date +%s)
# Only the tests see STRATA_REQUIRE_GPU: strata itself refuses STRATA_* variables that are not config keys.
if STRATA_REQUIRE_GPU=1 ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure --parallel 4 > "$LOG_DIR/gpu-tests.log" 2>&1; then
  say "gpu tests: $(grep -E 'tests passed' "$LOG_DIR/gpu-tests.log") in $(($(date +%s) - start)) s"
else
  status=1
  echo "gpu_check: gpu tests FAILED: $(grep -E 'tests passed|tests failed' "$LOG_DIR/gpu-tests.log")" >&2
  grep -E '^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)' "$LOG_DIR/gpu-tests.log" | head -40 >&2
fi
if grep -q "The following tests did not run" "$LOG_DIR/gpu-tests.log"; then
  status=1
  echo "gpu_check: some gpu tests did not run (skipped):" >&2
  sed -n '/The following tests did not run/,/^$/p' "$LOG_DIR/gpu-tests.log" | head -20 >&2
fi
# The measured errors the golden and conformance tests print, for the notes.
grep -hE "worst|error" "$LOG_DIR/gpu-tests.log" | grep -v "^\[" > "$LOG_DIR/gpu-test-errors.txt" || true
[ "$ONLY" = tests ] && for spec in ${GPU_CHECK_PRESETS:-}; do
  preset=${spec%%:*} batch=${spec#*:}
  log="$LOG_DIR/train-$preset-bf16-b$batch.log"
  if "$BUILD_DIR/bin/strata" train --device cuda --preset "$preset" --dtype bf16 --random-tokens 16M \
       --micro-batch "$batch" --seq 1024 --steps 10 --eval-every 0 --optimizer-device device > "$log" 2>&1; then
    say "$preset bf16 B=$batch: $(grep -E "step +10/10" "$log" | sed 's/.*\] //')"
  else
    status=1
    echo "gpu_check: strata train $preset failed; the end of $log:" >&2
    tail -5 "$log" >&2
  fi
done
exit $status

# --- benchmarks ---------------------------------------------------------------------------------------
for b in pcie device; do
  if "$BUILD_DIR/bin/strata" bench --help 2>&1 | grep -qE "^ +$b( |$)"; then
    if "$BUILD_DIR/bin/strata" bench "$b" --json "$LOG_DIR/bench-$b.json" > "$LOG_DIR/bench-$b.log" 2>&1; then
      say "bench $b: see $LOG_DIR/bench-$b.log"
    else
      status=1
      echo "gpu_check: strata bench $b failed; the end of its log:" >&2
      tail -5 "$LOG_DIR/bench-$b.log" >&2
    fi
  fi
done

# Times `strata train` on random tokens in bf16: train_run LABEL LOG_SUFFIX STEPS ARGS...
train_run() {
  local label=$1 suffix=$2 steps=$3
  shift 3
  local log="$LOG_DIR/train-$suffix.log"
  if "$BUILD_DIR/bin/strata" train --device cuda --dtype bf16 --random-tokens 16M --seq 1024 --steps "$steps" \
       --eval-every 0 --metrics "$LOG_DIR/train-$suffix.jsonl" "$@" > "$log" 2>&1; then
    say "$label: $(grep -E "step +$steps/$steps" "$log" | sed 's/.*\] //')"
  else
    status=1
    echo "gpu_check: strata train ($label) failed; the end of $log:" >&2
    tail -5 "$log" >&2
  fi
}
for placement in cpu device; do
  train_run "gpt2-124m bf16, optimizer on the $placement" "gpt2-124m-bf16-$placement" "$STEPS" \
    --preset gpt2-124m --micro-batch "$BATCH" --optimizer-device "$placement"
done
for spec in ${GPU_CHECK_PRESETS:-}; do
  preset=${spec%%:*} batch=${spec#*:}
  train_run "$preset bf16 B=$batch" "$preset-bf16-b$batch" 10 --preset "$preset" --micro-batch "$batch" \
    --optimizer-device device
done
# Paged weights (--offload-param cpu|nvme) 4x over the device budget, beside the same model resident.
for spec in ${GPU_CHECK_OFFLOAD-gpt2-1.5b:4}; do
  preset=${spec%%:*} batch=${spec#*:}
  log="$LOG_DIR/offload-$preset.log"
  if STRATA="$BUILD_DIR/bin/strata" DEVICE=cuda RESIDENT_GPU_MEM=auto PRESET="$preset" MB="$batch" SEQ=1024 \
       STEPS=10 OUT="$LOG_DIR/offload-$preset" bench/offload_train_bench.sh "${GPU_CHECK_NVME:-$LOG_DIR/swap}" \
       --random-tokens 16M > "$log" 2>&1; then
    say "offload $preset: $(tail -5 "$log" | tr '\n' ' ')"
  else
    status=1
    echo "gpu_check: the offload bench ($preset) failed; the end of $log:" >&2
    tail -8 "$log" >&2
  fi
done
exit $status
