#!/usr/bin/env bash
# Session 31: session 29's call s29-c2.sh over builds made on the dev machine and carried
# (tools/dev/carry-sm90-builds.sh: build/sm90, build/sm90-cluster, build/sm90-elected), so the
# forward A/B gets the minutes the three builds took. Session 29's description:
# one call on an H100 or H200:
#  (1) issue 15's A/B (gpu-sm90-ab.sh, two rounds, cuDNN beside): the base build against
#      `cluster` (-DFASTATTN_SM90_KV_MULTICAST=1: two-CTA clusters sharing each K/V tile by TMA
#      multicast, d128 unmasked) and `elected` (-DFASTATTN_SM90_ELECTED_RELEASE=1: one arrival
#      per consumer warpgroup on a stage's empty barrier); the cluster build's cluster test;
#  (2) the elected build's forward tests (CudaSm90.*);
#  (3) the base build's sm90 backward varlen and deterministic tests (session 28's varlen groups);
#  (4) with time left, cuda_bench determinism --det-shapes pairs_varlen, default and one group.
set -u
root=$OUT
cap=${CAP:-565}  # seconds for the whole call (the device call's limit less a margin)
# Smaller calls: CAP=300 BV=cluster:-DFASTATTN_SM90_KV_MULTICAST=1 ROUNDS=1 (base against clusters).
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $root/gpu.txt
bash tools/dev/carry-sm90-builds.sh unpack build/carry-s31 > $root/unpack.log 2>&1 || { cat $root/unpack.log; exit 3; }
OUT=$root/fwd HEAD_DIMS="64;128" VARIANT_HEAD_DIMS="128" \
  BUILD_VARIANTS="${BV-cluster:-DFASTATTN_SM90_KV_MULTICAST=1 elected:-DFASTATTN_SM90_ELECTED_RELEASE=1}" \
  BUILD_STAGES=none CARRIED_BUILDS=1 TEST_BUILD=cluster TEST_FILTER='CudaSm90.ClustersGiveTheSameBits' TEST_S=90 ROUNDS=${ROUNDS:-2} SANITIZE_FILTER= PROBE=0 \
  BUDGET_S=$((cap * 6 / 10)) bash tools/dev/gpu-sm90-ab.sh > /dev/null 2>&1
echo "[$SECONDS s] fwd done"
grep -E "rc=|tests|PASSED|FAILED|geomean|spill|ptxas" $root/fwd/summary.txt | head -40
left() { local l=$(($1 - SECONDS)); [ $l -gt $2 ] && l=$2; echo $l; }
t=build/sm90-elected/tests/fastattn_gpu_tests
if [ -x $t ] && [ $(left $((cap - 5)) 90) -gt 20 ]; then
  timeout $(left $((cap - 5)) 90) $t --gtest_brief=1 --gtest_filter='CudaSm90.*' > $root/elected-tests.log 2>&1
  echo "[$SECONDS s] elected tests rc=$?"; tail -4 $root/elected-tests.log
fi
t=build/sm90/tests/fastattn_gpu_tests
if [ -x $t ] && [ $(left $cap 200) -gt 20 ]; then
  timeout $(left $cap 200) $t --gtest_filter='CudaSm90Backward.Varlen*:CudaSm90Backward.Deterministic*' > $root/bwd-tests.log 2>&1
  echo "[$SECONDS s] bwd tests rc=$?"
  grep -E "^\[  (PASSED|FAILED) |^\[       OK|FAILED  \]|tests ran" $root/bwd-tests.log | tail -14
fi
b=build/sm90/bench/cuda/fastattn_cuda_bench
if [ -x $b ] && [ $(left $((cap + 5)) 60) -gt 30 ]; then
  timeout $(left $((cap + 5)) 30) $b determinism --det-shapes pairs_varlen --runs 3 --warmup 3 --repeats 20 --max-seconds 1 > $root/pairs-varlen.jsonl 2> $root/pairs.err
  timeout $(left $((cap + 10)) 30) env FASTATTN_CUDA_SM90_BWD_ORDER=longest_first $b determinism --det-shapes pairs_varlen --runs 3 --warmup 3 --repeats 20 --max-seconds 1 \
    > $root/pairs-varlen-longestfirst.jsonl 2>> $root/pairs.err
  echo "[$SECONDS s] pairs_varlen done"
fi
cd $root && tar czf all.tgz fwd *.log *.jsonl *.err 2>/dev/null && rm -rf fwd *.log *.jsonl *.err
echo "[$SECONDS s] end"
