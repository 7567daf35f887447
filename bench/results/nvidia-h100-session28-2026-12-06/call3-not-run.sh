#!/usr/bin/env bash
# Session 28 call 3: varlen calls in groups of pairs. Build (d 64;128), the varlen, deterministic
# and small-shape CudaSm90Backward tests, then cuda_bench determinism on the bar shapes, pairs and
# pairs_varlen, each default (groups of 4) and FASTATTN_CUDA_SM90_BWD_ORDER=longest_first (one group).
set -u
root=$OUT
OUT=$root/bwd STAGES="build newtests det" HEAD_DIMS="64;128" TARGETS="fastattn_gpu_tests fastattn_cuda_bench" \
  NEWTESTS_FILTER='CudaSm90Backward.Varlen*:CudaSm90Backward.DeterministicIsBitwise*' \
  NEWTESTS_LIMIT_S=70 DET_ORDERS=longest_first DET_AB=0 DET_PAIRS=1 BUDGET_S=200 bash tools/dev/gpu-sm90-bwd.sh > /dev/null 2>&1
grep -E "rc=|determinism" $root/bwd/summary.txt | head -20
grep -E "^\[  (PASSED|FAILED) |^\[       OK|FAILED  \]" $root/bwd/newtests.log | tail -12
cd $root && tar czf bwd.tgz bwd && rm -rf bwd
