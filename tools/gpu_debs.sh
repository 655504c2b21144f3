#!/usr/bin/env bash
# Downloads (does not install) the Debian packages strata builds against, with the runtime libraries
# they need, into a folder (default .debs/, git-ignored), for a GPU machine that has nvcc, cmake and
# a C++ compiler but no package registry: carry the folder there and tools/gpu_check.sh unpacks it
# into a private prefix (never into /). Run on Debian bookworm (or a matching release) with network.
# Usage: tools/gpu_debs.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.debs}
# -dev packages, their runtime libraries, and what those need that a bare CUDA image may lack
# (libudev1 for hwloc, libgfortran5/libquadmath0 for OpenBLAS); pkgconf for the .pc lookups.
packages=(liburing-dev liburing2 libhwloc-dev libhwloc15 libudev1 libnuma-dev libnuma1
          libltdl-dev libltdl7 libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5
          libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libgtest-dev libgmock-dev googletest
          libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0
          libgfortran5 libquadmath0 nlohmann-json3-dev libcli11-dev pkgconf pkgconf-bin libpkgconf3
          libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32)
mkdir -p "$DIR"
if ! command -v apt-get > /dev/null; then
  echo "gpu_debs: apt-get not found: run this on Debian bookworm" >&2
  exit 2
fi
[ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ] || apt-get update -qq
(cd "$DIR" && apt-get download "${packages[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
count=$(find "$DIR" -maxdepth 1 -name '*.deb' | wc -l)
if [ "$count" -lt "${#packages[@]}" ]; then
  echo "gpu_debs: only $count of ${#packages[@]} packages are in $DIR" >&2
  exit 1
fi
echo "gpu_debs: $count packages, $(du -sh "$DIR" | cut -f1), in $DIR"
