#!/usr/bin/env bash
# Session 32, A/B on any card (~150 s): do the two-CTA clusters pay with a 3-stage ring at
# d = 128? Builds carried (build/carry-s32b: build/sm90 base, d 64/128; build/sm90-cluster3 with
# -DFASTATTN_SM90_KV_MULTICAST=1 -DFASTATTN_SM90_D128_STAGES=3, d 128). Variants on / off set
# FASTATTN_CUDA_SM90_CLUSTER (the base build ignores it: its two rows are the spread), three
# rounds beside cuDNN; then the cluster test on cluster3 under memcheck and racecheck.
# carry ["build/calls", "build/carry-s32b"].
set -u
root=$OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $root/gpu.txt
bash tools/dev/carry-sm90-builds.sh unpack build/carry-s32b > $root/unpack.log 2>&1 || { cat $root/unpack.log; exit 3; }
OUT=$root/fwd HEAD_DIMS="64;128" VARIANT_HEAD_DIMS="128" \
  BUILD_VARIANTS="cluster3:-DFASTATTN_SM90_KV_MULTICAST=1,-DFASTATTN_SM90_D128_STAGES=3" \
  VARIANTS="on:FASTATTN_CUDA_SM90_CLUSTER=1 off:FASTATTN_CUDA_SM90_CLUSTER=0" TEST_ENV=FASTATTN_CUDA_SM90_CLUSTER=1 \
  BUILD_STAGES=none CARRIED_BUILDS=1 TEST_BUILD=cluster3 TEST_FILTER='CudaSm90.ClustersGiveTheSameBits:CudaSm90.SmallShapes*:CudaSm90.Overlap*' \
  TEST_S=90 ROUNDS=${ROUNDS:-3} SANITIZE_FILTER='CudaSm90.ClustersGiveTheSameBits' PROBE=0 \
  BUDGET_S=${BUDGET_S:-330} bash tools/dev/gpu-sm90-ab.sh > /dev/null 2>&1
echo "[$SECONDS s] fwd done"
grep -E "rc=|PASSED|FAILED|SUMMARY|^\[sm90" $root/fwd/summary.txt | cut -c1-400 | head -40
