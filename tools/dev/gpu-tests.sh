#!/usr/bin/env bash
# gpu-tests.sh — our GPU job for the test suites, in one device call (10 minutes at most): build
# the GoogleTest suites, the CLI and the CUDA benchmark there (CUDA archs of the GPU, head dims
# 64;128), run every ctest entry of label gpu, `fastattn check` of the CUDA forward and backward,
# the Python package's tests on CUDA tensors, and the decode benchmark beside PyTorch SDPA.
#
# Device call, after `mkdir -p build/debs && (cd build/debs && apt-get download libcli11-dev
#   libfmt-dev libfmt9 nlohmann-json3-dev libopenblas-dev libopenblas0-pthread
#   libopenblas-pthread-dev libgtest-dev libgmock-dev)` here:
#     carry ["build/debs"], command "bash tools/dev/gpu-tests.sh"
#
# Environment: STAGES (default "build ctest check python decode"), GTEST_FILTER (the ctest stage
# runs only these GPU tests), HEAD_DIMS (default 64;128),
# PYTHON (default /opt/torch/.venv/bin/python3 when it exists), BUDGET_S (default 570).
# $OUT gets: summary.txt (the stages' status last), ctest-gpu.log, check.log, python.log,
# decode.jsonl (fastattn and SDPA rows), build.log.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
exec > >(tee -a "$out/summary.txt") 2>&1
stages=${STAGES:-"build ctest check python decode"}
head_dims=${HEAD_DIMS:-"64;128"}
budget=${BUDGET_S:-570}
if [ -z "${PYTHON:-}" ] && [ -x /opt/torch/.venv/bin/python3 ]; then PYTHON=/opt/torch/.venv/bin/python3; fi
python=${PYTHON:-python3}
command -v cmake >/dev/null || PATH=$PATH:$(dirname "$python")
export PATH PYTHON=$python
build=$root/build/gpu-tests
t0=$SECONDS
status=()
RUN_RESERVE_S=10 RUN_MIN_S=20  # run(): keep 10 s in hand, skip a step under 20 s
. "$root/tools/dev/lib.sh"  # has, note, run, load_deps_env

FASTATTN_OFFLINE_DEBS=$root/build/debs bash tools/scripts/setup.sh >/dev/null
load_deps_env
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader

# The Python package builds in the background while the C++ suites build and run.
pybuild() {
  "$python" -m pip install --no-build-isolation --no-deps --quiet --disable-pip-version-check \
    -Ccmake.define.FASTATTN_CUDA=ON "-Ccmake.define.FASTATTN_CUDA_HEAD_DIMS=$head_dims" \
    -Cbuild-dir=build/gpu-python . > "$out/python.log" 2>&1
}
if has python; then
  CMAKE_BUILD_PARALLEL_LEVEL=6 pybuild &
  pybuild_pid=$!
fi

if has build; then
  run build 300 bash -c "cmake -S . -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release -DFASTATTN_WERROR=ON \
      -DFASTATTN_CUDA=ON '-DFASTATTN_CUDA_HEAD_DIMS=$head_dims' > '$out/build.log' 2>&1 &&
    cmake --build '$build' -j 12 --target fastattn_tests fastattn_gpu_tests fastattn_cli \
      fastattn_cuda_bench >> '$out/build.log' 2>&1"
  tail -3 "$out/build.log"
fi
if has ctest; then
  if [ -n "${GTEST_FILTER:-}" ]; then  # a re-run of chosen tests instead of every gpu entry
    run ctest 240 bash -c "'$build/tests/fastattn_gpu_tests' '--gtest_filter=$GTEST_FILTER' > '$out/ctest-gpu.log' 2>&1"
  else
    run ctest 240 bash -c "cd '$build' && ctest -L gpu -j 1 --output-on-failure > '$out/ctest-gpu.log' 2>&1"
  fi
  tail -25 "$out/ctest-gpu.log"
fi
if has check; then
  run check 90 bash -c "'$build/tools/cli/fastattn' check --quick --backend cuda > '$out/check.log' 2>&1 &&
    '$build/tools/cli/fastattn' check --quick --backend cuda --backward-only >> '$out/check.log' 2>&1"
  grep -E "passed|failed|FAIL|checked" "$out/check.log" | tail -6
fi
if has python; then
  note "== waiting for the Python build"
  wait "$pybuild_pid"
  echo "python build rc=$?"
  "$python" -c "import fastattn; print('python build_info cuda_devices:', fastattn.build_info()['cuda_devices'])"
  run python 150 bash -c "PYTHONUNBUFFERED=1 '$python' -m pytest -q -ra -p no:cacheprovider \
      tests/python/test_import_side_effects.py tests/python/test_merge_states.py \
      tests/python/test_torch.py tests/python/test_memory_cap.py tests/python/test_cuda_compare.py \
      tests/python/test_kv_cache.py \
      >> '$out/python.log' 2>&1"
  tail -15 "$out/python.log"
fi
if has decode; then
  run decode 150 bash -c "'$build/bench/cuda/fastattn_cuda_bench' decode > '$out/decode.jsonl' 2>/dev/null;
    '$python' bench/cuda/sdpa_anchor.py decode --backends flash,cudnn --no-gemm >> '$out/decode.jsonl' 2>/dev/null"
  "$python" bench/render_decode.py "$out/decode.jsonl" --json "$out/cuda_decode.json"
fi
echo
echo "== stages"
printf '%s\n' "${status[@]}"
