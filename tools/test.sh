#!/usr/bin/env bash
# Builds strata if needed, then runs every test through CTest. Tests labelled `gpu` skip with
# the reason when no GPU is visible. Extra arguments go to ctest (e.g. -L gpu, -R Config).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # shellcheck disable=SC2086
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${STRATA_CMAKE_ARGS:-}
fi
cmake --build "$BUILD_DIR" --parallel "$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure --parallel "$(nproc)" "$@"
