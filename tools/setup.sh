#!/usr/bin/env bash
# Installs strata's build dependencies from Debian's packages, configures and builds the `strata`
# binary (only it: the test binaries are built by tools/test.sh, so `tools/setup.sh && build/bin/strata
# train` trains within minutes). Idempotent and non-interactive: a second run only rebuilds what
# changed. Run as root (or with sudo available). Environment: BUILD_DIR (default build),
# STRATA_CMAKE_ARGS (extra cmake args).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

packages=(build-essential cmake ninja-build pkg-config git
          liburing-dev libhwloc-dev libtbb-dev libspdlog-dev libfmt-dev
          libgtest-dev libgmock-dev libopenblas-dev nlohmann-json3-dev libcli11-dev
          libprotobuf-dev protobuf-compiler
          openmpi-bin libopenmpi-dev  # MPI: the Communicator and the mpirun tests (label mpi)
          fio gnuplot-nox python3
          clang libclang-rt-14-dev)  # clang + libFuzzer: tools/test.sh's fuzz stage
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit found at /usr/local/cuda: building the CUDA backend"
else
  echo "setup: no CUDA toolkit at /usr/local/cuda: building the CPU backend only"
fi

if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # shellcheck disable=SC2086
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${STRATA_CMAKE_ARGS:-}
fi
cmake --build "$BUILD_DIR" --parallel "$(nproc)" --target strata
echo "setup: built $BUILD_DIR/bin/strata (tools/test.sh builds the tests)"
