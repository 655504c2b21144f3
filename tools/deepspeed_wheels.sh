#!/usr/bin/env bash
# Builds the wheelhouse gpu_check.sh's peer phase installs DeepSpeed from on a GPU machine with no
# package registry: deepspeed built here with DS_BUILD_OPS=0 (its ops, cpu_adam among them, compile
# there on first use, about a minute), and its dependencies other than torch and numpy (which the
# GPU machine's PyTorch brings) as binary wheels for CPython 3.10-3.13 on x86-64 Linux, since the
# GPU machine's Python version is not known here.
#   tools/deepspeed_wheels.sh DIR [DEEPSPEED_SPEC]   (default DIR .kit/wheels, spec deepspeed)
# Needs pip and PyPI; about 14 MB. Carry DIR to the GPU machine (the device tool's carry list).
set -euo pipefail
dir=${1:-.kit/wheels}
spec=${2:-deepspeed}
mkdir -p "$dir"
DS_BUILD_OPS=0 pip wheel --quiet --no-deps --wheel-dir "$dir" "$spec"
deps=(einops hjson msgpack ninja psutil py-cpuinfo "pydantic>=2" packaging tqdm)
for v in 3.10 3.11 3.12 3.13; do
  pip download --quiet --only-binary=:all: --python-version "$v" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --dest "$dir" "${deps[@]}"
done
echo "deepspeed_wheels: $(ls "$dir" | wc -l) wheels, $(du -sh "$dir" | cut -f1), in $dir"
