#!/usr/bin/env bash
# gpu-kv-ab.sh — A/B of KV-cache kernel variants in one device call: each of VARIANTS
# ("name:extra CMAKE_CUDA_FLAGS", flags may be empty) is built (sm_90, HEAD_DIMS, the KV bench
# and the GPU tests) in build/ab-<name>; then ROUNDS rounds, each running every variant under
# every AB_SETTINGS entry ("name" or "name=ENV=value") with the bench modes AB_MODES, so the
# variants interleave in time; then the SDPA anchors (ANCHOR_MODES) once, and the KV-cache tests
# of every variant (TEST_VARIANTS, default all) under TEST_ENV, and compute-sanitizer runs
# (SANITIZE_RUNS "tool:filter ...", on SANITIZE_VARIANT's tests).
#   mkdir -p build && VARIANTS="base: trial:-DSOME_KERNEL_SWITCH=1" AB_SETTINGS="pdl plain=FASTATTN_CUDA_KV_PDL=0" \
#     bash tools/dev/gpu-kv-ab.sh
# Carry ["build/debs"]. $OUT: summary.txt and ab.tar.gz (a call brings back at most 8 files) of
# build-<name>.log, <variant>.<setting>.r<k>.jsonl, anchor.jsonl, tests-<variant>.log, sanitize.log.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
top=${OUT:-/tmp/fastattn_out}
out=$top/ab
mkdir -p "$out"
exec > >(tee -a "$top/summary.txt") 2>&1
budget=${BUDGET_S:-540}
head_dims=${HEAD_DIMS:-128}
variants=${VARIANTS:-"base:"}
settings=${AB_SETTINGS:-plain}
modes=${AB_MODES:-"decode graph"}
rounds=${ROUNDS:-2}
max_seconds=${MAX_SECONDS:-0.2}
python=${PYTHON:-/opt/torch/.venv/bin/python3}
[ -x "$python" ] || python=python3
command -v cmake >/dev/null || PATH=$PATH:$(dirname "$python")
export PATH LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
t0=$SECONDS
status=()
. "$root/tools/dev/lib.sh"  # has, note, run, device_tools
device_tools

for v in $variants; do
  name=${v%%:*} flags=${v#*:}
  run "build_$name" ${BUILD_S:-150} bash -c "cmake -S . -B 'build/ab-$name' -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DFASTATTN_WERROR=ON -DFASTATTN_CUDA=ON -DFASTATTN_CUDA_ARCHS=90 '-DFASTATTN_CUDA_HEAD_DIMS=$head_dims' \
      -DFASTATTN_BUILD_CLI=OFF '-DCMAKE_CUDA_FLAGS=$flags' > '$out/build-$name.log' 2>&1 && \
      cmake --build 'build/ab-$name' -j 16 --target fastattn_kv_cache_bench fastattn_gpu_tests >> '$out/build-$name.log' 2>&1"
  tail -1 "$out/build-$name.log"
done
for ((r = 1; r <= rounds; ++r)); do
  for v in $variants; do
    name=${v%%:*}
    for setting in $settings; do
      sname=${setting%%=*}
      assign=$([ "$setting" = "$sname" ] && echo "" || echo "${setting#*=}")
      # shellcheck disable=SC2086
      run "$name.$sname.r$r" ${AB_S:-40} bash -c "env $assign 'build/ab-$name/bench/cuda/fastattn_kv_cache_bench' $modes \
          --max-seconds $max_seconds > '$out/$name.$sname.r$r.jsonl' 2>> '$out/bench.err'"
    done
  done
done
run anchor ${ANCHOR_S:-60} bash -c "PYTHONUNBUFFERED=1 '$python' bench/cuda/sdpa_anchor.py ${ANCHOR_MODES:-kv_decode kv_decode_graph} \
    --backends cudnn,flash --no-gemm --max-seconds $max_seconds --warm-ms 30 > '$out/anchor.jsonl' 2> '$out/anchor.err'"
for v in ${TEST_VARIANTS:-$variants}; do
  name=${v%%:*}
  run "tests_$name" ${TEST_S:-70} bash -c "env ${TEST_ENV:-} 'build/ab-$name/tests/fastattn_gpu_tests' --gtest_brief=1 \
      '--gtest_filter=${GTEST_FILTER:-CudaKVCache*:CudaMergeStates*:CudaBackend.*Decode*}' > '$out/tests-$name.log' 2>&1"
  tail -3 "$out/tests-$name.log"
done
# SANITIZE_RUNS: "tool:gtest-filter ..." under compute-sanitizer, with SANITIZE_VARIANT's tests.
k=0
for item in ${SANITIZE_RUNS:-}; do
  k=$((k + 1))
  tool=${item%%:*} filter=${item#*:}
  run "sanitize_$k" ${SANITIZE_S:-60} bash -c "env ${TEST_ENV:-} compute-sanitizer --tool $tool --error-exitcode 9 \
      'build/ab-${SANITIZE_VARIANT:-base}/tests/fastattn_gpu_tests' --gtest_brief=1 '--gtest_filter=$filter' \
      > '$out/sanitize-$k-$tool.log' 2>&1"
  tail -2 "$out/sanitize-$k-$tool.log"
done
echo "== stages"
printf '%s\n' "${status[@]}"
tar -czf "$top/ab.tar.gz" -C "$top" ab && rm -rf "$out"
