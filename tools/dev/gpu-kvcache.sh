#!/usr/bin/env bash
# gpu-kvcache.sh — the CUDA KV-cache kernel's GPU job (issue 17): its GPU tests, then the decode
# benchmark beside PyTorch SDPA (cuDNN, flash) in the same job.
#
# Final merged call (at most 230 s, about 3 minutes expected), from carried sm_90 binaries (tools/dev/build-carry.sh puts
# fastattn_gpu_tests and fastattn_kv_cache_bench in build/carry):
#   BIN_DIR=<abs path of build/carry> STAGES="test bench anchor" bash tools/dev/gpu-kvcache.sh
# Without BIN_DIR the build stage builds them on the device (cmake, 16 cores, ~150 s).
# (A/B of kernel variants or env settings: tools/dev/gpu-kv-ab.sh.)
# Environment: STAGES (default "build test bench anchor"; also bench2 sanitize ncu), BIN_DIR,
# GTEST_FILTER (KV-cache suites), GTEST_FILTER2 (forward() suites), HEAD_DIMS (64;128),
# TEST_S / TEST2_S (the test steps' caps, 70 / 50 s), BENCH_MODES (decode combine paged host), ANCHOR_MODES (kv_decode; also kv_multitoken), MAX_SECONDS (per row, 0.2), BUDGET_S (230; the stages'
# caps: test 70 + test_forward 50 + bench 50 + anchor 45 s).
# $OUT: summary.txt, build.log, tests.log, kv.jsonl (fastattn + SDPA rows), kv_decode.json, kv.md.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
exec > >(tee -a "$out/summary.txt") 2>&1
stages=${STAGES:-"build test bench anchor"}
head_dims=${HEAD_DIMS:-"64;128"}
budget=${BUDGET_S:-230}
filter=${GTEST_FILTER:-"CudaKVCache*:CudaMergeStates*"}
filter2=${GTEST_FILTER2:-"CudaBackend.*:CudaForwardPath*:CudaHardening.*:CudaMemoryCap.*"}  # forward(): its decode route runs the KV-cache kernel
modes=${BENCH_MODES:-"decode combine paged host"}
max_seconds=${MAX_SECONDS:-0.2}
python=${PYTHON:-/opt/torch/.venv/bin/python3}
[ -x "$python" ] || python=python3
command -v cmake >/dev/null || PATH=$PATH:$(dirname "$python")
build=$root/build/gpu-kv
tests_bin=$build/tests/fastattn_gpu_tests
bench_bin=$build/bench/cuda/fastattn_kv_cache_bench
if [ -n "${BIN_DIR:-}" ]; then  # carried binaries: no build here
  tests_bin=$BIN_DIR/fastattn_gpu_tests
  bench_bin=$BIN_DIR/fastattn_kv_cache_bench
  stages=${stages//build/}
fi
t0=$SECONDS
status=()
. "$root/tools/dev/lib.sh"  # has, note, run, load_deps_env

# The build's tools (cmake, ninja; from build/debs offline): only when building here.
has build && FASTATTN_OFFLINE_DEBS=$root/build/debs bash tools/scripts/setup.sh >/dev/null 2>&1
load_deps_env
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv,noheader

if has build; then
  run build 150 bash -c "cmake -S . -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release -DFASTATTN_WERROR=ON \
      -DFASTATTN_CUDA=ON -DFASTATTN_CUDA_ARCHS=90 '-DFASTATTN_CUDA_HEAD_DIMS=$head_dims' -DFASTATTN_BUILD_CLI=OFF \
      > '$out/build.log' 2>&1 && cmake --build '$build' -j 16 --target fastattn_gpu_tests fastattn_kv_cache_bench \
      >> '$out/build.log' 2>&1"
  grep -E "error|warning" "$out/build.log" | head -20
  tail -2 "$out/build.log"
fi
if has test; then
  run test ${TEST_S:-70} bash -c "'$tests_bin' --gtest_brief=1 '--gtest_filter=$filter' > '$out/tests.log' 2>&1"
  tail -40 "$out/tests.log" | cut -c1-1500
  run test_forward ${TEST2_S:-50} bash -c "'$tests_bin' --gtest_brief=1 '--gtest_filter=$filter2' > '$out/tests_forward.log' 2>&1"
  tail -20 "$out/tests_forward.log" | cut -c1-1500
fi
if has bench; then
  # shellcheck disable=SC2086
  run bench ${BENCH_S:-50} bash -c "'$bench_bin' $modes --max-seconds $max_seconds > '$out/kv.jsonl' 2> '$out/bench.err'"
  tail -3 "$out/bench.err"
fi
if has anchor; then
  run anchor ${ANCHOR_S:-45} bash -c "PYTHONUNBUFFERED=1 '$python' bench/cuda/sdpa_anchor.py ${ANCHOR_MODES:-kv_decode} --backends cudnn,flash \
      --no-gemm --max-seconds $max_seconds --warm-ms 30 >> '$out/kv.jsonl' 2> '$out/anchor.err'"
  tail -3 "$out/anchor.err"
fi
if has bench2; then  # the decode rows again after the anchors: the run-to-run spread
  run bench2 40 bash -c "'$bench_bin' decode2 --max-seconds $max_seconds >> '$out/kv.jsonl' 2>> '$out/bench.err'"
fi
if has sanitize; then
  # SANITIZE_FILTER: the suites under memcheck (default: forced splits, the fused combine, graph
  # replay, and the planner's chosen cases: paged split counts among them); SANITIZE_S its cap.
  run sanitize ${SANITIZE_S:-60} bash -c "compute-sanitizer --tool memcheck --error-exitcode 9 '$tests_bin' \
      --gtest_brief=1 '--gtest_filter=${SANITIZE_FILTER:-CudaKVCacheKernel.*}' > '$out/sanitize.log' 2>&1"
  tail -5 "$out/sanitize.log"
fi
if has ncu; then
  # DRAM bytes of one decode call (b16 kv 32k GQA 32/8: K+V = 2147483648 bytes) against its K+V bytes.
  run ncu 40 bash -c "ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum \
      -k regex:kv_cache_attention -c 1 '$bench_bin' one --max-seconds 0.05 \
      > '$out/ncu.log' 2>&1"
  grep -E "dram__bytes|kv_cache_attention|ERR" "$out/ncu.log" | head -6
  # Every kernel of a few forward() calls on b1 kv 128k GQA 64/8 and their times (past the fills
  # and the first warm-up calls).
  run ncu_gqa8 40 bash -c "ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 6 -c 8 \
      '$bench_bin' one_gqa8 --max-seconds 0.05 > '$out/ncu_gqa8.log' 2>&1"
  grep -E "^  [a-zA-Z_]|gpu__time_duration|ERR" "$out/ncu_gqa8.log" | head -24
  # The same on b1 kv 32k GQA 32/8: the kernel's own time against the events' (the call's fixed cost).
  run ncu_b1 40 bash -c "ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum -k regex:kv_cache --launch-skip 6 -c 6 \
      '$bench_bin' one_b1 --max-seconds 0.05 > '$out/ncu_b1.log' 2>&1"
  grep -E "^  [a-zA-Z_]|gpu__time_duration|dram__bytes|ERR" "$out/ncu_b1.log" | head -30
fi
if [ -f "$out/kv.jsonl" ]; then
  python3 bench/render_kv_decode.py "$out/kv.jsonl" --json "$out/kv_decode.json" > "$out/kv.md" 2>&1 || "$python" bench/render_kv_decode.py "$out/kv.jsonl" --json "$out/kv_decode.json" > "$out/kv.md"
  cat "$out/kv.md"
fi
echo
echo "== stages"
printf '%s\n' "${status[@]}"
