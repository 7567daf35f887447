#!/usr/bin/env bash
# Twenty-sixth session, call 4: deterministic backward in groups of (batch, KV head) pairs
# (FASTATTN_CUDA_SM90_BWD_ORDER=grouped, now applying to deterministic calls), writer fences off
# by default. Bar shapes and --det-shapes pairs, alternating configs, 2 rounds; then the
# deterministic orders test (grouped added).
set -u
root=$OUT
OUT=$root/c STAGES="build" HEAD_DIMS="64;128" TARGETS="fastattn_gpu_tests fastattn_cuda_bench" BUDGET_S=200 \
  bash tools/dev/gpu-sm90-bwd.sh > /dev/null
tail -3 $root/c/summary.txt
b=build/sm90/bench/cuda/fastattn_cuda_bench
one() {  # name shapes env...
  local name=$1 shapes=$2; shift 2
  env FASTATTN_CUDA_BWD_SM90=1 "$@" timeout 60 $b determinism --det-shapes $shapes --runs 3 --warmup 3 \
    --repeats 20 --max-seconds 1 > "$root/$shapes-$name-r$r.jsonl" 2>> "$root/err.txt"
  echo "[$SECONDS s] $shapes $name r$r rc=$?"
}
for r in 1 2; do
  for shapes in bar pairs; do
    one base $shapes
    one g4 $shapes FASTATTN_CUDA_SM90_BWD_ORDER=grouped FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS=4
    one g8 $shapes FASTATTN_CUDA_SM90_BWD_ORDER=grouped FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS=8
    one g16 $shapes FASTATTN_CUDA_SM90_BWD_ORDER=grouped FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS=16
    [ $r = 1 ] && one bulk $shapes FASTATTN_CUDA_SM90_BWD_DQ=bulk
  done
done
timeout 150 build/sm90/tests/fastattn_gpu_tests --gtest_filter='CudaSm90Backward.DeterministicOrdersMatchFloat64AndRepeat' \
  > $root/tests.log 2>&1; echo "tests rc=$?"; grep -E "OK|FAIL|PASSED" $root/tests.log
cd "$root" && tar czf c.tgz c *.jsonl err.txt tests.log 2>/dev/null && rm -rf c *.jsonl err.txt tests.log
