#!/usr/bin/env bash
# Session 27, first call: on an H200, issue 16's backward bars (call 1 of docs/cuda.md); on an
# H100, the deterministic tests on the final defaults (call 0) with more shapes and tests.
set -u
root=$OUT
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu"; echo "$gpu" > $root/gpu.txt
if [[ "$gpu" == *H200* ]]; then
  OUT=$root/c STAGES="build bench det mem" HEAD_DIMS="64;128" TARGETS="fastattn_gpu_tests fastattn_cuda_bench" \
    DET_ORDERS="" DET_AB=0 PLAN_BULK=0 BUDGET_S=545 bash tools/dev/gpu-sm90-bwd.sh > /dev/null
  tail -40 $root/c/summary.txt
  cd "$root" && tar czf c.tgz c && rm -rf c
else
  OUT=$root/c STAGES="build" HEAD_DIMS="64;128" TARGETS="fastattn_gpu_tests fastattn_cuda_bench" BUDGET_S=200 \
    bash tools/dev/gpu-sm90-bwd.sh > /dev/null
  tail -3 $root/c/summary.txt
  b=build/sm90/bench/cuda/fastattn_cuda_bench
  one() {
    local name=$1 shapes=$2; shift 2
    env FASTATTN_CUDA_BWD_SM90=1 "$@" timeout 40 $b determinism --det-shapes $shapes --runs 3 --warmup 3 \
      --repeats 20 --max-seconds 1 > "$root/$shapes-$name.jsonl" 2>> "$root/err.txt"
    echo "[$SECONDS s] $shapes $name rc=$?"
  }
  for shapes in bar pairs; do
    one default $shapes
    one onegroup $shapes FASTATTN_CUDA_SM90_BWD_ORDER=longest_first
  done
  left=$((560 - SECONDS))
  timeout $left build/sm90/tests/fastattn_gpu_tests --gtest_filter='CudaSm90Backward.DeterministicIsBitwiseRepeatable:CudaSm90Backward.DeterministicOrders*:CudaSm90Backward.UncoveredPathsDeterministic*:CudaSm90Backward.VarlenDeterministic*' \
    > $root/tests.log 2>&1; echo "[$SECONDS s] tests rc=$? (limit ${left}s)"; grep -E "OK \]|FAIL|PASSED" $root/tests.log
  cd "$root" && tar czf c.tgz c *.jsonl err.txt tests.log 2>/dev/null && rm -rf c *.jsonl err.txt tests.log
fi
