#!/usr/bin/env bash
# py_overhead_cuda.sh — one device call: build the Python package for CUDA (sm_90, head_dim 128
# only, to keep the build short) and measure its per-call host time on CUDA tensors.
set -uo pipefail
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
start=$SECONDS
CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --no-index \
  --disable-pip-version-check --config-settings=cmake.define.FASTATTN_CUDA=ON \
  --config-settings=cmake.define.FASTATTN_CUDA_ARCHS=90 \
  --config-settings=cmake.define.FASTATTN_CUDA_HEAD_DIMS=128 . > "$out/pip.log" 2>&1
echo "pip rc=$? in $((SECONDS - start)) s"
cd /tmp && python3 "$OLDPWD/tools/dev/profile/py_overhead_cuda.py" "$out/py_overhead_cuda.json"
