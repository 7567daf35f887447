#!/usr/bin/env bash
# Session 29, the smaller call (less device time left): (1) gpu-sm90-ab.sh, the base build
# against `clel` (-DFASTATTN_SM90_KV_MULTICAST=1 and -DFASTATTN_SM90_ELECTED_RELEASE=1: d128
# unmasked rows run two-CTA clusters, every other kernel one release per consumer warpgroup),
# two rounds beside cuDNN, and clel's forward tests (CudaSm90.*, the cluster test among them);
# (2) the base build's sm90 backward varlen and deterministic tests (session 28's varlen groups).
set -u
root=$OUT
cap=${CAP:-420}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $root/gpu.txt
OUT=$root/fwd HEAD_DIMS="${HD_C3:-64;128}" VARIANT_HEAD_DIMS="128" \
  BUILD_VARIANTS="clel:-DFASTATTN_SM90_KV_MULTICAST=1,-DFASTATTN_SM90_ELECTED_RELEASE=1" \
  TEST_BUILD=clel TEST_FILTER="${TEST_FILTER_C3:-CudaSm90.ClustersGiveTheSameBits:CudaSm90.OddShapesMatchFloat64:CudaSm90.VarlenMatchesFloat64:CudaSm90.PlainLoopMatchesFloat64}" TEST_S=${TEST_S_C3:-80} ROUNDS=2 SANITIZE_FILTER= PROBE=0 \
  BUDGET_S=$((cap - 40)) bash tools/dev/gpu-sm90-ab.sh > /dev/null 2>&1
echo "[$SECONDS s] fwd done"
grep -E "rc=|tests|PASSED|FAILED|geomean|spill|ptxas" $root/fwd/summary.txt | head -40
left() { local l=$(($1 - SECONDS)); [ $l -gt $2 ] && l=$2; echo $l; }
t=build/sm90/tests/fastattn_gpu_tests
if [ -x $t ] && [ $(left $cap 200) -gt 20 ]; then
  timeout $(left $cap 200) $t --gtest_filter="${BWD_FILTER_C3:-CudaSm90Backward.Varlen*}" > $root/bwd-tests.log 2>&1
  echo "[$SECONDS s] bwd tests rc=$?"
  grep -E "^\[  (PASSED|FAILED) |^\[       OK|FAILED  \]|tests ran" $root/bwd-tests.log | tail -14
fi
cd $root && tar czf all.tgz fwd *.log 2>/dev/null && rm -rf fwd *.log
echo "[$SECONDS s] end"
