#!/usr/bin/env bash
# Checks strata on a machine with an NVIDIA GPU, in one go, keeping every log: builds with the CUDA
# backend for the GPU present, runs the `gpu` tests (CUDA kernels and backend against the CPU and
# float64 references, the golden model and trainer on CUDA), then times `strata train` on
# gpt2-124m in bf16 on random tokens with the optimizer on the CPU and on the device, printing
# tokens/s and MFU. Not a setup script: the build dependencies must be there (tools/setup.sh
# installs them on Debian; elsewhere point CMAKE_PREFIX_PATH at them).
# Usage: tools/gpu_check.sh [LOG_DIR]   Environment: BUILD_DIR (default build-gpu),
# STRATA_CMAKE_ARGS (extra cmake args), GPU_CHECK_STEPS (default 30), GPU_CHECK_BATCH (default 16).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
LOG_DIR=${1:-gpu-check-logs}
BUILD_DIR=${BUILD_DIR:-build-gpu}
STEPS=${GPU_CHECK_STEPS:-30}
BATCH=${GPU_CHECK_BATCH:-16}
mkdir -p "$LOG_DIR"
status=0

if ! command -v nvidia-smi > /dev/null; then
  echo "gpu_check: nvidia-smi not found: this machine has no NVIDIA driver" >&2
  exit 2
fi
nvidia-smi > "$LOG_DIR/nvidia-smi.txt" 2>&1
# The GPU's own architecture (e.g. 90 for an H100/H200) unless the caller chose one.
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')
echo "gpu_check: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), sm_$arch; logs in $LOG_DIR"

# shellcheck disable=SC2086
if ! { cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON \
         -DCMAKE_CUDA_ARCHITECTURES="$arch" ${STRATA_CMAKE_ARGS:-} &&
       cmake --build "$BUILD_DIR" --parallel "$(nproc)"; } > "$LOG_DIR/build.log" 2>&1; then
  echo "gpu_check: the build failed; the end of $LOG_DIR/build.log:" >&2
  tail -30 "$LOG_DIR/build.log" >&2
  exit 1
fi
"$BUILD_DIR/bin/strata" info > "$LOG_DIR/info.txt" 2>&1

if ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure --parallel 4 > "$LOG_DIR/gpu-tests.log" 2>&1; then
  echo "gpu_check: gpu tests: $(grep -E 'tests passed' "$LOG_DIR/gpu-tests.log")"
else
  status=1
  echo "gpu_check: gpu tests FAILED: $(grep -E 'tests passed|tests failed' "$LOG_DIR/gpu-tests.log")" >&2
  grep -E '^\s+[0-9]+ - .*\(Failed\)' "$LOG_DIR/gpu-tests.log" >&2
fi
# The measured errors the golden and conformance tests print, for the notes.
grep -hE "worst|error" "$LOG_DIR/gpu-tests.log" | grep -v "^\[" > "$LOG_DIR/gpu-test-errors.txt" || true

for placement in cpu device; do
  log="$LOG_DIR/train-gpt2-124m-bf16-$placement.log"
  if "$BUILD_DIR/bin/strata" train --device cuda --preset gpt2-124m --dtype bf16 --random-tokens 16M \
       --micro-batch "$BATCH" --seq 1024 --steps "$STEPS" --eval-every 0 --optimizer-device "$placement" \
       --metrics "$LOG_DIR/train-gpt2-124m-bf16-$placement.jsonl" > "$log" 2>&1; then
    echo "gpu_check: gpt2-124m bf16, optimizer on the $placement: $(grep -E "step +$STEPS/$STEPS" "$log" | sed 's/.*\] //')"
  else
    status=1
    echo "gpu_check: strata train (optimizer on the $placement) failed; the end of $log:" >&2
    tail -5 "$log" >&2
  fi
done
exit $status
