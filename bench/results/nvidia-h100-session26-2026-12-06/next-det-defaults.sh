#!/usr/bin/env bash
# Written in the twenty-sixth session, not run (its starts found no machine): deterministic calls
# of more than 4 pairs in groups of 4 by default, on the defaults of the session's last commit.
# carry ["build/debs"]; command `LIMIT_S=300 OUT=$OUT bash bench/results/nvidia-h100-session26-2026-12-06/next-det-defaults.sh`.
# With more time, add the pairs shapes (`for shapes in bar pairs`) and the rest of the
# deterministic tests (UncoveredPathsDeterministic, VarlenDeterministic*, SmallShapes*).
# Build; cuda_bench determinism (bar shapes) default vs FASTATTN_CUDA_SM90_BWD_ORDER=longest_first
# (one group, the order before), one round; then the deterministic tests on the defaults, in
# what is left of LIMIT_S.
set -u
root=$OUT
limit=${LIMIT_S:-300}
OUT=$root/c STAGES="build" HEAD_DIMS="64;128" TARGETS="fastattn_gpu_tests fastattn_cuda_bench" BUDGET_S=200 \
  bash tools/dev/gpu-sm90-bwd.sh > /dev/null
tail -3 $root/c/summary.txt
b=build/sm90/bench/cuda/fastattn_cuda_bench
one() {  # name shapes env...
  local name=$1 shapes=$2; shift 2
  env FASTATTN_CUDA_BWD_SM90=1 "$@" timeout 40 $b determinism --det-shapes $shapes --runs 3 --warmup 3 \
    --repeats 20 --max-seconds 1 > "$root/$shapes-$name.jsonl" 2>> "$root/err.txt"
  echo "[$SECONDS s] $shapes $name rc=$?"
}
for shapes in bar; do
  one default $shapes
  one onegroup $shapes FASTATTN_CUDA_SM90_BWD_ORDER=longest_first
done
left=$((limit - SECONDS - 12))
timeout $left build/sm90/tests/fastattn_gpu_tests --gtest_filter='CudaSm90Backward.DeterministicIsBitwiseRepeatable:CudaSm90Backward.DeterministicOrders*' \
  > $root/tests.log 2>&1; echo "[$SECONDS s] tests rc=$? (limit ${left}s)"; grep -E "OK \]|FAIL|PASSED" $root/tests.log
cd "$root" && tar czf c.tgz c *.jsonl err.txt tests.log 2>/dev/null && rm -rf c *.jsonl err.txt tests.log
